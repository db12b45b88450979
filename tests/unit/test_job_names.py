"""No module of headgeom/ outside the registries names a job: a per-layer job's or step's name
appears as a string literal only in the registries (headgeom/jobs/families.py, the output
registrations under headgeom/outputs/, headgeom/methods/nulls.py, headgeom/architectures.py);
everything else reaches a job through them (its stage, schedule, cost, paths).

A job whose name is also the name of a family it writes is read there as the family (outputs and
shard provenance name families), so only the names that are jobs alone are checked."""

from __future__ import annotations

import ast
from pathlib import Path

from headgeom.jobs.families import FAMILIES, JOBS, STEPS

ROOT = Path(__file__).resolve().parents[2]
REGISTRIES = {"headgeom/jobs/families.py", "headgeom/methods/nulls.py", "headgeom/architectures.py"}
REGISTRY_DIRS = ("headgeom/outputs/",)
# (file, name) pairs tolerated outside the registries: the forward job's provenance record names
# its step (headgeom.jobs.families.FORWARD); the registry imports this module's job, so the name
# cannot come from there without an import cycle
PENDING = {("headgeom/jobs/activation.py", "activation_forward")}


def job_names() -> set[str]:
    return (set(JOBS) | set(STEPS)) - set(FAMILIES)


def literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant equal to one of ``names``."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]


def offenders() -> list[str]:
    names, out = job_names(), []
    for p in sorted((ROOT / "headgeom").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel in REGISTRIES or rel.startswith(REGISTRY_DIRS):
            continue
        out += [f"{rel}:{line}: {name!r}" for line, name in literals(p.read_text(), names)
                if (rel, name) not in PENDING]
    return out


def test_only_the_registries_name_a_job():
    assert {"pk_layer", "pk_cross_layer", "fetch", "activation_forward"} <= job_names()
    assert offenders() == [], "job names outside the registries (go through headgeom.jobs.families):\n" + \
        "\n".join(offenders())


def test_the_check_sees_a_job_name_put_back():
    src = (ROOT / "headgeom/jobs/scopes.py").read_text()
    assert literals(src, job_names()) == []
    assert literals(src + '\nJOB_STAGE = {"pk_layer": "pk"}\n', job_names()) == [(src.count("\n") + 2, "pk_layer")]
