"""The package's shape: layers that import only downwards, no import cycles, short functions.

The layers, bottom up (issue 11):
- leaves: tags, events, published numbers, atomic I/O, provenance, private-API adapters, the
  run-dir lock;
- sac: the algorithm (networks, sampling, losses, update schedule, learners); imports leaves;
- training: loop, env stepping, RNG, signals, checkpoints, run dir; imports sac and leaves;
- results: extraction, loading, metrics, tables, plots; imports leaves only (results and
  training meet only on disk);
- pipeline: what the Snakemake workflow calls (config, resources, status); imports training, sac
  and leaves;
- entry shims (`python -m sacbench.train|report|status|evaluate|run_command`):
  import only a layer's `main`, and call `gc.freeze()` before they exit.

The import graph is read from the source with ast, lazy and TYPE_CHECKING imports included.
Every check is strict: no exceptions are listed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sacbench"

LEAVES = {
    "sacbench",
    "sacbench.tags",
    "sacbench.events",
    "sacbench.published",
    "sacbench.atomic",
    "sacbench.provenance",
    "sacbench.private_api",
    "sacbench.run_lock",
}
ENTRY_SHIMS = {
    "sacbench.train",
    "sacbench.report",
    "sacbench.status",
    "sacbench.evaluate",
    "sacbench.run_command",
}
LAYER_PACKAGES = ("sac", "training", "results", "pipeline")
ALLOWED: dict[str, set[str]] = {  # layer -> the layers its modules may import
    "leaf": {"leaf"},
    "sac": {"leaf", "sac"},
    "training": {"leaf", "sac", "training"},
    "results": {"leaf", "results"},
    "pipeline": {"leaf", "sac", "training", "pipeline"},
    "entry": {"training", "results", "pipeline"},
}

MAX_FUNCTION_LINES = 60
# A longer function carries this on its `def` line, with the reason.
LONG_MARK = re.compile(r"#\s*long:\s*\S")


# ---- reading the package ---------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports anywhere (lazily and for typing too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for imported in names:
            parts = imported.split(".")
            for end in range(len(parts), 0, -1):  # the longest known module it is, or lies in
                candidate = ".".join(parts[:end])
                if candidate in known:
                    found.add(candidate)
                    break
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def layer(name: str) -> str | None:
    if name in LEAVES:
        return "leaf"
    if name in ENTRY_SHIMS:
        return "entry"
    parts = name.split(".")
    if len(parts) >= 2 and parts[1] in LAYER_PACKAGES:
        return parts[1]
    return None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def layer_violations(edges: dict[str, set[str]]) -> set[str]:
    found = set()
    for source, targets in edges.items():
        for target in targets:
            source_layer, target_layer = layer(source), layer(target)
            if source_layer and target_layer and target_layer not in ALLOWED[source_layer]:
                found.add(
                    f"layer violation: {source} ({source_layer}) imports {target} ({target_layer})"
                )
    return found


def import_cycles(edges: dict[str, set[str]]) -> set[str]:
    return {f"import cycle: {', '.join(component)}" for component in cycles(edges)}


def long_functions() -> set[str]:
    """Functions (methods and nested ones too) over MAX_FUNCTION_LINES without a `# long:`."""
    found = set()
    for name, path in package_modules().items():
        source = path.read_text()
        for qualified, node in _functions(ast.parse(source, filename=str(path))):
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            length = node.end_lineno - first + 1
            def_line = source.splitlines()[node.lineno - 1]
            if length > MAX_FUNCTION_LINES and not LONG_MARK.search(def_line):
                found.add(f"long function: {name}.{qualified}")
    return found


def _functions(node: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef]]:
    """(qualified name, node) of every function under `node`, methods and nested ones too."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((f"{prefix}{child.name}", child))
            found.extend(_functions(child, f"{prefix}{child.name}."))
        elif isinstance(child, ast.ClassDef):
            found.extend(_functions(child, f"{prefix}{child.name}."))
    return found


def _listed(found: set[str]) -> str:
    return "\n".join(sorted(found))


# ---- the tests ---------------------------------------------------------------------------------


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in package_modules() if layer(name) is None)
    assert not unplaced, (
        f"not in a layer: {', '.join(unplaced)}; put each in sacbench/"
        f"{{{','.join(LAYER_PACKAGES)}}}/ or, if every layer may use it, in LEAVES"
    )


def test_imports_go_only_downwards():
    new = _listed(layer_violations(import_graph()))
    assert not new, f"imports against the layering (see this module's docstring):\n{new}"


def test_no_import_cycles():
    new = _listed(import_cycles(import_graph()))
    assert not new, f"modules that import each other, directly or not:\n{new}"


def test_entry_shims_import_only_a_main():
    # `python -m sacbench.train` etc. stay the commands; each module only hands over to a layer.
    modules = package_modules()
    for name in sorted(ENTRY_SHIMS):
        imports = [
            (node.module, [alias.name for alias in node.names])
            if isinstance(node, ast.ImportFrom)
            else (None, [alias.name for alias in node.names])
            for node in ast.walk(ast.parse(modules[name].read_text()))
            if isinstance(node, ast.Import | ast.ImportFrom)
        ]
        ours = [entry for entry in imports if "sacbench" in f"{entry[0]} {entry[1]}"]
        assert len(ours) == 1 and ours[0][1] == ["main"], f"{name} imports {ours}"
        # ...and exits without Python's collection sweep (benchmarks/process_exit.py).
        main_block = modules[name].read_text().partition('if __name__ == "__main__":')[2]
        assert "    gc.freeze()" in main_block, f"{name} exits without gc.freeze()"


def test_no_function_over_60_lines_without_a_reason():
    new = _listed(long_functions())
    assert not new, (
        f"functions over {MAX_FUNCTION_LINES} lines; split them, or say why on the def line "
        f"(`def f(...):  # long: <reason>`):\n{new}"
    )


def test_the_graph_sees_lazy_typing_and_relative_imports(tmp_path):
    # The checks above are only as good as the graph: today's circle fast -> handwritten ->
    # train -> fast is made of a lazy import (inside make_learner) and a TYPE_CHECKING one.
    package = tmp_path / "sacbench" / "sac"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from sacbench.sac.b import B\n"
        "def f():\n    from . import c\n    from ..tags import X\n"
    )
    known = {"sacbench", "sacbench.tags", "sacbench.sac", "sacbench.sac.b", "sacbench.sac.c"}
    found = imported_modules("sacbench.sac.a", package / "a.py", known)
    assert found == {"sacbench.sac", "sacbench.sac.b", "sacbench.sac.c", "sacbench.tags"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
