"""nimble/ imports without cycles: the package's layers (replay, tuning, bench, compile) use
the ones below them and never the other way round. Read statically from the source with ast,
every import counted, those inside functions too (a lazy import that closes a circle is still
a circle: it only hides it until the call). The same for the C++ of csrc/: its folders
(program, passes, kernels, runtime, ...) include each other without a loop."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nimble"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported(node: ast.AST, importer: str, is_package: bool, modules: dict) -> set[str]:
    """The modules of `modules` one import statement names."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = importer.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = set()
    for alias in node.names:
        submodule = f"{target}.{alias.name}"
        if submodule in modules:  # `from package import module`
            found.add(submodule)
        elif target in modules and binds(modules[target], alias.name):
            found.add(target)  # `from module import name`
    return found


def binds(path: Path, name: str) -> bool:
    """Whether the module at `path` binds `name` at its top level. A name a package does not
    bind is one of its submodules that is no source file here (the compiled nimble._C)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound = {node.name}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        else:
            continue
        if name in bound:
            return True
    return False


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = source_modules(root)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        graph[name] = set().union(*(imported(n, name, is_package, modules)
                                    for n in ast.walk(tree))) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(cycle_within(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycle_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A closed path through the component's first module, by breadth-first search."""
    start = min(component)
    came_from = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{sorted(component)} is no strongly connected component")


def test_nimble_has_no_import_cycle():
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles in nimble/:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_walk_reads_every_kind_of_import(tmp_path):
    """The reader itself: absolute, relative, `from package import module` and lazy imports
    inside functions are all edges, and a cycle through them is named."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import pkg.sub.b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    graph = import_graph(pkg)
    assert graph["pkg"] == {"pkg.sub.b"}
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def test_a_layer_that_imports_upward_is_named():
    graph = import_graph(PACKAGE)
    graph["nimble.replay.wrapper"].add("nimble.tuning.tune")  # tune imports the replay layer
    found = cycles(graph)
    assert found and {"nimble.replay.wrapper", "nimble.tuning.tune"} <= set(found[0])


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"((?:csrc|tuning)/[^"]+)"', re.MULTILINE)
CPP_SUFFIXES = {".h", ".cpp", ".inc", ".cu", ".cuh"}


def folder_of(path: str) -> str:
    """The folder of csrc/ (or of tuning/) a file belongs to: `csrc/kernels` for
    csrc/kernels/cpu/torch_ops/prepacked_linear.h; `csrc` for the files directly in it."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def include_graph(root: Path) -> dict[str, set[str]]:
    """Folder -> the folders its C++ files include, read from every source under root/csrc."""
    graph = {}
    for p in sorted((root / "csrc").rglob("*")):
        if p.suffix not in CPP_SUFFIXES or not p.is_file():
            continue
        folder = folder_of(p.relative_to(root).as_posix())
        graph.setdefault(folder, set())
        for included in INCLUDE_RE.findall(p.read_text(errors="replace")):
            target = folder_of(included)
            if target != folder:
                graph[folder].add(target)
                graph.setdefault(target, set())
    return graph


def test_csrc_folders_include_each_other_without_a_loop():
    found = cycles(include_graph(ROOT))
    assert not found, "include loops between the folders of csrc/:\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_the_include_reader_names_a_loop_between_folders(tmp_path):
    """Quoted includes from the root count, in headers and sources at any depth; system
    includes and includes within one folder do not."""
    files = {
        "csrc/errors.h": "#include <vector>\n",
        "csrc/a/x.h": '#include "csrc/errors.h"\n#include "csrc/a/deep/y.h"\n',
        "csrc/a/deep/y.h": "#pragma once\n",
        "csrc/b/z.cpp": '#include "csrc/a/x.h"\n#include "tuning/space/knob.h"\n',
        "csrc/a/w.cpp": '  #  include "csrc/b/z.h"\n#include <csrc/c/ignored.h>\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = include_graph(tmp_path)
    assert graph == {"csrc": set(), "csrc/a": {"csrc", "csrc/b"},
                     "csrc/b": {"csrc/a", "tuning/space"}, "tuning/space": set()}
    assert cycles(graph) == [["csrc/a", "csrc/b", "csrc/a"]]
