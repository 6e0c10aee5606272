"""The package's import structure (docs/architecture.md): no import circles, report/ reads only results."""

import ast
from pathlib import Path

import fedcond

ROOT = Path(fedcond.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = ("fedcond", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the fedcond modules it imports, at the top or inside a function (lazy imports count too)."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
                targets |= {f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names}
        graph[mod] = {t for t in map(known, (t for t in targets if t.startswith("fedcond"))) if t and t != mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_circles_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_circles():
    graph = import_graph()
    assert circles(graph) == []


def test_report_reads_only_the_results_database():
    graph = import_graph()
    for mod, targets in graph.items():
        if mod.startswith("fedcond.report"):
            assert not {t for t in targets if t.startswith(("fedcond.simulate", "fedcond.run", "fedcond.engine"))}, mod
