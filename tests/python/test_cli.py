"""`python -m nimble bench` and `tune` from the command line; the bench's timing helper and
its CUDA report from fabricated measurements (the CUDA bench itself: test_bench_cuda.py)."""

import io
import json
import subprocess
import sys
import time

import pytest
import torch

from nimble.bench import cli, cuda
from nimble.zoo import build
from nimble.timing import CudaTimer, alternate, median_ms, wall_seconds

FIELDS = {"model", "eager_ms", "nimble_ms", "speedup", "prepare_s", "ops", "overhead_us_per_op",
          "multi_ms", "logical_streams", "physical_streams", "buffers_mb"}
# The CPU row, exactly: scripts read these keys.
CPU_FIELDS = FIELDS | {
    "batch", "image_size", "multi_vs_single", "syncs", "unplanned_mb", "eager_peak_mb", "pool_mb",
    "replay_peak_mb", "ops_own_ms", "of_which_free_us", "call_overhead_us", "threads",
    "parameters", "check_us", "check_us_per_100_params"}


def run(*args):
    return subprocess.run([sys.executable, "-m", "nimble", *args], capture_output=True, text=True)


def test_bench_json():
    done = run("bench", "--model", "transformer:encoder", "--runs", "3", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    # The profiler measuring peak memory raises no false alarm on a machine without a GPU.
    assert "ERROR" not in done.stderr, done.stderr
    row = json.loads(done.stdout)
    assert row.keys() == CPU_FIELDS
    assert row["ops"] > 0 and row["eager_ms"] > 0 and row["nimble_ms"] > 0
    # Per call and per op outside the kernels come from the same timed replays.
    assert row["call_overhead_us"] > 0
    assert abs(row["call_overhead_us"] - row["overhead_us_per_op"] * row["ops"]) <= 0.1 + row["ops"] * 1e-3
    # The one-stream replay's pool holds its working memory, inside the replay's peak.
    # (Against eager: at most eager's peak on the same ops, test_memory_plan.py; this
    # model's eager takes a fused path the replay does not, whose peak can be lower.)
    assert row["eager_peak_mb"] > 0 and 0 < row["pool_mb"] <= row["replay_peak_mb"]
    # The model checks before every call: timed, and far below the replay itself.
    assert row["parameters"] > 0 and 0 < row["check_us"] < row["nimble_ms"] * 1e3


def test_bench_without_out_buffers_preallocates_nothing():
    done = run("bench", "--model", "torchvision:squeezenet1_1", "--image-size", "32", "--runs",
               "2", "--warmup", "1", "--out-variant-max-bytes", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["buffers_mb"] == 0 and row["eager_peak_mb"] > 0
    assert run("bench", "--out-variant-max-bytes", "-1").returncode == 2


def test_bench_accepts_the_lowerings_float_rounding():
    # resnet50's prepacked convolutions differ from eager by up to 1e-4: the bench's own
    # check against eager once refused the second model of `--model all`.
    done = run("bench", "--model", "torchvision:resnet50", "--runs", "1", "--warmup", "0",
               "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"] == "torchvision:resnet50"


def test_bench_measures_each_model_in_a_process_of_its_own():
    done = run("bench", "--model", "transformer:encoder", "--model", "torchvision:squeezenet1_1",
               "--image-size", "32", "--batch", "2", "--runs", "2", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["model"] for r in rows] == ["transformer:encoder", "torchvision:squeezenet1_1"]
    assert all(FIELDS <= r.keys() and r["batch"] == 2 for r in rows)
    assert rows[1]["image_size"] == 32
    assert "bench: 100%" in done.stderr and "2/2" in done.stderr  # tqdm's bar over the models
    # Unknown models are refused before anything is measured.
    done = run("bench", "--model", "transformer:encoder", "--model", "torchvision:nope",
               "--runs", "1", "--warmup", "0")
    assert done.returncode == 2 and "unknown torchvision classification model 'nope'" in done.stderr
    assert "measured" not in done.stderr
    assert run("bench", "--image-size", "0").returncode == 2


def test_bench_child_failure_is_reported(capfd):
    import argparse

    args = argparse.Namespace(runs=1, warmup=0, out_variant_max_bytes=0,
                              train=False, optimizer="sgd", breakdown=False, device="cpu",
                              compile=False, compile_backend=False, sequence=32,
                              peers=False, runtime=None)
    assert cli._measure_apart("transformer:encoder", 0, 64, args, None) == (None, 2)
    assert "--batch and --image-size must be positive" in capfd.readouterr().err


def test_bench_rejects_unknown_models_and_commands():
    done = run("bench", "--model", "torchvision:not_a_model", "--runs", "1")
    assert done.returncode == 2 and "unknown torchvision classification model 'not_a_model'" in done.stderr
    assert run("frobnicate").returncode == 2


TRAIN_FIELDS = {"model", "eager_ms", "fwd_bwd_ms", "fwd_bwd_speedup", "step_ms", "step_speedup",
                "multi_ms", "multi_vs_single", "physical_streams", "ops", "prepare_s", "breakdown"}


def test_bench_train_json():
    done = run("bench", "--train", "--model", "torchvision:squeezenet1_1", "--batch", "2",
               "--image-size", "32", "--runs", "2", "--warmup", "1", "--breakdown", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row.keys() == TRAIN_FIELDS | {"batch", "image_size", "optimizer", "fwd_bwd_prepare_s"}
    assert row["step_ms"] > 0 and row["breakdown"]["kernels_ms"] <= row["breakdown"]["replay_ms"]
    assert run("bench", "--train", "--model", "transformer:encoder").returncode == 2


def test_tune_is_a_command():
    done = run("tune", "--simulate", "--scheduler", "round-robin", "--seed", "0", "--tasks", "2",
               "--trials-per-task", "16", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scheduler"] == "round-robin"


# --device cuda: refused before anything is measured where there is no device; arguments that
# belong to the other device refused on every machine.

def _never_measure(*args, **kwargs):
    raise AssertionError("nothing may be measured")


@pytest.mark.parametrize("built_with_cuda", [True, False])
def test_bench_cuda_without_a_device_fails_in_one_line(monkeypatch, capsys, built_with_cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if not built_with_cuda:
        monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(cuda, "measure_cuda", _never_measure)
    monkeypatch.setattr(cli.subprocess, "run", _never_measure)
    for models in (["torchvision:googlenet"], ["torchvision:resnet18", "torchvision:googlenet"]):
        argv = ["--device", "cuda", "--compile"] + [a for m in models for a in ("--model", m)]
        assert cli.main(argv) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1 and captured.err.startswith(
            "python -m nimble bench: error: --device cuda: ")
        assert ("built without CUDA" in captured.err) == (not built_with_cuda)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_bench_cuda_without_a_device_fails_from_the_command_line():
    done = run("bench", "--device", "cuda", "--model", "torchvision:resnet18")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "--device cuda" in done.stderr


@pytest.mark.parametrize("argv, message", [
    (["--compile"], "--compile needs --device cuda"),
    (["--device", "cuda", "--train", "--compile"], "--compile times inference"),
    (["--device", "cuda", "--out-variant-max-bytes", "8"], "option of the CPU bench"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--device", "cuda", "--streams", "0"], "--streams takes a positive number"),
    (["--device", "cuda", "--image-size", "-3"], "must be positive"),
    (["--device", "cuda", "--model", "torchvision:nope"], "unknown torchvision"),
])
def test_bench_refuses_arguments_of_the_other_device(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(cuda, "measure_cuda", _never_measure)
    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    assert exit.value.code == 2 and message in capsys.readouterr().err


def _fake_row(spec, batch=1, image_size=224, compile=False):
    names = ["eager", "cuda_graph", "nimble_1", "nimble_multi"] + (["compile"] if compile else [])
    variants = [cuda.Variant("eager", print),
                cuda.Variant("cuda_graph", print, prepare_s=0.4),
                cuda.Variant("nimble_1", print, prepare_s=1.0,
                             schedule={"physical_streams": 1, "physical_syncs": 0},
                             streams_requested=1),
                cuda.Variant("nimble_multi", print, prepare_s=2.0,
                             schedule={"physical_streams": 4, "physical_syncs": 30},
                             streams_requested="auto")]
    if compile:
        variants.append(cuda.Variant("compile", print, prepare_s=300.0))
    # (wall s, device s) per call: eager 3 ms, graph 1 ms, one stream 1.01 ms, several 0.5 ms,
    # compile 0.8 ms; device time 90% of wall, and an outlier each that medians must drop.
    wall = {"eager": 3e-3, "cuda_graph": 1e-3, "nimble_1": 1.01e-3, "nimble_multi": 0.5e-3,
            "compile": 0.8e-3}
    samples = [[(wall[n], 0.9 * wall[n]), (wall[n], 0.9 * wall[n]), (1.0, 1.0)] for n in names]
    meta = {"model": spec, "device": "Fake GPU", "batch": batch, "image_size": image_size,
            "ops": 197, "logical_streams": 40}
    return cuda.summarize(meta, variants, samples, {n: 1e-6 * i for i, n in enumerate(names)})


def test_cuda_row_medians_and_ratios_from_fabricated_measurements():
    row = _fake_row("torchvision:googlenet", compile=True)
    assert json.loads(json.dumps(row)) == row
    v = row["variants"]
    assert list(v) == ["eager", "cuda_graph", "nimble_1", "nimble_multi", "compile"]
    assert v["eager"] == {"ms": 3.0, "gpu_ms": 2.7, "max_abs_diff": 0.0}
    assert v["nimble_multi"] == {"ms": 0.5, "gpu_ms": 0.45, "prepare_s": 2.0,
                                 "streams_requested": "auto", "physical_streams": 4, "syncs": 30,
                                 "max_abs_diff": 3e-6}
    assert v["nimble_1"]["physical_streams"] == 1 and v["nimble_1"]["syncs"] == 0
    assert v["compile"]["prepare_s"] == 300.0 and "physical_streams" not in v["compile"]
    r = row["ratios"]
    assert r["nimble_1_vs_cuda_graph"] == pytest.approx(1 / 1.01, abs=1e-3)
    assert r["nimble_multi_vs_nimble_1"] == r["nimble_multi_vs_nimble_1_gpu"] == 2.02
    assert r["nimble_multi_vs_compile"] == 1.6 and r["nimble_multi_vs_eager"] == 6.0
    assert r["nimble_1_vs_eager"] == pytest.approx(2.97, abs=1e-3)
    assert r["compile_s_vs_prepare_s"] == 150.0
    # Without torch.compile, no ratio names it.
    assert not any("compile" in key for key in _fake_row("torchvision:resnet18")["ratios"])


def test_cuda_report_table():
    rows = [_fake_row("torchvision:googlenet", compile=True), _fake_row("transformer:encoder", 8, None)]
    out = io.StringIO()
    cuda.print_report(rows, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "device: Fake GPU"
    header = [c.strip() for c in lines[1].split("|")]
    assert header == [name for name, _ in cuda.COLUMNS]
    table = [[c.strip() for c in line.split("|")] for line in lines[3:12]]
    assert [(r[0], r[3]) for r in table[:5]] == [("torchvision:googlenet", n) for n in (
        "eager", "cuda_graph", "nimble_1", "nimble_multi", "compile")]
    eager, _, _, multi, _ = table[:5]
    assert eager[4:] == ["3.000", "2.700", "1.00x", "-", "-", "-", "0.0e+00"]
    assert multi[4:] == ["0.500", "0.450", "6.00x", "2.00", "4", "30", "3.0e-06"]
    assert table[5][:4] == ["transformer:encoder", "8", "None", "eager"] and len(table) == 9
    assert lines[12] == ""
    assert lines[13].startswith("torchvision:googlenet: nimble_1_vs_cuda_graph 0.99x (gpu 0.99x); "
                                "nimble_multi_vs_nimble_1 2.02x (gpu 2.02x);")
    assert lines[13].endswith("; compile_s_vs_prepare_s 150.0x")
    assert lines[14].startswith("transformer:encoder: ") and "compile" not in lines[14]


def test_bench_cuda_dispatch(monkeypatch, capsys):
    """Without a device: the arguments reach the CUDA measurement (one model) and the
    children (several), and the report is printed."""
    monkeypatch.setattr(cli, "_no_cuda_reason", lambda: None)
    calls = []

    def measure(*args):
        calls.append(args)
        return _fake_row(args[0], args[1], args[2], args[6])

    monkeypatch.setattr(cuda, "measure_cuda", measure)
    assert cli.main(["--device", "cuda", "--model", "torchvision:googlenet", "--runs", "7"]) == 0
    assert calls == [("torchvision:googlenet", 1, 224, 7, 10, "auto", False)]
    out, err = capsys.readouterr()
    assert out.startswith("device: Fake GPU\n") and "nimble_multi_vs_nimble_1 2.02x" in out
    assert err == "measured torchvision:googlenet\n"

    children = []

    class Done:
        returncode = 0

        def __init__(self, argv):
            children.append(argv)
            self.stdout = json.dumps(_fake_row(argv[argv.index("--model") + 1], compile=True))

    monkeypatch.setattr(cli.subprocess, "run", lambda argv, **kwargs: Done(argv))
    assert cli.main(["--device", "cuda", "--compile", "--streams", "4", "--batch", "8", "--json",
                     "--model", "torchvision:resnet18", "--model", "torchvision:googlenet"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == ["torchvision:resnet18", "torchvision:googlenet"]
    for argv in children:
        assert argv[argv.index("--device") + 1] == "cuda" and "--compile" in argv
        assert argv[argv.index("--image-size") + 1] == "224"
        assert argv[argv.index("--streams") + 1] == "4" and argv[argv.index("--batch") + 1] == "8"


# The timing helper.

class FakeClock:
    """Advances by the given steps, one per reading."""

    def __init__(self, steps):
        self.now, self.steps = 0.0, iter(steps)

    def __call__(self):
        self.now += next(self.steps)
        return self.now


def test_alternate_times_each_call_in_turn_after_the_warm_up():
    log = []
    calls = [lambda: log.append("a"), lambda: log.append("b")]
    # Two readings per call: the step before the start, then the call's duration.
    durations = [9, 8, 1, 2, 3, 4]  # the first round is warm-up
    clock = FakeClock([x for d in durations for x in (0.5, d)])
    a, b = alternate(calls, runs=2, warmup=1, measure=lambda fn: wall_seconds(fn, clock),
                     after_round=lambda: log.append("|"))
    assert (a, b) == ([1, 3], [2, 4])
    assert log == ["a", "b", "a", "b", "|", "a", "b", "|"]
    assert median_ms([0.001, 0.003, 0.002]) == pytest.approx(2.0)


def test_alternate_shuffled_varies_the_order_and_keeps_each_call_s_samples():
    log = []
    calls = [lambda i=i: log.append(i) or i for i in range(4)]
    samples = alternate(calls, runs=12, warmup=0, measure=lambda fn: fn(), shuffle_seed=0)
    assert samples == [[i] * 12 for i in range(4)]
    rounds = [tuple(log[r * 4:(r + 1) * 4]) for r in range(12)]
    assert all(sorted(r) == [0, 1, 2, 3] for r in rounds)
    # Each call follows more than one other call: not a fixed rotation.
    before_1 = {r[k - 1] for r in rounds for k in range(1, 4) if r[k] == 1}
    assert len(before_1) > 1
    log.clear()
    alternate(calls, runs=12, warmup=0, measure=lambda fn: fn(), shuffle_seed=0)
    assert [tuple(log[r * 4:(r + 1) * 4]) for r in range(12)] == rounds  # seeded


def test_cuda_timer_covers_the_call_until_the_device_is_done():
    log = []

    class Event:
        def __init__(self, name):
            self.name = name

        def record(self):
            log.append(f"record {self.name}")

        def elapsed_time(self, end):
            assert (self.name, end.name) == ("start", "end")
            return 1.5  # milliseconds

    names = iter(["start", "end"])
    clock = FakeClock([1.0, 0.25])

    def sync():
        log.append("sync")

    timer = CudaTimer(clock=lambda: log.append("clock") or clock(),
                      make_event=lambda: Event(next(names)), synchronize=sync)
    assert timer(lambda: log.append("call")) == (0.25, 1.5e-3)
    assert log == ["sync", "record start", "clock", "call", "record end", "sync", "clock"]


def test_check_outputs_names_the_variant_that_differs():
    model = torch.nn.Linear(3, 2).eval()
    stale = model(torch.zeros(1, 3)).detach()
    good = cuda.Variant("good", lambda x: model(x) + 1e-4)
    assert cuda.check_outputs(model, [good], [torch.randn(1, 3)])["good"] == pytest.approx(
        1e-4, rel=1e-2)
    with pytest.raises(AssertionError, match="stale differs from eager"):
        cuda.check_outputs(model, [good, cuda.Variant("stale", lambda x: stale)],
                           [torch.zeros(1, 3), torch.ones(1, 3)])
    assert cuda.max_abs_diff((torch.ones(2), [torch.zeros(3)]),
                             (torch.ones(2) * 3, [torch.zeros(3)])) == 2.0


def test_bench_compile_backend_json():
    done = run("bench", "--compile-backend", "--model", "transformer:encoder", "--runs", "2",
               "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    for variant in ("eager", "inductor", "reduce_overhead", "nimble_backend", "prepare"):
        assert row[f"{variant}_ms"] > 0
    for variant in ("inductor", "reduce_overhead", "nimble_backend"):
        assert row[f"{variant}_compile_s"] > 0 and row[f"{variant}_max_diff"] < 1e-4
    assert (row["graphs"], row["graph_breaks"], row["graphs_run_eagerly"]) == (1, 0, 0)
    assert row["prepare_s"] > 0 and "prepare_refused" not in row
    assert 0 < row["dynamo_floor_s"] and row["floor_vs_inductor"] > 0
    # hf: models need --compile-backend; the compile bench is CPU inference.
    assert run("bench", "--model", "hf:bert").returncode == 2
    assert run("bench", "--compile-backend", "--train").returncode == 2


def test_bench_peers_json_checks_against_eager_and_says_why_a_runtime_is_skipped(monkeypatch):
    from nimble.bench import peers

    # A peer whose module is absent is skipped with the extra to install; nimble's two
    # modes run in one process, alternating with eager.
    monkeypatch.setattr(peers, "RUNTIMES", peers.RUNTIMES[:2] + [
        ("absent", "no_such_runtime_module", lambda m, x: None)])
    row = peers.measure_peers("torchvision:squeezenet1_1", 1, 32, runs=3, warmup=1)
    assert "pip install nimble[peers]" in row["skipped"]["absent"]
    for name in ("eager", "nimble", "nimble_aten"):
        assert row[f"{name}_ms"] > 0
    assert row.keys() >= {"nimble_max_diff", "nimble_aten_max_diff"} and row["nimble_prepare_s"] > 0
    assert "nimble" not in row["skipped"] and "nimble_aten" not in row["skipped"]
    # Back to back beside alternating; every time as a multiple of the model's floor.
    assert row["floor_ms"] > 0 and row["weight_bytes"] == sum(
        t.nbytes for t in build("torchvision:squeezenet1_1")[0].state_dict().values())
    assert row["flops"] > 0 and row["bandwidth_gb_s"] > 0 and row["peak_gflop_s"] > 0
    for name in ("eager", "nimble", "nimble_aten"):
        assert row[f"{name}_b2b_ms"] > 0 and row[f"{name}_floors"] > 0
    out = io.StringIO()
    peers.print_report([row], out=out)
    assert "absent" in out.getvalue() and "nimble_aten" in out.getvalue()
    assert "floor" in out.getvalue() and "back to back" in out.getvalue()


def test_onnx_runtime_runs_attention_models_whose_fast_path_has_no_onnx_export():
    # nn.MultiheadAttention's and TransformerEncoderLayer's inference fast paths trace to ops
    # with no ONNX export (aten::_native_multi_head_attention: vit_b_16 was skipped); the
    # export runs with the fast path off, the same values, and puts the setting back.
    pytest.importorskip("onnxruntime")
    from nimble.bench import peers

    model, x = build("transformer:encoder")
    with torch.no_grad():  # as measure_peers builds the runtimes: the fast path's condition
        expected = model(x)
        assert torch.backends.mha.get_fastpath_enabled()
        got = peers._onnxruntime(model, x)(x)
    assert torch.backends.mha.get_fastpath_enabled()
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()


def test_bench_peers_skips_a_runtime_that_differs_or_fails_with_the_reason_and_never_times_it(
        monkeypatch):
    from nimble.bench import peers

    calls = {"right": 0, "halved": 0, "raising": 0}

    def runtime(name, result):
        def make(model, example):
            def call(t):
                calls[name] += 1
                return result(model, t)
            return call
        return (name, None, make)

    def fails(model, t):
        raise RuntimeError("no kernel for aten::frobnicate\n(the rest of a long message)")

    monkeypatch.setattr(peers, "RUNTIMES", [
        # Within the tolerance (1e-3 of eager's scale): checked, then timed.
        runtime("right", lambda model, t: model(t) * (1 + 2e-4)),
        runtime("halved", lambda model, t: model(t) * 0.5),
        runtime("raising", fails)])
    # Fixed times and machine: eager 4 ms, the right runtime 1 ms (alternating), 3 and 0.5 ms
    # back to back; 20 MB at 10 GB/s (2 ms) against 0.1 GFLOP at 100 GFLOP/s (1 ms).
    timed = []

    def fake_timing(times):
        def timing(fns, runs, warmup, shuffle_seed=None):
            timed.append(len(fns))
            for fn in fns:
                fn()  # each timed callable runs: a skipped runtime's count would move
            return [[t] * runs for t in times]
        return timing

    monkeypatch.setattr(peers, "alternate", fake_timing([4e-3, 1e-3]))
    monkeypatch.setattr(peers, "back_to_back", fake_timing([3e-3, 0.5e-3]))
    monkeypatch.setattr(peers.floors, "machine", lambda: {"bandwidth_gb_s": 10.0,
                                                          "peak_gflop_s": 100.0, "threads": 1})
    monkeypatch.setattr(peers.floors, "model_cost", lambda m, x: {"weight_bytes": 20e6,
                                                                  "flops": 1e8})
    row = peers.measure_peers("torchvision:squeezenet1_1", 1, 32, runs=3, warmup=1)
    assert row["skipped"].keys() == {"halved", "raising"}
    assert row["skipped"]["halved"].startswith("differs from eager, not timed: max |difference|")
    assert row["skipped"]["raising"] == "failed: RuntimeError: no kernel for aten::frobnicate"
    # The check called each runtime once; only eager and the right one were timed.
    assert timed == [2, 2] and calls == {"right": 3, "halved": 1, "raising": 1}
    assert "halved_ms" not in row and "raising_ms" not in row and "halved_prepare_s" in row
    assert row["halved_max_diff"] > 0.1 and row["right_max_diff"] < 1e-2
    assert (row["floor_ms"], row["floor_bound"]) == (2.0, "memory")
    assert (row["eager_ms"], row["right_ms"], row["right_speedup"]) == (4.0, 1.0, 4.0)
    assert (row["eager_floors"], row["right_floors"]) == (2.0, 0.5)
    assert (row["eager_b2b_floors"], row["right_b2b_floors"]) == (1.5, 0.25)
    out = io.StringIO()
    peers.print_report([row], out=out)
    main_table = out.getvalue().split("median / p99")[0]
    lines = {line.split()[0]: line.split()[1:] for line in main_table.splitlines()[2:]
             if line.split()}
    assert lines["eager"][:6] == ["4.000", "ms", "2.0F", "3.000", "ms", "1.5F"]
    assert lines["right"][:7] == ["1.000", "ms", "0.5F", "0.500", "ms", "0.2F", "4.00x"]
    assert lines["halved"][:5] == ["skipped:", "differs", "from", "eager,", "not"]
    assert lines["raising"] == "skipped: failed: RuntimeError: no kernel for aten::frobnicate".split()


def test_a_floor_is_the_larger_of_streaming_the_weights_and_the_arithmetic():
    from nimble.bench import floors

    machine = {"bandwidth_gb_s": 10.0, "peak_gflop_s": 100.0}
    # 20 MB at 10 GB/s: 2 ms; 0.1 GFLOP at 100 GFLOP/s: 1 ms.
    floor = floors.floor_ms({"weight_bytes": 20e6, "flops": 1e8}, machine)
    assert floor["floor_ms"] == 2.0 and floor["floor_bound"] == "memory"
    floor = floors.floor_ms({"weight_bytes": 20e6, "flops": 1e9}, machine)
    assert floor["floor_ms"] == 10.0 and floor["floor_bound"] == "arithmetic"
    # One linear layer of 64 by 32 on 4 rows: 2 x 4 x 64 x 32 operations, 4 x (64 x 32 + 32) bytes.
    cost = floors.model_cost(torch.nn.Linear(64, 32), torch.randn(4, 64))
    assert cost == {"weight_bytes": 4 * (64 * 32 + 32), "flops": 2 * 4 * 64 * 32}


def test_bench_peers_cli_times_only_the_runtimes_asked_for():
    done = run("bench", "--peers", "--runtime", "nimble", "--model", "torchvision:squeezenet1_1",
               "--image-size", "32", "--runs", "2", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert {"eager_ms", "nimble_ms", "nimble_speedup"} <= row.keys()
    assert "inductor_ms" not in row and "onnxruntime_ms" not in row
    assert run("bench", "--runtime", "nimble").returncode != 0  # --runtime needs --peers


def test_bench_peers_measures_every_batch_and_image_size_asked_for():
    """`--batch 1 2 --image-size 32 40`: a row for each pair, each in a process of its own."""
    done = run("bench", "--peers", "--runtime", "nimble", "--model", "torchvision:squeezenet1_1",
               "--batch", "1", "2", "--image-size", "32", "40", "--runs", "2", "--warmup", "1",
               "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert sorted((r["batch"], r["image_size"]) for r in rows) == [(1, 32), (1, 40), (2, 32),
                                                                   (2, 40)]
    assert all(r["nimble_ms"] > 0 for r in rows)
    assert run("bench", "--batch", "1", "0").returncode == 2


def test_bench_peers_summary_gives_nimble_against_the_faster_peer_in_every_pattern():
    from nimble.bench import peers

    def row(batch, nimble, onnx, openvino):
        r = {"model": "torchvision:resnet18", "batch": batch, "image_size": 64,
             "patterns": ["interleaved"]}
        for name, ms in (("nimble", nimble), ("onnxruntime", onnx), ("openvino", openvino)):
            for suffix in ("_ms", "_b2b_ms", "_interleaved_ms"):
                r[name + suffix] = ms
            for suffix in ("_p99_ms", "_b2b_p99_ms", "_interleaved_p99_ms"):
                r[name + suffix] = 3 * ms
        return r

    out = io.StringIO()
    peers.print_summary([row(1, 2.0, 3.0, 5.0), row(8, 4.0, 9.0, 2.0)], out=out)
    lines = out.getvalue().strip().splitlines()
    assert "interleaved" in lines[1]
    # batch 1: the faster peer 3.0 ms against 2.0: 1.50x; batch 8: 2.0 against 4.0: 0.50x.
    assert lines[2].split()[1:] == ["1", "64"] + ["1.50x", "(3.00)"] * 3
    assert lines[3].split()[1:] == ["8", "64"] + ["0.50x", "(3.00)"] * 3


def test_bench_keeps_the_other_models_rows_when_one_child_fails(monkeypatch, capsys):
    class Done:
        def __init__(self, argv):
            model = argv[argv.index("--model") + 1]
            # A failing child: an exit code, or (as a crashed exporter did) no row on stdout.
            self.returncode = 3 if model == "torchvision:googlenet" else 0
            self.stdout = "" if model == "torchvision:alexnet" else json.dumps(
                _fake_row(model, compile=True))

    monkeypatch.setattr(cli.subprocess, "run", lambda argv, **kwargs: Done(argv))
    code = cli.main(["--json", "--model", "torchvision:resnet18", "--model", "torchvision:googlenet",
                     "--model", "torchvision:alexnet"])
    out, err = capsys.readouterr()
    assert code != 0
    assert [r["model"] for r in json.loads(out)] == ["torchvision:resnet18"]
    assert "torchvision:googlenet (batch 1, image 64) failed (exit code 3)" in err
    assert "torchvision:alexnet (batch 1, image 64) failed (exit code 1)" in err


@pytest.mark.parametrize("argv, message", [
    (["--tuned", "x.db"], "--tuned is an option of --peers"),
    (["--peers", "--tuned", "/nonexistent/x.db"], "no tuning database at '/nonexistent/x.db'"),
])
def test_bench_refuses_a_tuned_database_it_cannot_use(capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        cli.main(argv + ["--model", "torchvision:resnet18"])
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_bench_peers_patterns_report_median_and_p99_of_every_runtime(monkeypatch):
    """--pattern: each pattern times every runtime again, with its own untimed work before
    each call (an idle spell, other work on the cores); the row holds each median and 99th
    percentile, and the report nimble's median against the faster peer's."""
    from nimble.bench import peers

    monkeypatch.setattr(peers, "RUNTIMES", [
        (name, None, lambda model, example: (lambda t: model(t)))
        for name in ("nimble", "onnxruntime", "openvino")])
    befores = []

    def fake_alternate(fns, runs, warmup, before_each=None, shuffle_seed=None):
        befores.append(before_each)
        scale = 1.0 if before_each is None else 3.0
        # Per runtime (eager, nimble, onnxruntime, openvino): runs-1 fast samples, one slow.
        return [[base * scale] * (runs - 1) + [base * scale * 10] for base in (8e-3, 1e-3, 2e-3, 4e-3)]

    monkeypatch.setattr(peers, "alternate", fake_alternate)
    monkeypatch.setattr(peers, "back_to_back",
                        lambda fns, runs, warmup: [[t] * runs for t in (4e-3, 0.5e-3, 1e-3, 2e-3)])
    monkeypatch.setattr(peers.floors, "machine", lambda: {"bandwidth_gb_s": 10.0,
                                                          "peak_gflop_s": 100.0, "threads": 1})
    monkeypatch.setattr(peers.floors, "model_cost", lambda m, x: {"weight_bytes": 20e6,
                                                                  "flops": 1e8})
    patterns = [peers.parse_pattern(["interleaved"]), peers.parse_pattern(["idle", "20"]),
                peers.parse_pattern(["busy", "1"])]
    assert patterns == [("interleaved", 0.0), ("idle", 20.0), ("busy", 1.0)]
    row = peers.measure_peers("torchvision:squeezenet1_1", 1, 32, runs=5, warmup=1,
                              patterns=patterns)
    assert row["patterns"] == ["interleaved", "idle20ms", "busy"]
    # The plain rotation, then one per pattern; only idle and busy do work before each call.
    assert befores[0] is None and befores[1] is None and callable(befores[2]) and callable(befores[3])
    start = time.perf_counter()
    befores[2]()
    assert time.perf_counter() - start >= 0.019  # the idle spell sleeps its 20 ms
    assert (row["nimble_idle20ms_ms"], row["nimble_idle20ms_p99_ms"]) == (3.0, 30.0)
    assert (row["nimble_ms"], row["nimble_p99_ms"], row["nimble_b2b_p99_ms"]) == (1.0, 10.0, 0.5)
    out = io.StringIO()
    peers.print_report([row], out=out)
    report = out.getvalue()
    assert "idle20ms" in report and "busy" in report
    ratio_line = next(line for line in report.splitlines() if "nimble vs best peer" in line)
    # Back to back 1.0/0.5, alternating 2/1, each pattern 6/3: nimble 2x the faster peer.
    assert ratio_line.split()[-5:] == ["2.00x"] * 5
    for bad in (["idle"], ["sleepy"], ["busy", "x"], ["interleaved", "3"], ["idle", "-1"]):
        with pytest.raises(ValueError):
            peers.parse_pattern(bad)
    assert run("bench", "--peers", "--pattern", "idle", "--model", "torchvision:alexnet").returncode != 0
