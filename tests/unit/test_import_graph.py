"""The import graph of headgeom/ has no cycle, headgeom.outputs and headgeom.publish never import
headgeom.verify, and headgeom.rules (what the rule files call) is the top: no module outside it imports it.

Every module is parsed with ``ast``; every import counts, function-local ones included. A cycle
between modules, or between packages (``headgeom.X`` as a whole: headgeom/X/ or headgeom/X.py),
fails, and so does any import of headgeom.verify from under headgeom/outputs/ or headgeom/publish/."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "headgeom"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The headgeom modules ``name`` imports (``from a import b``: a.b when it is a module, else a)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = {f"{mod}.{a.name}" for a in node.names} & known
            out |= subs if subs else {mod}
    return {m for m in out if m == "headgeom" or m.startswith("headgeom.")} - {name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    g = {}
    for name, path in mods.items():
        targets = set()
        for m in imports(name, path, known):
            while m not in known and "." in m:  # an attribute imported from a module
                m = m.rsplit(".", 1)[0]
            if m in known and m != name:
                targets.add(m)
        g[name] = targets
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def package_of(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


def test_no_import_cycle_between_modules():
    assert cycles(graph()) == []


def test_no_import_cycle_between_packages():
    pg: dict[str, set[str]] = {}
    for a, targets in graph().items():
        pa = package_of(a)
        pg.setdefault(pa, set()).update(package_of(b) for b in targets if package_of(b) != pa)
    assert cycles(pg) == []


# headgeom's packages (headgeom/X/ or headgeom/X.py), lowest layer first; a package imports only
# packages of its own or a lower layer. A new package is slotted in here (the test fails until it is).
LAYERS = (
    ("headgeom", "headgeom.core", "headgeom.layout"),  # errors, config checks, paths
    ("headgeom.architectures", "headgeom.methods", "headgeom.patches"),  # declarations, math, 3rd-party patches
    ("headgeom.adapters",),  # checkpoint layouts -> per-head factors
    ("headgeom.io",),  # fetch, stores, shards, forward passes
    ("headgeom.schedule",),  # shard-family registry, designs, fan-out, cost models
    ("headgeom.jobs", "headgeom.outputs"),  # job entry points; tables and figures
    ("headgeom.targets",),  # what a run builds
    ("headgeom.commands",),  # plan, check, timings, efficiency
    ("headgeom.publish",),  # what the run publishes beyond the tables: ledger, macros, summary, sensitivity table, docs
    ("headgeom.verify",),  # the checks: audit, integrity, diff, spot check, claim audit, sensitivity rows
    ("headgeom.api", "headgeom.api_jobs", "headgeom.cli"),  # entry points for people (api_jobs: the API's job runs)
    ("headgeom.rules",),  # what the rule files call (nothing else imports it)
)


def test_every_package_imports_only_its_own_or_lower_layers():
    layer = {p: i for i, ps in enumerate(LAYERS) for p in ps}
    g = graph()
    assert {package_of(m) for m in g} <= set(layer), sorted({package_of(m) for m in g} - set(layer))
    up = sorted((a, b) for a, targets in g.items() for b in targets
                if layer[package_of(b)] > layer[package_of(a)])
    assert not up, up


def test_what_produces_results_never_imports_verify():
    """The checks read what headgeom.outputs and headgeom.publish produce, never the reverse."""
    bad = {(a, b) for a, targets in graph().items() if a.startswith(("headgeom.outputs", "headgeom.publish"))
           for b in targets if b.startswith("headgeom.verify")}
    assert not bad, sorted(bad)


def test_only_the_rule_files_import_the_rules_package():
    bad = {(a, b) for a, targets in graph().items() if not a.startswith("headgeom.rules")
           for b in targets if b.startswith("headgeom.rules")}
    assert not bad, sorted(bad)


def test_the_walk_sees_function_local_and_relative_imports(tmp_path):
    """The parser counts an import inside a function and resolves a relative one."""
    p = tmp_path / "m.py"
    p.write_text("from . import b\n\ndef f():\n    from headgeom.verify import audit\n")
    got = imports("headgeom.outputs.m", p, {"headgeom.outputs.b", "headgeom.verify.audit"})
    assert got == {"headgeom.outputs.b", "headgeom.verify.audit"}
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
