"""Models by name, randomly initialised (nothing is downloaded), with a valid input.

    build("torchvision:resnet18", batch=1, image_size=64) -> (model, example_input)
    build("transformer:encoder", batch=8)
    build("timm:convnext_atto", image_size=64)
    build_call("hf:bert", batch=2) -> (model, example_args, example_kwargs)

`hf:NAME` are HuggingFace `transformers` models built from small configs (hidden size 128,
2 layers): BERT with an attention mask (the second sequence padded), GPT-2, T5
(encoder-decoder), ViT and a Llama-style decoder. Their masking code reads tensor values
on the host, so they run through `torch.compile(backend="nimble")`, not `prepare`.
`timm:NAME` is any model of `timm` (the test extra), built with `pretrained=False`; a model
made for one image size (its `fixed_input_size`, vision transformers and MLP mixers mostly) gets
that size whatever `image_size` asks.

Every model gets `realistic_weights`: the libraries' own initialisations leave some outputs at
about zero (torchvision's mobilenet_v2 logits 1e-9, efficientnet_b0 5e-14; ConvNeXt's layer
scale 1e-6), where a comparison with eager passes for an all-zero or stale result.
"""

from __future__ import annotations

import math
import re
from typing import Callable

import torch
from torch import nn

# The models the correctness suite and the benchmarks cover.
TORCHVISION_MODELS = [
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_1",
    "googlenet", "inception_v3", "densenet121", "efficientnet_b0", "shufflenet_v2_x1_0",
    "regnet_y_400mf", "convnext_tiny", "vit_b_16",
]
ALL_MODELS = [f"torchvision:{name}" for name in TORCHVISION_MODELS] + ["transformer:encoder"]
HF_MODELS = ["hf:bert", "hf:gpt2", "hf:t5", "hf:vit", "hf:llama"]
# timm's families, for the lowering and replay suites: residual and grouped convnets,
# mobile nets (depthwise, squeeze-excite, hard activations), re-parametrisable nets, hybrids,
# vision transformers, MLP mixers.
TIMM_MODELS = [
    "resnet10t", "resnet18d", "resnext26ts", "regnetx_002", "regnety_002", "dla34",
    "hrnet_w18_small", "res2net50_14w_8s", "selecsls42b", "repvgg_a0", "rexnet_100",
    "ghostnet_100", "mobilenetv3_small_050", "mobilenetv2_050", "efficientnet_b0",
    "efficientnet_lite0", "mnasnet_050", "tinynet_e", "lcnet_050", "hardcorenas_a",
    "fbnetc_100", "spnasnet_100", "semnasnet_050", "mobileone_s0", "ghostnetv2_100",
    "hgnetv2_b0", "ese_vovnet19b_slim", "cspresnet50", "darknet17", "densenet121",
    "xception41", "nf_regnet_b0", "mobilevit_xxs", "mobilevitv2_050", "efficientformer_l1",
    "convnext_atto", "convnextv2_atto", "edgenext_xx_small", "poolformer_s12", "fastvit_t8",
    "efficientvit_b0", "repghostnet_050", "tiny_vit_5m_224", "vit_tiny_patch16_224",
    "deit_tiny_patch16_224", "mixer_s32_224", "resmlp_12_224", "gmlp_ti16_224", "levit_128s",
    "pit_ti_224", "coat_lite_tiny", "xcit_nano_12_p16_224",
]

# Smallest image side a model accepts, where it is above what callers usually ask for.
_MIN_IMAGE_SIZE = {"inception_v3": 75}


_PRODUCTS = (nn.modules.conv._ConvNd, nn.Linear)
_NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)
# Layer-scale parameters, or modules holding one (torchvision's ConvNeXt, timm's LayerScale,
# XCiT, ResMLP, PoolFormer, ...): the libraries start them at 1e-6 or 1e-5, as if the residual
# branch were not there.
_LAYER_SCALE = re.compile(r"gamma\w*|layer_scale\w*|ls\d*")


def realistic_weights(model: nn.Module, run: Callable[[], object], seed: int = 0) -> nn.Module:
    """Gives `model` weights whose activations and outputs are of order one, as a trained
    model's are; deterministic from `seed`, the global random state untouched. Convolution and
    linear weights ~N(0, 1/fan_in) and biases U(-0.1, 0.1), then, in one call of `run()` (the
    model on a typical input), each such layer scaled where it first runs so that its output's
    root mean square is 1: through residual stacks, squeeze-excite gates and attention the
    activations stay O(1) and every branch reaches the output. Batch and layer norms get
    affine weights U(0.5, 1.5), biases U(-0.2, 0.2), running means U(-0.2, 0.2) and variances
    U(0.5, 2); constant layer-scale gammas become 1, gates started at zero U(0.5, 1.5)."""
    generator = torch.Generator().manual_seed(seed)

    def uniform(t: torch.Tensor, low: float, high: float) -> None:
        t.copy_(torch.rand(t.shape, generator=generator) * (high - low) + low)

    def normal(t: torch.Tensor, std: float) -> None:
        t.copy_(torch.randn(t.shape, generator=generator) * std)

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, _PRODUCTS):
                transposed = isinstance(module, nn.modules.conv._ConvTransposeNd)
                fan_in = module.weight.shape[0] if transposed else module.weight[0].numel()
                normal(module.weight, 1 / math.sqrt(fan_in))
            elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
                normal(module.in_proj_weight, 1 / math.sqrt(module.embed_dim))
            elif isinstance(module, _NORMS):
                if getattr(module, "running_var", None) is not None:
                    uniform(module.running_mean, -0.2, 0.2)
                    uniform(module.running_var, 0.5, 2.0)
                if getattr(module, "weight", None) is not None:
                    uniform(module.weight, 0.5, 1.5)
                    uniform(module.bias, -0.2, 0.2)
                continue
            for name in ("bias", "in_proj_bias"):
                if isinstance(getattr(module, name, None), torch.Tensor):
                    uniform(getattr(module, name), -0.1, 0.1)
        for name, p in model.named_parameters():
            if p.numel() < 2 or not bool((p == p.flatten()[0]).all()):
                continue  # drawn above, or not a constant the library set
            parts = name.split(".")
            if any(_LAYER_SCALE.fullmatch(part) for part in parts):
                p.fill_(1.0)
            elif parts[-1] == "weight" and p.flatten()[0] == 0:
                uniform(p, 0.5, 1.5)  # a gate started at zero (ConvNeXt-V2's response norm)

    scaled: set[int] = set()

    def unit_output(module, inputs, output):
        if id(module) in scaled or not isinstance(output, torch.Tensor):
            return None
        scaled.add(id(module))
        rms = output.detach().double().pow(2).mean().sqrt().item()
        if not (rms > 0 and math.isfinite(rms)):
            return None
        module.weight.div_(rms)
        if module.bias is not None:
            module.bias.div_(rms)
        # A plain product is linear in (weight, bias); a subclass (timm's weight-standardised
        # convolutions) is run again.
        return output / rms if type(module) in (nn.Conv1d, nn.Conv2d, nn.Linear) else module.forward(*inputs)

    hooks = [m.register_forward_hook(unit_output) for m in model.modules() if isinstance(m, _PRODUCTS)]
    try:
        with torch.no_grad():
            run()
    finally:
        for hook in hooks:
            hook.remove()
    return model


def check_spec(spec: str) -> None:
    """Raises the ValueError `build(spec)` would raise for an unknown model, without
    building anything."""
    family, _, name = spec.partition(":")
    if family == "torchvision":
        import torchvision.models as models

        if name not in models.list_models(module=models):
            raise ValueError(f"unknown torchvision classification model '{name}'")
    elif family == "hf":
        if spec not in HF_MODELS:
            raise ValueError(f"unknown model '{spec}': the hf: models are {HF_MODELS}")
    elif family == "timm":
        try:
            import timm
        except ImportError as e:
            raise ValueError(f"{spec} needs timm (pip install timm, or nimble[test])") from e
        if not timm.is_model(name):
            raise ValueError(f"unknown timm model '{name}' (timm.list_models() lists them)")
    elif not (family == "transformer" and name == "encoder"):
        raise ValueError(
            f"unknown model '{spec}': expected torchvision:NAME (e.g. torchvision:resnet18), "
            f"timm:NAME, transformer:encoder or one of {HF_MODELS}"
        )


def _torchvision(name: str, image_size: int, num_classes: int) -> tuple[torch.nn.Module, int]:
    import torchvision.models as models

    kwargs: dict = {"weights": None, "num_classes": num_classes}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=False)
    size = max(image_size, _MIN_IMAGE_SIZE.get(name, 1))
    if name.startswith("vit_"):
        # A ViT is built for one image size; patches are 16 or 32 pixels.
        patch = 32 if "_32" in name else 14 if "_14" in name else 16
        size = max(patch, size // patch * patch)
        kwargs["image_size"] = size
    return models.get_model(name, **kwargs), size


def _timm(name: str, image_size: int, num_classes: int) -> tuple[torch.nn.Module, int]:
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=num_classes)
    config = model.pretrained_cfg
    size = config["input_size"][-1] if config.get("fixed_input_size") else image_size
    return model, size


def _hf(name: str, batch: int, sequence: int) -> tuple[torch.nn.Module, dict]:
    import transformers as tf

    small = dict(num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    ids = torch.randint(0, 1000, (batch, sequence))
    mask = torch.ones(batch, sequence, dtype=torch.long)
    mask[1:, sequence * 3 // 4:] = 0  # padding: the mask is not all ones
    text = dict(input_ids=ids, attention_mask=mask)
    if name == "bert":
        config = tf.BertConfig(hidden_size=128, vocab_size=1000, max_position_embeddings=64, **small)
        return tf.BertModel(config), text
    if name == "gpt2":
        config = tf.GPT2Config(n_embd=128, n_layer=2, n_head=2, n_inner=512, vocab_size=1000,
                               n_positions=64, bos_token_id=0, eos_token_id=0)
        return tf.GPT2Model(config), dict(text, use_cache=False)
    if name == "t5":
        config = tf.T5Config(d_model=128, d_ff=512, d_kv=64, num_layers=2, num_decoder_layers=2,
                             num_heads=2, vocab_size=1000)
        return tf.T5Model(config), dict(text, decoder_input_ids=ids[:, : sequence // 2].clone(),
                                        use_cache=False)
    if name == "vit":
        config = tf.ViTConfig(hidden_size=128, image_size=32, patch_size=8, **small)
        return tf.ViTModel(config), dict(pixel_values=torch.randn(batch, 3, 32, 32))
    config = tf.LlamaConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=512, vocab_size=1000,
                            max_position_embeddings=64)
    return tf.LlamaModel(config), dict(text, use_cache=False)


def build_call(spec: str, batch: int = 1, image_size: int = 64, sequence: int = 32, seed: int = 0):
    """(model in eval mode, example positional arguments, example keyword arguments) for
    any model, `hf:` ones included (`sequence`: their token count)."""
    check_spec(spec)
    family, _, name = spec.partition(":")
    if family == "hf":
        torch.manual_seed(seed)
        model, kwargs = _hf(name, batch, sequence)
        model.eval()
        realistic_weights(model, lambda: model(**kwargs), seed)
        return model, (), kwargs
    model, example = build(spec, batch=batch, image_size=image_size, seed=seed)
    return model, (example,), {}


def build(spec: str, batch: int = 1, image_size: int = 64, seed: int = 0, num_classes: int = 1000):
    """(model in eval mode, example input) for `family:name` (all but `hf:` models)."""
    check_spec(spec)
    family, _, name = spec.partition(":")
    if family == "hf":
        raise ValueError(f"{spec} takes keyword arguments: build it with build_call()")
    torch.manual_seed(seed)
    if family in ("torchvision", "timm"):
        make = _torchvision if family == "torchvision" else _timm
        model, size = make(name, image_size, num_classes)
        example = torch.randn(batch, 3, size, size)
    elif family == "transformer" and name == "encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                 batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        example = torch.randn(batch, 16, 64)
    model.eval()
    # Scaled on a batch of two other inputs: the example's own numbers are not special.
    typical = torch.randn((2,) + tuple(example.shape[1:]), generator=torch.Generator().manual_seed(seed))
    realistic_weights(model, lambda: model(typical), seed)
    return model, example
