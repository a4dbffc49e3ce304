"""`torch.compile(model, backend="nimble")`: every graph dynamo hands over is replayed by
nimble (`strict` makes a graph nimble could not replay an error instead of an eager run, so
these tests cannot pass on eager fallbacks), and the results equal eager's. Models: the
zoo and HuggingFace `transformers` models built from small configs with random weights."""

import copy
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import build, build_call

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STRICT = {"strict": True}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def graph_breaks() -> int:
    return sum(counters["graph_break"].values())


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def other_call(kwargs: dict, seed: int) -> dict:
    """The example call with fresh values of the same shapes (a stale replay input or
    output would show)."""
    torch.manual_seed(seed)
    fresh = {}
    for key, value in kwargs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            fresh[key] = torch.randn_like(value)
        elif isinstance(value, torch.Tensor) and key.endswith("input_ids"):
            fresh[key] = torch.randint_like(value, 1000)
        else:
            fresh[key] = value
    return fresh


# model -> (graphs dynamo makes, graph breaks) with transformers 5.23.0.
HF_GRAPHS = {"hf:bert": (1, 0), "hf:gpt2": (1, 0), "hf:t5": (1, 0), "hf:vit": (1, 0),
             "hf:llama": (1, 0)}


@pytest.mark.parametrize("spec", sorted(HF_GRAPHS))
def test_transformers_models_match_eager(spec):
    model, _, kwargs = build_call(spec, batch=2, sequence=16)
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.no_grad():
        for seed in (0, 1, 2):
            call = kwargs if seed == 0 else other_call(kwargs, seed)
            # Linear layers are lowered to oneDNN and prepacked BLAS calls (docs/cpu.md).
            assert_matches_eager(compiled(**call)[0], model(**call)[0], what=f"{spec} seed {seed}")
    expected_graphs, breaks = HF_GRAPHS[spec]
    print(f"{spec}: {graphs()} graphs, {graph_breaks()} graph breaks, "
          f"{counters['nimble']['ops_replayed']} ops replayed")
    assert (graphs(), graph_breaks()) == (expected_graphs, breaks)
    # Each graph replayed by one program; no graph ran eagerly.
    assert counters["nimble"]["programs_prepared"] == expected_graphs
    assert counters["nimble"]["graphs_run_eagerly"] == 0


def test_bert_with_a_mask_is_refused_by_prepare_and_replayed_through_compile():
    model, _, kwargs = build_call("hf:bert", batch=2, sequence=16)
    assert not bool(kwargs["attention_mask"].all())
    with pytest.raises(nimble.NotStaticError, match="_local_scalar_dense"):
        nimble.Nimble(model).prepare((), kwargs)
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.no_grad():
        expected = model(**kwargs).last_hidden_state
        assert_matches_eager(compiled(**kwargs).last_hidden_state, expected, tolerance=1e-5)
    assert counters["nimble"]["programs_prepared"] == 1


@pytest.mark.parametrize("spec", ["torchvision:resnet18", "torchvision:mobilenet_v3_small",
                                  "torchvision:inception_v3", "transformer:encoder"])
def test_zoo_models_match_eager(spec):
    model, example = build(spec, batch=2, image_size=32)
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.no_grad(), warnings.catch_warnings():
        # No side effect of nimble's own making to report (the graph's first call compiles
        # its Python code; the backend records what the graph returns).
        warnings.filterwarnings("error", message="nimble")
        for seed in (0, 1):
            torch.manual_seed(seed)
            x = torch.randn_like(example)
            # Convolutions are lowered to oneDNN and MKL calls (passes/cpu_lowering.h).
            assert_matches_eager(compiled(x), model(x), what=f"{spec} seed {seed}")
    assert counters["nimble"]["programs_prepared"] == graphs() == 1
    assert graph_breaks() == 0


def test_options_reach_prepare():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8)).eval()
    for bn in (model[1], model[4]):  # statistics that folding must get right
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    example = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(example)
        plain = torch.compile(model, backend="nimble", options={**STRICT, "lower_for_cpu": False})
        torch.testing.assert_close(plain(example), expected, rtol=0, atol=0)
        plain_ops = counters["nimble"]["ops_replayed"]
        for options in ({"fold_batchnorm": True}, {"streams": 2, "plan_memory": False}):
            torch._dynamo.reset()
            counters.clear()
            compiled = torch.compile(model, backend="nimble", options={**STRICT, **options})
            assert_matches_eager(compiled(example), expected)
            assert counters["nimble"]["programs_prepared"] == 1
            if "fold_batchnorm" in options:  # each batch norm folded into its convolution
                assert counters["nimble"]["ops_replayed"] < plain_ops
    torch._dynamo.reset()
    # dynamo wraps the backend's ValueError in its own error, the message kept.
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                       match=r"ValueError: unknown option\(s\) \['tune'\] for torch.compile") as raised:
        torch.compile(model, backend="nimble", options={"tune": "db.sqlite"})(example)
    assert isinstance(raised.value.inner_exception, ValueError)


def test_tuned_kernels_from_a_database_are_bound_into_each_graph(tmp_path, monkeypatch):
    """A database tuned on a prepared model serves the compiled model's graphs: the same
    convolutions have the same signatures there."""
    model, example = build("torchvision:squeezenet1_1", batch=1, image_size=32)
    fast = nimble.Nimble(model).prepare(example, lower_for_cpu=False)  # ATen's, to tune
    db = str(tmp_path / "tune.db")
    tasks = nimble._C.kernels.tasks(fast.replay)
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=8 * len(tasks),
                database=db, slot_seconds=1e-3, min_repeat_seconds=2e-4, progress=False)
    convolutions = len(fast.use_tuned(db))
    bind, verdicts = nimble._C.kernels.bind, []

    def recording_bind(*args, **kwargs):
        report = bind(*args, **kwargs)
        verdicts.extend(report)
        return report

    monkeypatch.setattr(nimble._C.kernels, "bind", recording_bind)
    # ATen's convolutions, as tuned (a lowered graph runs the lowering's kernels the database
    # chose instead: test_tuned_lowering.py).
    compiled = torch.compile(model, backend="nimble",
                             options={**STRICT, "tuned": db, "lower_for_cpu": False})
    with torch.no_grad():
        torch.testing.assert_close(compiled(example), model(example), rtol=1e-4, atol=1e-5)
    assert counters["nimble"]["programs_prepared"] == 1
    # Every convolution found its record (its activation, functional in this graph, is
    # absorbed as the in-place one is in the prepared program); binding then keeps those
    # faster than ATen when timed now (the default min_speedup of 1).
    assert counters["nimble"]["tuned_records_found"] == convolutions == 26 == len(verdicts)
    assert all(v["bound"] == (v["aten_ms"] >= v["tuned_ms"]) for v in verdicts), verdicts
    assert counters["nimble"]["tuned_kernels_bound"] == sum(v["bound"] for v in verdicts)


def test_training_matches_eager():
    """AOTAutograd's forward and backward graphs replayed; gradients, the optimizer's
    updates and batch-norm running statistics as in eager, over several steps, with two
    forwards before one backward (each forward's saved tensors are its own)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        torch.manual_seed(10 + step)
        x, y = torch.randn(2, 4, 3, 8, 8), torch.randint(0, 10, (2, 4))
        loss = sum(torch.nn.functional.cross_entropy(compiled(x[i]), y[i]) for i in range(2))
        expected = sum(torch.nn.functional.cross_entropy(reference(x[i]), y[i]) for i in range(2))
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        for opt in (optimizer, reference_optimizer):
            opt.step()
            opt.zero_grad()
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)
    # One graph: its forward and its backward, each one program.
    assert graphs() == 1 and counters["nimble"]["programs_prepared"] == 2


def test_training_bert_with_a_mask():
    model, _, kwargs = build_call("hf:bert", batch=2, sequence=16)
    model.config.hidden_dropout_prob = model.config.attention_probs_dropout_prob = 0.0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    compiled(**kwargs).last_hidden_state.square().mean().backward()
    reference(**kwargs).last_hidden_state.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        # The pooler's output is not in the loss: eager leaves its gradients None,
        # AOTAutograd's backward (with any backend) makes them zeros.
        expected = torch.zeros_like(p) if q.grad is None else q.grad
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-5, msg=name)
    assert counters["nimble"]["programs_prepared"] == 2 and graph_breaks() == 0


def mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                               torch.nn.Linear(16, 4)).eval()


# The mlp's linear layers are lowered to nimble's product, which sums in another order than
# ATen's addmm: the tests below compare within float32 rounding (assert_close's defaults).


def test_guard_failures_recompile_and_each_shape_gets_a_program():
    model = mlp()
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.no_grad():
        for batch in (2, 3, 4, 2):  # from the second shape on, dynamo's graph is dynamic
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
        assert graphs() == 2  # static, then dynamic in the batch
        # The dynamic graph (dynamo tries it first) has a program per shape: 3, 4, then 2.
        assert counters["nimble"]["programs_prepared"] == 4
        # A changed dtype fails dynamo's guards: a new graph.
        x = torch.randn(2, 8, dtype=torch.float64)
        model.double()
        torch.testing.assert_close(compiled(x), model(x))
        assert graphs() == 3
    assert graph_breaks() == 0


def test_shapes_marked_dynamic_get_one_program_per_shape():
    model = mlp()
    compiled = torch.compile(model, backend="nimble", options=STRICT, dynamic=True)
    with torch.no_grad():
        for rows in (3, 5, 3):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert graphs() == 1 and counters["nimble"]["programs_prepared"] == 2
    # Its sizes are symbols and LayerNorm's eps a tensor read with .item(): AOTAutograd
    # makes those graph inputs.
    assert counters["nimble"]["graphs_without_aot_autograd"] == 0


def test_graphs_without_grad_skip_aot_autograd():
    model = mlp()
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.no_grad():
        x = torch.randn(3, 8)
        torch.testing.assert_close(compiled(x), model(x))
    assert counters["nimble"]["graphs_without_aot_autograd"] == 1
    x = torch.randn(3, 8)  # with grad: another graph (dynamo guards on grad mode), through AOT
    torch.testing.assert_close(compiled(x), model(x))
    assert graphs() == 2 and counters["nimble"]["graphs_without_aot_autograd"] == 1


def test_inference_mode_and_gradients_of_inputs_only():
    model = mlp()
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.inference_mode():
        for seed in (0, 1):
            x = torch.randn(3, 8)
            torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(3, 8, requires_grad=True)
    compiled(x).square().sum().backward()
    got, x.grad = x.grad, None
    model(x).square().sum().backward()
    torch.testing.assert_close(got, x.grad)
    assert counters["nimble"]["graphs_run_eagerly"] == 0


def test_instances_of_one_class_keep_their_own_parameters():
    """Dynamo runs the same graph for every instance of a module class, with that
    instance's parameters as arguments: each gets its own program."""
    models = [mlp(seed) for seed in (0, 1)]
    x = torch.randn(2, 8)
    compiled = [torch.compile(model, backend="nimble", options=STRICT) for model in models]
    with torch.no_grad():
        for model, fast in zip(models + models, compiled + compiled, strict=True):
            torch.testing.assert_close(fast(x), model(x))
        # Loaded weights are seen by the next replay (parameters are used in place).
        models[0].load_state_dict(models[1].state_dict())
        torch.testing.assert_close(compiled[0](x), models[1](x))
    assert graphs() == 1 and counters["nimble"]["programs_prepared"] == 2


@torch.library.custom_op("nimble_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


def with_a_python_op(x):
    return twice(x.sin()) + 1


def test_a_graph_nimble_cannot_replay_runs_eagerly_or_raises_with_strict():
    x = torch.randn(4)
    with pytest.warns(UserWarning, match="runs this inference graph eagerly.*UnsupportedOpError"):
        result = torch.compile(with_a_python_op, backend="nimble")(x)
    torch.testing.assert_close(result, with_a_python_op(x))
    torch.testing.assert_close(torch.compile(with_a_python_op, backend="nimble")(x + 1),
                               with_a_python_op(x + 1))
    assert counters["nimble"]["graphs_run_eagerly"] == 1
    torch._dynamo.reset()
    with pytest.raises(nimble.UnsupportedOpError, match="nimble_test.twice"):
        torch.compile(with_a_python_op, backend="nimble", options=STRICT)(x)


def test_import_registers_the_backend():
    assert "nimble" in torch._dynamo.list_backends()


def test_entry_point_needs_no_import(tmp_path):
    """setup.py's torch_dynamo_backends entry point: dynamo finds the backend in a process
    that never imported nimble (and nimble's import then registers nothing twice)."""
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    script = (
        "import sys, torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "x = torch.randn(3, 4)\n"
        "assert 'nimble' not in sys.modules\n"
        "compiled = torch.compile(model, backend='nimble', options={'strict': True})\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(compiled(x), model(x))\n"
        "from torch._dynamo.utils import counters\n"
        "assert counters['nimble']['programs_prepared'] == 1, dict(counters['nimble'])\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_prepare_outside_torch_compile_does_not_import_dynamo():
    """A dispatch mode's first call imports torch._dynamo (0.8 s) unless capture.py's
    Recorder says it need not; prepare runs no dynamo, and the backend above still does."""
    script = (
        "import sys, torch, nimble\n"
        "layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()\n"
        "x = torch.randn(2, 5, 16)\n"
        "with torch.no_grad():\n"
        "    fast = nimble.Nimble(layer).prepare(x)\n"
        "    torch.testing.assert_close(fast(x), layer(x))\n"
        "assert 'torch._dynamo' not in sys.modules, 'prepare imported torch._dynamo'\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_graphs_are_nimble_cuda_graphs():
    model, example = build("torchvision:resnet18", batch=2, image_size=64)
    model, example = model.cuda(), example.cuda()
    compiled = torch.compile(model, backend="nimble", options=STRICT)
    with torch.no_grad():
        kept = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            x = torch.randn_like(example)
            kept.append((compiled(x), model(x)))
        for got, expected in kept:  # an earlier output is not overwritten by a later call
            torch.testing.assert_close(got, expected, rtol=2e-3, atol=2e-3)
    assert counters["nimble"]["programs_prepared"] == counters["nimble_executors"]["cuda-graph"] == 1
