"""The house as DESIGN.md draws it, read from the imports (ast, nothing is imported): no layer
climbs into `server/`, the sans-IO core touches neither `storage/` nor asyncio, no import circles in
`src/offsetd` or `bench/`, and no module under `src/` past 600 lines without a stated reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600

# module (path under src/offsetd) -> why it may pass MAX_LINES: one concept that would be worse
# split, said in DESIGN-level comments at its top too. Empty: the crowded rooms (partition_log,
# compaction, offsets, codec, shard) were split on their own branches before this one landed.
LONG_MODULES: dict[str, str] = {}

# package -> what its modules must never import (DESIGN.md "Module map": dependencies flow down).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "broker": ("offsetd.server",),
    "storage": ("offsetd.server",),
    "records": ("offsetd.server", "offsetd.storage", "asyncio"),
    "coordinator": ("offsetd.server", "offsetd.storage", "asyncio"),
    "transaction": ("offsetd.server", "offsetd.storage", "asyncio"),
    "share": ("offsetd.server", "offsetd.storage", "asyncio"),
    "security": ("offsetd.server", "offsetd.storage", "asyncio"),
}

# bench/: what the workloads share imports no workload module and no runner; a workload module
# imports no other workload module and no runner (the runners put the suite together).
BENCH_SHARED = ("bench.workload", "bench.workload_steps", "bench.brokers", "bench.procs", "bench.clients", "bench.raw_client",
                "bench.offsets_log", "bench.report", "bench.loop_probe", "bench.scale_probes")
BENCH_WORKLOADS = ("bench.workloads", "bench.abuse", "bench.eos", "bench.security", "bench.consumer_protocol",
                   "bench.share_groups")
BENCH_RUNNERS = ("bench.run", "bench.cluster", "bench.profile_workload")
BENCH_FORBIDDEN: dict[str, tuple[str, ...]] = {
    **{m: BENCH_WORKLOADS + BENCH_RUNNERS for m in BENCH_SHARED},
    **{m: tuple(w for w in BENCH_WORKLOADS if w != m) + BENCH_RUNNERS for m in BENCH_WORKLOADS},
}


def _modules(top: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package directory `top`."""
    names = {}
    for path in sorted(top.rglob("*.py")):
        parts = path.relative_to(top.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, wherever it sits (functions and
    TYPE_CHECKING blocks too); relative imports resolved, `from p import m` naming module p.m."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add((submodule if submodule in known else base, node.lineno))
    return sorted(found, key=lambda item: (item[1], item[0]))


def _graph(top: Path) -> dict[str, list[tuple[str, int]]]:
    """Each module under `top` -> its imports (all of them, inside the package or not). Importing a
    package is importing its `__init__`, so what an `__init__` re-exports counts as its imports."""
    modules = _modules(top)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    """Whether `module` is one of `prefixes` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _cycles(imports: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), or a module
    importing itself."""
    edges = {m: sorted({t for t, _ in targets if t in imports}) for m, targets in imports.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges[node]:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def _describe_cycle(component: list[str], imports: dict[str, list[tuple[str, int]]], top: Path) -> str:
    """The modules of a circle and the imports that close it, file and line each."""
    inside = set(component)
    lines = [f"  {_file(m, top)}:{line} imports {t}" for m in component for t, line in imports[m] if t in inside]
    return "circle among " + ", ".join(component) + ":\n" + "\n".join(lines)


def _file(module: str, top: Path) -> str:
    """A module's file, relative to the repository, for a failure message."""
    return str(_modules(top)[module].relative_to(ROOT))


SRC = ROOT / "src" / "offsetd"
BENCH = ROOT / "bench"


def test_no_layer_imports_against_the_flow() -> None:
    imports = _graph(SRC)
    climbing = [f"{_file(module, SRC)}:{line} ({module}) imports {target}"
                for module, targets in imports.items() for target, line in targets
                if _within(target, FORBIDDEN.get(module.split(".")[1] if "." in module else "", ()))]
    assert not climbing, "imports against DESIGN.md's flow:\n" + "\n".join(climbing)


@pytest.mark.parametrize("top", [SRC, BENCH], ids=["offsetd", "bench"])
def test_no_import_circles(top: Path) -> None:
    imports = _graph(top)
    circles = [_describe_cycle(c, imports, top) for c in _cycles(imports)]
    assert not circles, "\n".join(circles)


def test_bench_workloads_build_on_shared_modules_not_on_each_other() -> None:
    imports = _graph(BENCH)
    wrong = [f"{_file(module, BENCH)}:{line} ({module}) imports {target}"
             for module, forbidden in BENCH_FORBIDDEN.items() if module in imports
             for target, line in imports[module] if _within(target, forbidden)]
    assert not wrong, "bench imports against the flow (shared -> workloads -> runners):\n" + "\n".join(wrong)


def test_no_module_past_the_line_limit_without_a_reason() -> None:
    long = {str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
            for path in SRC.rglob("*.py")}
    unexplained = sorted(f"src/offsetd/{m}: {n} lines" for m, n in long.items()
                         if n > MAX_LINES and m not in LONG_MODULES)
    assert not unexplained, f"modules over {MAX_LINES} lines (split by concern, or say why in LONG_MODULES):\n" \
        + "\n".join(unexplained)
    stale = sorted(m for m in LONG_MODULES if long.get(m, 0) <= MAX_LINES)
    assert not stale, f"LONG_MODULES entries no longer over {MAX_LINES} lines (remove them): {stale}"
