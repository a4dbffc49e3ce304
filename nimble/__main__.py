"""python -m nimble COMMAND ..."""

import sys

USAGE = """usage: python -m nimble COMMAND [options]

commands:
  bench   time eager PyTorch against nimble's replay, side by side (--train: a training step;
          --device cuda: also a hand-captured CUDA graph and torch.compile)
  tune    run the auto-tuner (--simulate: on a simulated model; --compare: every scheduler)

`python -m nimble COMMAND --help` describes each command."""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "bench":
        from .bench import main as run
    elif command == "tune":
        from .tuning.cli import main as run
    else:
        print(f"unknown command '{command}'\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
