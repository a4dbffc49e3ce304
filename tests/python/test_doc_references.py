"""Docs and comments name only files and symbols that exist.

A doc that names a moved file or a renamed function sends a reader nowhere; this fails
as soon as one does. Checked: every backticked path, relative link and symbol in README.md
and docs/*.md, and every file name in a C++ or Python comment. Paths are found as written
(from the repository root or the doc's folder) or as the tail of a tracked path
(`replay/wrapper.py`, `stream_plan.h`); placeholders (`OUTDIR/...`), paths outside the
repository (`../shared/...`) and git-ignored build output (`build-asan/`) are not files
of the project and are skipped.
"""

import fnmatch
import functools
import importlib
import os
import re
import subprocess

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH_RE = re.compile(
    r"^[\w.*/-]+\.(?:py|h|cpp|cu|cuh|inc|md|sh|txt|toml|json)$|^[\w.-]+(?:/[\w.-]+)*/$")
# A file name in a comment: `// see channels_last/epilogue.h`, `# capture.py records ...`.
COMMENT_FILE_RE = re.compile(r"(?<![\w/.<\"'*])((?:[\w*-]+/)*[\w*-]+\.(?:py|h|cpp|cu|cuh|inc))\b")
# Other projects' files, named in comments to say where an idea comes from.
EXTERNAL_PREFIXES = ("torch/", "c10/", "ATen/", "aten/", "jit/", "xgboost/", "cuda")
EXTERNAL_FILES = {"cudnn.h", "cuda_runtime_api.h", "c_api.h"}
# Namespaces whose ops torch registers: checked against torch.ops.
TORCH_OP_NAMESPACES = ("aten", "mkldnn", "nimble", "prims", "quantized")
EXTERNAL_NAMESPACES = ("at", "c10", "torch", "std", "cuda", "boost", "Eigen")


@functools.lru_cache(maxsize=None)
def tracked_files() -> tuple:
    out = subprocess.check_output(["git", "ls-files"], cwd=ROOT, text=True)
    return tuple(f for f in out.split() if os.path.exists(os.path.join(ROOT, f)))


@functools.lru_cache(maxsize=None)
def tracked_dirs() -> frozenset:
    dirs = set()
    for f in tracked_files():
        d = os.path.dirname(f)
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    return frozenset(dirs)


@functools.lru_cache(maxsize=None)
def source_words() -> frozenset:
    words = set()
    for f in tracked_files():
        if f.startswith(("csrc/", "tuning/")) and f.endswith((".h", ".cpp", ".cu", ".inc")):
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                words.update(re.findall(r"\w+", fh.read()))
    return frozenset(words)


def is_ignored(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0


def skipped(path: str) -> bool:
    first = path.split("/")[0]
    return path.startswith("../") or (first.isupper() and "/" in path) or is_ignored(path)


def path_exists(path: str, base_dir: str) -> bool:
    files, dirs = tracked_files(), tracked_dirs()
    bare = path.rstrip("/")
    if path.endswith("/"):
        return (bare in dirs or any(d.endswith("/" + bare) for d in dirs)
                or os.path.isdir(os.path.join(ROOT, base_dir, bare)))
    if "*" in bare:
        return any(fnmatch.fnmatch(f, bare) or fnmatch.fnmatch(f, "*/" + bare) for f in files)
    if "/" in bare:
        return (bare in files or any(f.endswith("/" + bare) for f in files)
                or os.path.exists(os.path.join(ROOT, base_dir, bare)))
    return any(os.path.basename(f) == bare for f in files)


def symbol_exists(symbol: str) -> bool:
    name = symbol.split("(")[0]
    if "::" in name:
        namespace, *rest = name.split("::")
        if namespace in TORCH_OP_NAMESPACES and len(rest) == 1:
            import nimble  # noqa: F401  (registers nimble's ops)
            return hasattr(getattr(torch.ops, namespace), rest[0])
        if namespace in EXTERNAL_NAMESPACES:
            return True
        return all(part in source_words() for part in [namespace, *rest] if part)
    module, *attributes = name.split(".")
    obj = importlib.import_module(module)
    for attribute in attributes:
        if not hasattr(obj, attribute):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{attribute}")
                continue
            except (ImportError, AttributeError):
                return False
        obj = getattr(obj, attribute)
    return True


def docs() -> list:
    return ["README.md"] + sorted(f for f in tracked_files()
                                  if f.startswith("docs/") and f.endswith(".md"))


def doc_references(doc: str):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        text = fh.read()
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.strip()
        if " " in token or token.startswith(("http", "-")):
            continue
        if PATH_RE.match(token):
            yield "path", token
        elif "::" in token or token.startswith("nimble."):
            yield "symbol", token
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http", "mailto:")):
            yield "path", target


@pytest.mark.parametrize("doc", docs())
def test_doc_names_only_what_exists(doc):
    base_dir = os.path.dirname(doc)
    missing = []
    for kind, ref in doc_references(doc):
        if kind == "path" and not skipped(ref) and not path_exists(ref, base_dir):
            missing.append(f"file {ref}")
        elif kind == "symbol" and not symbol_exists(ref):
            missing.append(f"symbol {ref}")
    assert not missing, f"{doc} names what does not exist: {sorted(set(missing))}"


def test_comments_name_only_files_that_exist():
    missing = []
    for f in tracked_files():
        if not f.endswith((".py", ".h", ".cpp", ".cu", ".inc", ".sh")):
            continue
        marker = "#" if f.endswith((".py", ".sh")) else "//"
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if marker not in line:
                    continue
                comment = line.split(marker, 1)[1]
                for name in COMMENT_FILE_RE.findall(comment):
                    if (name.startswith(EXTERNAL_PREFIXES) or name in EXTERNAL_FILES
                            or skipped(name) or path_exists(name, os.path.dirname(f))):
                        continue
                    missing.append(f"{f}:{number} {name}")
    assert not missing, f"comments name files that do not exist: {missing}"


def test_the_check_sees_a_missing_name():
    assert not path_exists("csrc/runtime/no_such_file.h", "")
    assert not path_exists("no_such_file.py", "docs")
    assert path_exists("replay/wrapper.py", "docs")
    assert not symbol_exists("nimble.no_such_function")
    assert not symbol_exists("ProgramBuilder::no_such_method_anywhere")
    assert symbol_exists("nimble.Nimble")
    assert skipped("OUTDIR/report.md") and skipped("../shared/gpu/build.sh")
