"""The import graph of headgeom/ has no cycle, headgeom.outputs and headgeom.publish never import
headgeom.verify, and headgeom.rules (what the rule files call) is the top: no module outside it imports it.
Every job of the shard-family registry is a function the registry imports (an arrow of this graph, so the
layering covers it), and no module of headgeom imports a module named at run time but the plugin
loader and the embedded models' packages.

Every module is parsed with ``ast``; every import counts, function-local ones included. A cycle
between modules, or between packages (``headgeom.X`` as a whole: headgeom/X/ or headgeom/X.py),
fails, and so does any import of headgeom.verify from under headgeom/outputs/ or headgeom/publish/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
    ("headgeom.jobs", "headgeom.outputs"),  # job functions; tables and figures
    ("headgeom.schedule",),  # shard-family registry (imports the job functions), designs, fan-out, cost models
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


def test_every_registered_job_is_an_arrow_of_the_graph():
    """Each job's function is imported by the registry module (not named in a string and imported at
    run time): the registry's arrow to the job's module is in the graph the layering test reads, and
    the job's package sits below the registry's."""
    from headgeom.schedule import families

    g, layer = graph(), {p: i for i, ps in enumerate(LAYERS) for p in ps}
    for job in families.JOBS.values():
        mod = job.run.__module__
        assert callable(job.run) and mod in g, (job.name, job.run)
        assert mod in g[families.__name__], f"{job.name}: {families.__name__} does not import {mod}"
        assert layer[package_of(mod)] < layer[package_of(families.__name__)], (job.name, mod)


def test_a_job_named_in_a_string_is_refused():
    from headgeom.schedule.families import JOBS, Job

    j = JOBS["pk_within_layer"]
    with pytest.raises(TypeError, match="the job function itself"):
        Job("pk_within_layer_str", "headgeom.jobs.pk_paper:run_pk_within_layer", {"shard": ("pk_str", "layer")}, {},
            j.cost_model, "none", "logs/x.log")


# the modules that may import a module named at run time: the plugin loader (HEADGEOM_PLUGINS) and
# the embedded models' sources (a pypi model's package)
RUNTIME_IMPORTS = {"headgeom.schedule.families", "headgeom.io.sources"}


def test_no_module_is_imported_by_a_name_given_at_run_time():
    found = {name for name, path in modules().items()
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Attribute) and node.attr in ("import_module", "__import__")
             or isinstance(node, ast.Name) and node.id == "__import__"}
    assert found <= RUNTIME_IMPORTS, sorted(found - RUNTIME_IMPORTS)
