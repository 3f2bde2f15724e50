"""The package's import graph: no cycles, and no module imports a layer above its own.

The layers follow the data path (docs/architecture.md): facts and mechanisms at the bottom,
then conversion and the lakehouse, engines, buffer, pipeline, transports, the connector and
the daemons built on it, and the wiring and the CLI at the top. Every import counts — also
those inside functions — except those under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "otel_delta"

# lowest first; a module belongs to the layer of its longest matching prefix
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "otel_delta.errors",
        "otel_delta.disk",
        "otel_delta.tables",
        "otel_delta.ipc",
        "otel_delta.retry",
        "otel_delta.sql",
        "otel_delta.faults",
        "otel_delta.metrics",
        "otel_delta.auth",
        "otel_delta.logformat",
        "otel_delta.privacy",
        "otel_delta.nopandas",
        "otel_delta.heap",
        "otel_delta.grpcenv",
        "otel_delta.rustenv",
        "otel_delta.priority",
        "otel_delta.logstores",
        "otel_delta._generated",
    ),
    ("otel_delta.config", "otel_delta.net", "otel_delta.status"),
    ("otel_delta.convert", "otel_delta.spark"),
    ("otel_delta.lakehouse", "otel_delta.signals"),
    ("otel_delta.engines",),
    ("otel_delta.buffer", "otel_delta.wal"),
    ("otel_delta.pipeline",),
    ("otel_delta.transports", "otel_delta.admin"),
    ("otel_delta.connector",),
    ("otel_delta.maintenance", "otel_delta.remote", "otel_delta.backfill", "otel_delta.stream"),
    ("otel_delta.bridge",),
    ("otel_delta.commands", "otel_delta.cli", "otel_delta"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: path for name, path in found.items() if "._generated" not in name}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def ours(module: str) -> bool:
    return module == "otel_delta" or module.startswith("otel_delta.")


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The otel_delta modules `name` imports (a `from pkg import sub` names the submodule)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if ours(a.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            if ours(base):
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    names = set(known)
    return {
        name: {m for m in imports_of(name, path, names) if not m.startswith("otel_delta._gen")}
        for name, path in known.items()
    }


def layer_of(name: str) -> int:
    best, length = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    if best < 0:
        pytest.fail(f"{name} is in no layer: add it to LAYERS and docs/architecture.md")
    return best


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                strong(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            strong(node)
    return found


def test_the_graph_is_read() -> None:
    edges = graph()
    assert len(edges) > 50
    assert "otel_delta.lakehouse" in edges["otel_delta.engines.delta_rs"]
    assert "otel_delta.signals" in edges["otel_delta.connector.upsert"]


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in sorted(graph().items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_the_checks_can_fail() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("otel_delta.lakehouse") < layer_of("otel_delta.connector.table")
