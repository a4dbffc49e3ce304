"""Models by name, randomly initialised (nothing is downloaded), with a valid input.

    build("torchvision:resnet18", batch=1, image_size=64) -> (model, example_input)
    build("transformer:encoder", batch=8)
"""

from __future__ import annotations

import torch

# The models the correctness suite and the benchmarks cover.
TORCHVISION_MODELS = [
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_1",
    "googlenet", "inception_v3", "densenet121", "efficientnet_b0", "shufflenet_v2_x1_0",
    "regnet_y_400mf", "convnext_tiny", "vit_b_16",
]
ALL_MODELS = [f"torchvision:{name}" for name in TORCHVISION_MODELS] + ["transformer:encoder"]

# Smallest image side a model accepts, where it is above what callers usually ask for.
_MIN_IMAGE_SIZE = {"inception_v3": 75}


def check_spec(spec: str) -> None:
    """Raises the ValueError `build(spec)` would raise for an unknown model, without
    building anything."""
    family, _, name = spec.partition(":")
    if family == "torchvision":
        import torchvision.models as models

        if name not in models.list_models(module=models):
            raise ValueError(f"unknown torchvision classification model '{name}'")
    elif not (family == "transformer" and name == "encoder"):
        raise ValueError(
            f"unknown model '{spec}': expected torchvision:NAME (e.g. torchvision:resnet18) "
            f"or transformer:encoder"
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


def build(spec: str, batch: int = 1, image_size: int = 64, seed: int = 0, num_classes: int = 1000):
    """(model in eval mode, example input) for `family:name`."""
    check_spec(spec)
    family, _, name = spec.partition(":")
    torch.manual_seed(seed)
    if family == "torchvision":
        model, size = _torchvision(name, image_size, num_classes)
        example = torch.randn(batch, 3, size, size)
    elif family == "transformer" and name == "encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                 batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        example = torch.randn(batch, 16, 64)
    return model.eval(), example
