"""`python -m nimble bench`: eager and nimble side by side, in one process.

Compared modes alternate run by run (after a warm-up), so all see the same machine
state; the table reports medians. Several models are measured each in a process of its
own: a process that has already run other models has a fragmented heap, and the replay's
per-op overhead grows with it (convnext_tiny 0.8 -> 1.1 us after six other models), so
a model's numbers would depend on the ones listed before it.

`--device cuda` (default image size 224) times eager, a hand-captured CUDA graph (what a
user would write instead of nimble), nimble on one stream and on several and, with
`--compile`, torch.compile(mode="reduce-overhead"): per call, wall and GPU milliseconds,
prepare (or capture, or compile) seconds, nimble's streams and syncs, and the ratios
between them. Every variant is checked against eager first.

`--peers` times eager, nimble (with and without its CPU lowering), torch.compile with
inductor (with and without freezing), ONNX Runtime and OpenVINO (`pip install
nimble[peers]`; skipped with a message when absent) on the CPU; `--runtime` picks some.

`--compile-backend` times eager, torch.compile with inductor (default and reduce-overhead
modes), torch.compile(backend="nimble") and nimble's prepare (where the model allows it),
with compile seconds; `hf:` models (HuggingFace transformers from small configs) run here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch
from tqdm import tqdm

from . import compiled, cpu, cuda, cuda_train, peers, train
from .report import print_table
from ..zoo import ALL_MODELS, HF_MODELS, check_spec

DEFAULT_IMAGE_SIZE = {"cpu": 64, "cuda": 224}


def _measure_apart(spec: str, batch: int, image_size: int, args: argparse.Namespace,
                   streams) -> tuple[dict | None, int]:
    """Measures one model at one batch and image size in a child process (see the module's
    docstring). Returns its row, or None and a non-zero code (the child's exit code, or 1
    when it printed no row); the child's errors reach stderr as they are."""
    argv = [sys.executable, "-m", "nimble", "bench", "--model", spec, "--json",
            "--device", args.device,
            "--batch", str(batch), "--image-size", str(image_size),
            "--runs", str(args.runs), "--warmup", str(args.warmup),
            "--out-variant-max-bytes", str(args.out_variant_max_bytes)]
    if streams is not None:
        argv += ["--streams", str(streams)]
    if args.compile:
        argv += ["--compile"]
    if args.compile_backend:
        argv += ["--compile-backend", "--sequence", str(args.sequence)]
    if args.peers:
        argv += ["--peers"] + [a for r in args.runtime or [] for a in ("--runtime", r)]
        if args.tuned:
            argv += ["--tuned", args.tuned]
        for words in args.pattern or []:
            argv += ["--pattern", *words]
    if args.train:
        argv += ["--train", "--optimizer", args.optimizer] + (["--breakdown"] if args.breakdown else [])
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return None, done.returncode
    try:
        return json.loads(done.stdout), 0
    except json.JSONDecodeError:
        return None, 1


def _measure_here(spec: str, batch: int, size: int, args: argparse.Namespace, streams) -> dict:
    """One model's row, measured in this process."""
    if args.peers:
        return peers.measure_peers(spec, batch, size, args.runs, args.warmup, args.runtime,
                                   args.tuned, [peers.parse_pattern(w) for w in args.pattern or []])
    if args.compile_backend:
        return compiled.measure_compile_backend(spec, batch, size, args.sequence, args.runs,
                                                args.warmup)
    if args.device == "cuda" and args.train:
        return cuda_train.measure_cuda_train(spec, batch, size, args.runs, args.warmup,
                                             streams or "auto", args.optimizer)
    if args.device == "cuda":
        return cuda.measure_cuda(spec, batch, size, args.runs, args.warmup, streams or "auto",
                                 args.compile)
    if args.train:
        return train.measure_train(spec, batch, size, args.runs, args.warmup, streams,
                                   args.optimizer, args.breakdown)
    return cpu.measure(spec, batch, size, args.runs, args.warmup, streams,
                       args.out_variant_max_bytes)


def _no_cuda_reason() -> str | None:
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) was built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device is available (torch.cuda.is_available() is False)"
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m nimble bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append",
                        help="torchvision:NAME or transformer:encoder (with --compile-backend "
                             f"also {', '.join(HF_MODELS)}); repeatable; 'all' for every model of "
                             "the correctness suite (default torchvision:resnet18)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, nargs="+", default=[1],
                        help="batch size; several (--batch 1 8) measure every model at each")
    parser.add_argument("--image-size", type=int, nargs="+", default=None,
                        help="default 64 on the CPU, 224 on CUDA; several (--image-size 64 "
                             "224) measure every model at each")
    parser.add_argument("--runs", type=int, default=50, help="timed runs per side (default 50)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--streams", default=None,
                        help="multi-stream mode: N streams or 'auto' (default: on the CPU one "
                             "per core, capped by the op graph's logical streams; on CUDA "
                             "'auto')")
    parser.add_argument("--compile", action="store_true",
                        help="with --device cuda: also torch.compile(mode='reduce-overhead')")
    parser.add_argument("--compile-backend", action="store_true",
                        help="eager, torch.compile (inductor default and reduce-overhead), "
                             "torch.compile(backend='nimble') and nimble's prepare, with compile "
                             "seconds (CPU)")
    parser.add_argument("--peers", action="store_true",
                        help="eager, nimble (lowered and not), inductor (with and without "
                             "freezing), ONNX Runtime and OpenVINO, alternating (CPU)")
    parser.add_argument("--tuned", metavar="DB", default=None,
                        help="with --peers: also nimble prepared with this tuning database "
                             "(nimble_tuned; python -m nimble tune writes one)")
    parser.add_argument("--runtime", action="append",
                        choices=[name for name, _, _ in peers.RUNTIMES],
                        help="with --peers: time only these runtimes besides eager; repeatable")
    parser.add_argument("--pattern", action="append", nargs="+", metavar="WORD",
                        help="with --peers: also time every runtime called in turn (random order) "
                             "(interleaved), after an idle spell (idle MS) or after other work "
                             "on the same cores (busy [MS], numpy's BLAS, default 5 ms); "
                             "repeatable; each reports the median and the 99th percentile")
    parser.add_argument("--sequence", type=int, default=32,
                        help="with --compile-backend: tokens per sequence of hf: models")
    parser.add_argument("--out-variant-max-bytes", type=int, default=0, metavar="N",
                        help="prepare(out_variant_max_bytes=N): preallocated .out buffers only "
                             "for results of at most N bytes (default 0: all; 1: none, which "
                             "brings the replay's peak memory to about eager's)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--train", action="store_true",
                        help="time one training step (eager; forward+backward replayed with an "
                             "eager optimizer; the whole step replayed on one and on several "
                             "streams; with --device cuda also a hand-captured whole-step "
                             "CUDA graph); torchvision models, 10 classes")
    parser.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="sgd",
                        help="with --train: SGD (momentum 0.9, weight decay 1e-4), Adam or "
                             "AdamW (weight decay 1e-2)")
    parser.add_argument("--breakdown", action="store_true",
                        help="with --train: kernel time of the whole-step replay by op")
    args = parser.parse_args(argv)
    if args.image_size is None:
        args.image_size = [DEFAULT_IMAGE_SIZE[args.device]]
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if min(args.batch) < 1 or min(args.image_size) < 1:
        parser.error(f"--batch and --image-size must be positive, got "
                     f"{' '.join(map(str, args.batch))} and "
                     f"{' '.join(map(str, args.image_size))}")
    if args.out_variant_max_bytes < 0:
        parser.error("--out-variant-max-bytes must be 0 (no limit) or a positive byte count")
    if args.device == "cuda":
        if args.train and args.compile:
            parser.error("--compile times inference; it does not go with --train")
        if args.out_variant_max_bytes:
            parser.error("--out-variant-max-bytes is an option of the CPU bench")
    elif args.compile:
        parser.error("--compile needs --device cuda")
    if args.compile_backend and (args.device == "cuda" or args.train):
        parser.error("--compile-backend times inference on the CPU")
    if args.peers and (args.device == "cuda" or args.train or args.compile_backend):
        parser.error("--peers times inference on the CPU, apart from --train and "
                     "--compile-backend")
    if args.pattern and not args.peers:
        parser.error("--pattern is an option of --peers")
    for words in args.pattern or []:
        try:
            peers.parse_pattern(words)
        except ValueError as error:
            parser.error(str(error))
    if args.tuned and not args.peers:
        parser.error("--tuned is an option of --peers")
    if args.tuned and not os.path.exists(args.tuned):
        parser.error(f"--tuned: no tuning database at {args.tuned!r}")
    if args.runtime and not args.peers:
        parser.error("--runtime goes with --peers")
    streams = args.streams
    if streams is not None and streams != "auto":
        if not streams.isdigit() or int(streams) < 1:
            parser.error(f"--streams takes a positive number or 'auto', got {streams!r}")
        streams = int(streams)
    specs = args.model or ["torchvision:resnet18"]
    if specs == ["all"]:
        specs = ALL_MODELS + (HF_MODELS if args.compile_backend else [])
    if args.train and specs == ALL_MODELS:
        specs = [s for s in specs if s.startswith("torchvision:")]
    for spec in specs:
        try:
            check_spec(spec)
        except ValueError as error:
            parser.error(str(error))
        if spec.startswith("hf:") and not args.compile_backend:
            parser.error(f"{spec} runs with --compile-backend")
    if args.device == "cuda":
        reason = _no_cuda_reason()
        if reason is not None:
            print(f"{parser.prog}: error: --device cuda: {reason}", file=sys.stderr)
            return 1
    jobs = [(spec, batch, size) for spec in specs for batch in args.batch
            for size in args.image_size]
    rows, failed = [], 0
    # Several models take minutes each: a bar with rate and time left (stderr, as the children's).
    for spec, batch, size in tqdm(jobs, desc="bench", unit="model", file=sys.stderr,
                                  disable=len(jobs) == 1):
        if len(jobs) > 1:
            # One model that fails does not lose the others' rows: they are reported, and the
            # exit code says that something failed.
            row, code = _measure_apart(spec, batch, size, args, streams)
            if row is None:
                tqdm.write(f"{parser.prog}: {spec} (batch {batch}, image {size}) failed (exit "
                           f"code {code}); its error is above", file=sys.stderr)
                failed = code
                continue
        else:
            try:
                row = _measure_here(spec, batch, size, args, streams)
            except ValueError as error:
                parser.error(str(error))
        rows.append(row)
        if not args.json:
            tqdm.write(f"measured {spec}", file=sys.stderr)
    if not rows:
        return failed
    if args.json:
        print(json.dumps(rows[0] if len(jobs) == 1 else rows, indent=2))
    elif args.peers:
        peers.print_report(rows)
        if len(rows) > 1:
            peers.print_summary(rows)
    elif args.compile_backend:
        print_table(rows, compiled.COLUMNS)
    elif args.device == "cuda" and args.train:
        cuda_train.print_report(rows)
    elif args.device == "cuda":
        cuda.print_report(rows)
    elif args.train:
        print_table(rows, train.COLUMNS)
        for row in rows:
            if "breakdown" in row:
                train.print_breakdown(row)
    else:
        print_table(rows, cpu.COLUMNS)
    return failed
