"""Scoped designs without Snakemake (issue 13 item 1): `headgeom plan` on config/models.yaml +
config/paper.yaml at the registry shapes lists exactly the PK paper's design for Qwen3-235B-A22B
and Qwen2.5-7B (the dry-run equivalent is tests/workflow/test_scopes.py, on stand-ins)."""

from __future__ import annotations

from collections import Counter

from headgeom.jobs import plan as P

Q3, Q7, Q7I = "qwen3-235b-a22b", "qwen2.5-7b", "qwen2.5-7b-instruct"


def _plan(models):
    config = P.load_config([P.ROOT / "config" / "models.yaml", P.ROOT / "config" / "paper.yaml"])
    return P.plan(config, models=models)


def test_qwen3_235b_nulls_at_layer_46_only_three_samples():
    p = _plan([Q3])
    by_rule = Counter(j.rule for j in p["jobs"] if not j.rule.startswith("sensitivity_"))
    assert by_rule == {"pk_layer": 94, "pk_null_within": 1, "paper1_heads": 94, "paper1_capacity": 94}
    (null,) = [j for j in p["jobs"] if j.rule == "pk_null_within"]
    assert null.wildcards == {"layer": 46, "block": 0}


def test_qwen25_7b_reading_and_cross_nulls_no_writing_nulls_no_paper1():
    p = _plan([Q7, Q7I])
    by = Counter((j.model, j.rule) for j in p["jobs"])
    assert by[(Q7, "pk_layer")] == 28 and by[(Q7, "pk_null_within")] == 28 * 3  # 30 samples, blocks of 10
    # cross-layer pairs and their nulls: 3 sample blocks x the fan-out parts of the 378 layer pairs
    assert by[(Q7, "pk_cross_layer")] >= 1 and by[(Q7, "pk_null_cross")] >= 3 and by[(Q7, "pk_null_cross")] % 3 == 0
    assert not any(r.startswith("paper1") for m, r in by if m == Q7)
    # the instruct twin: writing-space pairs only
    assert {r for m, r in by if m == Q7I} == {"pk_layer"} and by[(Q7I, "pk_layer")] == 28
    assert "within nulls rotation/reassign on QK at layers 0-27, n = 30" in p["models"][Q7]["scope"]


def test_plan_cli_unscoped_prices_the_full_suite_the_paper_could_not_afford(capsys):
    """`headgeom plan --unscoped`: the global design on every Qwen3-235B layer (nulls on every layer
    with 30 samples, cross-layer pairs and nulls), beside the paper's scoped design."""
    from headgeom.cli import main

    files = [str(P.ROOT / "config" / "models.yaml"), str(P.ROOT / "config" / "paper.yaml")]

    def null_within_jobs(*extra):
        assert main(["plan", "--configfile", *files, "--models", Q3, *extra]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pk_null_within"))
        return int(line.split()[1])

    assert null_within_jobs() == 1
    assert null_within_jobs("--unscoped") == 94 * 3  # every layer, 30 samples in blocks of 10
