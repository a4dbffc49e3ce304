"""The CUDA runtime's fixes of issue 45: what a CPU can show runs everywhere; each GPU-only
failure is reproduced by a test that skips without a device. The C++ side of the same
mechanisms (pool streams, a failed rebuild, the copy refusal, SymInt returns, explicit
generators, FP32 references) is tests/cpp/runtime/cuda_runtime_mechanisms_test.cpp."""

import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import nimble
from nimble.replay.capture import Recorder, _returns_number

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
aten = torch.ops.aten
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_nimble_never_creates_or_destroys_a_cuda_stream():
    # A stream of nimble's own died with its executor while tensors the caching allocator
    # had seen used on it lived on; freeing them recorded an event on the dead stream and
    # aborted the process. Streams come from torch's pool, which never destroys them.
    forbidden = re.compile(r"cudaStreamCreate|cudaStreamDestroy|getStreamFromExternal")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "csrc").rglob("*"))
        if path.suffix in {".h", ".cpp", ".cu", ".cuh", ".inc"}
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if forbidden.search(line)
    ]
    assert not offenders, offenders
    handles = (ROOT / "csrc/runtime/cuda/cuda_handles.h").read_text()
    assert "getStreamFromPool" in handles


@pytest.mark.parametrize("func", [
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._efficient_attention_forward.default,
])
def test_sizes_returned_by_attention_kernels_are_not_values(func):
    assert not _returns_number(func)


@pytest.mark.parametrize("func", [aten._local_scalar_dense.default, aten._nnz.default])
def test_numbers_returned_by_ops_are_still_values(func):
    assert _returns_number(func)


def test_flash_attention_in_half_precision_is_recorded_and_built():
    # What CUDA runs for fp16 scaled_dot_product_attention, on meta tensors: the recorder
    # and the C++ program builder take its SymInt returns as the shapes they are.
    from nimble import _C
    from nimble.replay.build_replay import schema_arguments, schema_returns

    q = torch.randn(1, 2, 16, 8, device="meta", dtype=torch.float16)
    with Recorder() as recorder:
        out = aten._scaled_dot_product_flash_attention(q, q, q)
    assert [type(v) for v in out[4:6]] == [int, int]
    (op,) = recorder.trace.ops
    builder = _C.ProgramBuilder()
    builder.add_input(q)
    builder.add_op(op.func._schema.name, op.func._schema.overload_name,
                   schema_arguments(op.func, op.args, op.kwargs), schema_returns(op.func, op.out))


def _run_isolated(code: str, timeout: int = 1200) -> None:
    """Runs `code` in a fresh interpreter: an abort must fail the test, not end pytest."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@needs_gpu
def test_freeing_multi_stream_programs_with_their_outputs_held_never_aborts():
    # Issue 45: "terminate called ... CUDA error: invalid device context" from the caching
    # allocator's insert_events in ~TensorImpl, after a multi-stream program was freed.
    _run_isolated("""
        import gc, torch, nimble
        from nimble.zoo import build
        model, example = build("torchvision:googlenet", batch=1, image_size=64)
        model, example = model.cuda().eval(), example.cuda()
        held = []
        for cycle in range(200):
            fast = nimble.Nimble(model).prepare(example, streams=4, copy_outputs=False)
            held.append(fast(example))
            held = held[-8:]
            del fast
            if cycle % 20 == 0:
                gc.collect()
        del held
        gc.collect()
        torch.cuda.synchronize()
    """)


@needs_gpu
def test_fp16_attention_replays_on_cuda():
    # Flash or cuDNN attention, whose SymInt returns were refused as "not static".
    class Attention(torch.nn.Module):
        def forward(self, x):
            q = x.view(2, 32, 4, 16).transpose(1, 2)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2)

    model = Attention().cuda().eval()
    x = torch.randn(2, 32, 64, device="cuda", dtype=torch.float16)
    fast = nimble.Nimble(model).prepare(x)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=2e-3, atol=2e-3)


@needs_gpu
def test_a_copy_to_the_host_inside_the_model_is_refused_naming_the_op():
    class CopiesToHost(torch.nn.Module):
        def forward(self, x):
            return (x * 2).cpu().cuda() + 1

    x = torch.randn(8, device="cuda")
    with pytest.raises(nimble.UnsupportedOpError, match="_to_copy.*between host and device"):
        nimble.Nimble(CopiesToHost()).prepare(x)
