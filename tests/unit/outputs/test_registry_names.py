"""No module outside the registries names what a registry declares: a job or step, a null model,
an output (table or figure) or an architecture appears as a string literal only in its registry
(headgeom/schedule/families.py, headgeom/methods/nulls.py, the output registrations under
headgeom/outputs/, headgeom/architectures.py); everything else (headgeom/, workflow/scripts/,
the rule files) reaches it through them.

A job whose name is also the name of a family it writes is read there as the family (outputs and
shard provenance name families), so only the names that are jobs alone are checked."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from headgeom.architectures import ARCHITECTURES
from headgeom.schedule.families import SHARD_FAMILIES, JOBS, STEPS
from headgeom.methods.nulls import NULL_MODELS
from headgeom.outputs.registry import OUTPUTS

ROOT = Path(__file__).resolve().parents[3]
REGISTRIES = {"headgeom/schedule/families.py", "headgeom/methods/nulls.py", "headgeom/architectures.py"}
REGISTRY_DIRS = ("headgeom/outputs/",)


def registered() -> dict[str, set[str]]:
    return {"job": (set(JOBS) | set(STEPS)) - set(SHARD_FAMILIES), "null model": set(NULL_MODELS),
            "output": {name for _, name in OUTPUTS}, "architecture": set(ARCHITECTURES)}


def literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant of Python ``source`` equal to one of ``names``."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]


def quoted(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every quoted occurrence of one of ``names`` in a rule file."""
    return [(source[:m.start()].count("\n") + 1, m.group(2))
            for m in re.finditer(r"""(["'])(%s)\1""" % "|".join(map(re.escape, sorted(names))), source)]


def checked_files():
    for p in sorted([*(ROOT / "headgeom").rglob("*.py"), *(ROOT / "workflow/scripts").glob("*.py")]):
        rel = p.relative_to(ROOT).as_posix()
        if rel not in REGISTRIES and not rel.startswith(REGISTRY_DIRS):
            yield rel, p.read_text(), literals
    for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]:
        yield p.relative_to(ROOT).as_posix(), p.read_text(), quoted


def offenders(kind: str) -> list[str]:
    names = registered()[kind]
    return [f"{rel}:{line}: {name!r}" for rel, src, find in checked_files() for line, name in find(src, names)]


@pytest.mark.parametrize("kind", ["job", "null model", "output", "architecture"])
def test_only_the_registries_name_what_they_declare(kind):
    bad = offenders(kind)
    assert bad == [], f"{kind} names outside their registry (go through it):\n" + "\n".join(bad)


def test_the_registries_are_what_the_check_reads():
    names = registered()
    assert {"pk_within_layer", "pk_cross_layer", "fetch", "activation_forward"} <= names["job"]
    assert {"rotation", "reassign"} <= names["null model"]
    assert {"p1_anchors", "p1_table2_strong_tail"} <= names["output"]
    assert {"llama", "gpt2", "bert", "gemma3"} <= names["architecture"]


def test_the_check_sees_a_name_put_back():
    names = registered()
    src = (ROOT / "headgeom/schedule/designs.py").read_text()
    n = src.count("\n") + 2
    assert literals(src, names["job"]) == []
    assert literals(src + '\nJOB_STAGE = {"pk_within_layer": "pk"}\n', names["job"]) == [(n, "pk_within_layer")]
    assert literals(src + '\nNULLS = ("rotation",)\n', names["null model"]) == [(n, "rotation")]
    assert literals(src + '\nT = ["p1_anchors"]\n', names["output"]) == [(n, "p1_anchors")]
    rules = (ROOT / "workflow/rules/claims.smk").read_text()
    assert quoted(rules + "\nx = 'llama'\n", names["architecture"]) == [(rules.count("\n") + 2, "llama")]
