"""nimble/ imports without cycles: the package's layers (replay, tuning, bench, compile) use
the ones below them and never the other way round. Read statically from the source with ast,
every import counted, those inside functions too (a lazy import that closes a circle is still
a circle: it only hides it until the call)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nimble"


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
