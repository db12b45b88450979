"""Per-model designs without Snakemake (issue 13 item 1): `headgeom plan` on config/models.yaml +
config/paper.yaml at the registry shapes lists exactly the PK paper's design for Qwen3-235B-A22B
and Qwen2.5-7B (the dry-run equivalent is tests/workflow/test_designs.py, on stand-ins)."""

from __future__ import annotations

from collections import Counter

import pytest

from headgeom.commands import plan as P
from headgeom.core import config as CF

Q3, Q7, Q7I = "qwen3-235b-a22b", "qwen2.5-7b", "qwen2.5-7b-instruct"


def _plan(models):
    config = CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"])
    return P.plan(config, models=models)


def test_qwen3_235b_nulls_at_layer_46_only_three_samples():
    p = _plan([Q3])
    by_rule = Counter(j.rule for j in p["jobs"] if not j.rule.startswith("sensitivity_"))
    assert by_rule == {"pk_within_layer": 94, "pk_null_within": 1, "paper1_heads": 94, "paper1_capacity": 94}
    (null,) = [j for j in p["jobs"] if j.rule == "pk_null_within"]
    assert null.wildcards == {"layer": 46, "block": 0}


def test_qwen25_7b_reading_and_cross_nulls_no_writing_nulls_no_paper1():
    p = _plan([Q7, Q7I])
    by = Counter((j.model, j.rule) for j in p["jobs"])
    assert by[(Q7, "pk_within_layer")] == 28 and by[(Q7, "pk_null_within")] == 28 * 3  # 30 samples, blocks of 10
    # cross-layer pairs and their nulls: 3 sample blocks x the fan-out parts of the 378 layer pairs
    assert by[(Q7, "pk_cross_layer")] >= 1 and by[(Q7, "pk_null_cross")] >= 3 and by[(Q7, "pk_null_cross")] % 3 == 0
    assert not any(r.startswith("paper1") for m, r in by if m == Q7)
    # the instruct twin: writing-space pairs only
    assert {r for m, r in by if m == Q7I} == {"pk_within_layer"} and by[(Q7I, "pk_within_layer")] == 28
    assert "within nulls rotation/reassign on QK at layers 0-27, n = 30" in p["models"][Q7]["design"]


def test_plan_cli_unscoped_prices_the_full_suite_the_paper_could_not_afford(capsys):
    """`headgeom plan --global-design`: the global design on every Qwen3-235B layer (nulls on every layer
    with 30 samples, cross-layer pairs and nulls), beside the paper's scoped design."""
    from headgeom.cli import main

    files = [str(CF.ROOT / "config" / "models.yaml"), str(CF.ROOT / "config" / "paper.yaml")]

    def null_within_jobs(*extra):
        assert main(["plan", "--configfile", *files, "--models", Q3, *extra]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pk_null_within"))
        return int(line.split()[1])

    assert null_within_jobs() == 1
    assert null_within_jobs("--global-design") == 94 * 3  # every layer, 30 samples in blocks of 10


def _unscoped_plan(models, threads=None):
    """The global design's plan (``threads``: pk.nulls.cross_threads in place of config/paper.yaml's)."""
    from headgeom.schedule.designs import global_design

    config = global_design(CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"]))
    if threads is not None:
        config["pk"]["nulls"]["cross_threads"] = threads
    return P.plan(config, models=models), config


def test_expected_work_never_above_the_request_and_reported_per_rule(capsys):
    """`headgeom plan` reports the cost model's expected work beside the request: no job expects
    more than it asks for, the PK jobs expect less by the safety factor (the floor aside), and the
    rule and total lines carry both."""
    from headgeom.cli import main
    from headgeom.schedule.costs import SAFETY

    for p in (_plan([Q7]), _unscoped_plan([Q3])[0]):
        for j in p["jobs"]:
            assert 0 < j.expected_s <= 60 * j.runtime, j
            if j.rule.startswith("pk_"):
                assert j.work_s is not None and j.expected_s * SAFETY <= 60 * j.runtime + 1e-9
                if j.runtime > 5:  # above the floor the request is the work x SAFETY, rounded up to a minute
                    assert 60 * j.runtime - 60 < SAFETY * j.expected_s, j
        for r in p["rules"].values():
            assert 0 < r["work_core_hours"] <= r["core_hours"]
    files = [str(CF.ROOT / "config" / "models.yaml"), str(CF.ROOT / "config" / "paper.yaml")]
    assert main(["plan", "--configfile", *files, "--models", Q7]) == 0
    lines = {ln.split()[0]: ln.split() for ln in capsys.readouterr().out.splitlines() if ln.strip()}
    from headgeom.publish.choice_sensitivity import planned_jobs

    config = CF.load_config(files)
    p = P.plan(config, models=[Q7], more_jobs=planned_jobs)  # as the CLI: the choice sensitivity's jobs too
    assert float(lines["pk_null_cross"][3]) == round(p["rules"]["pk_null_cross"]["work_core_hours"], 1)
    assert float(lines["total"][3]) == round(sum(j.expected_s for j in p["jobs"]) / 3600, 1)
    assert float(lines["total"][2]) == round(sum(j.runtime for j in p["jobs"]) / 60, 1)


@pytest.mark.parametrize("threads", [1, 16])
def test_cross_null_work_is_the_sum_of_its_parts_draws_and_pairs(threads):
    """The pk_null_cross rule's expected work, recomputed from its fan-out: per sample and null, every
    part's layer pairs at the slab products' seconds plus one draw and one packing of each writer and
    reader layer it holds (each head packed once a sample: its part is one projector-Gram call); on
    several cores each phase at its parallel efficiency, the core-hours that many times the hours."""
    from headgeom.methods import projectors
    from headgeom.schedule import costs, fanout
    from headgeom.schedule.families import JOBS
    from headgeom.schedule.designs import model_config

    p, config = _unscoped_plan([Q3], threads)
    fields = p["models"][Q3]["fields"]
    nulls = model_config(config, Q3)["pk"]["nulls"]
    D, d, H, G = fields["d_model"], fields["d_head"], fields["n_heads"], fields["n_kv_heads"]
    e = costs.THREAD_EFFICIENCY if threads > 1 else {"draws": 1, "packing": 1, "gram": 1}
    gram = 2 * projectors.packed_length(D) * H * (H + 2 * G) / (projectors.GEMM_FLOPS * projectors.ROUTE_RATES["gram"])
    types = nulls["types"]
    o, kv = (sum(costs.draw_seconds(D, d, n, null) for null in types) for n in (H, G))
    draw_w, pack_w = o, len(types) * projectors.pack_seconds(D, d, H)  # O
    draw_r, pack_r = o + 2 * kv, len(types) * projectors.pack_seconds(D, d, H + 2 * G)  # Q, K, V
    prep = costs.draw_prep_seconds(D, d, H, "rotation")  # O's and Q's LQ factors (64 x 128 > 4096), once a part
    assert prep > 0 and costs.draw_prep_seconds(D, d, G, "rotation") == 0
    parts = fanout.parts(JOBS["pk_null_cross"], fields, model_config(config, Q3))
    assert int(nulls["cross_samples_per_job"]) == 1
    layers = [(len({w for w, _, _ in pt}), len({r for _, a, b in pt for r in range(a, b)})) for pt in parts]
    # core-seconds: each phase's CPU seconds / efficiency (on one core: the CPU seconds)
    per_sample = sum(fanout.n_pairs(pt) * gram * len(types) / e["gram"] + (nw * pack_w + nr * pack_r) / e["packing"]
                     + (nw * (draw_w + prep) + nr * (draw_r + prep)) / e["draws"] for pt, (nw, nr) in zip(parts, layers))
    expected = per_sample * int(nulls["cross_samples"])
    cross = [j for j in p["jobs"] if j.rule == "pk_null_cross"]
    assert {j.threads for j in cross} == {threads}
    got = sum(j.threads * j.expected_s for j in cross)
    assert got == pytest.approx(expected, rel=1e-9)
    assert p["rules"]["pk_null_cross"]["work_core_hours"] == pytest.approx(expected / 3600, rel=1e-9)
    # every pair in exactly one part
    assert sum(fanout.n_pairs(pt) for pt in parts) == fields["n_layers"] * (fields["n_layers"] - 1) // 2


def test_expected_work_meets_the_papers_budgets_with_one_cross_sample_a_job():
    """The cross-layer null parts redraw every layer they hold for each of their samples: with one
    sample a job (pk.nulls.cross_samples_per_job) the fan-out takes tiles large enough that the PK
    paper's Qwen2.5-7B design expects <= 8 core-h of work (its cross-layer nulls in float32, as the paper
    ran them: in float64 they alone are over 6) and the global Qwen3-235B suite <= 350 in float64 on
    16 cores a cross-layer null job (<= 800 on one); in blocks of samples_per_job (10) on one core the
    235B suite's draws alone would break that budget."""
    def work_h(p):
        return sum(j.threads * j.expected_s for j in p["jobs"]) / 3600

    p7, (p235, _) = _plan([Q7]), _unscoped_plan([Q3])
    assert work_h(p7) <= 8 and work_h(p235) <= 350  # config/paper.yaml's 16 cores a cross-layer null job
    config7 = CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"])
    config7["designs"][Q7]["pk"]["nulls"]["cross_precision"] = "float64"
    assert work_h(P.plan(config7, models=[Q7])) > 8
    assert {j.wildcards["block"] for j in p235["jobs"] if j.rule == "pk_null_cross"} == set(range(30))
    one, config = _unscoped_plan([Q3], threads=1)  # on one core a job: 13-layer tiles, each layer drawn 4.4 times
    assert 350 < work_h(one) <= 800
    config["pk"]["nulls"]["cross_samples_per_job"] = None  # falls back to samples_per_job: 3 blocks of 10
    tens = P.plan(config, models=[Q3])
    assert {j.wildcards["block"] for j in tens["jobs"] if j.rule == "pk_null_cross"} == {0, 1, 2}
    assert work_h(tens) > 800


def test_no_job_holds_the_others_back():
    """config/paper.yaml's fan-out ceilings: no job of the global Qwen3-235B suite expects more than 30
    min of work (56 min requested), none of the PK paper's Qwen2.5-7B design more than 15 (its design's
    28-min ceiling), and the 7B design's wall-clock on 64 cores (fetch, then the jobs longest first) is
    bound by its total work: within 30 min (the 235B suite's on 256 cores within 2 h). The design's ceiling is the model's own: the 235B suite keeps
    the global one."""
    p7, (p235, _) = _plan([Q7]), _unscoped_plan([Q3])
    assert max(j.expected_s for j in p235["jobs"]) <= 30 * 60
    assert max(j.expected_s for j in p7["jobs"]) <= 15 * 60
    assert max(j.runtime for j in p7["jobs"]) <= 28 < max(j.runtime for j in p235["jobs"]) <= 56
    # each job its expected work: within 30 min on 64 cores (7B) and 2 h on 256 (235B); each its whole request
    # (the margin, on the slowest node measured) within 1.5x that
    assert P.wall_clock_hours(p7, 64, expected=True) <= 0.5 and P.wall_clock_hours(p7, 64) <= 0.75
    assert P.wall_clock_hours(p235, 256, expected=True) <= 2 and P.wall_clock_hours(p235, 256) <= 3
    # the hub fetch's request comes from its bytes at the stated rate, not a fixed half hour
    assert p7["fetch_min"] < 15


def test_cross_null_jobs_hold_more_cores_only_where_they_lay_out_larger_parts():
    """config/paper.yaml gives a cross-layer null job 16 cores: the global Qwen3-235B suite's jobs hold them
    (one core's tiles would be smaller: each layer drawn in more parts), an embedded model's one (its whole
    triangle is one part on one core: more cores would only add their parallel losses)."""
    from headgeom.schedule import fanout
    from headgeom.schedule.designs import global_design, model_config
    from headgeom.schedule.families import JOBS, null_cross_threads

    config = CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"])
    q3 = model_config(global_design(config), Q3)
    assert q3["pk"]["nulls"]["cross_threads"] == 16 and null_cross_threads(q3, config["models"][Q3]["shape"]) == 16
    p235, _ = _unscoped_plan([Q3])
    assert {j.threads for j in p235["jobs"] if j.rule == "pk_null_cross"} == {16}
    gemma = {"n_layers": 18, "d_model": 640, "n_heads": 4, "n_kv_heads": 1, "d_head": 256}  # Gemma-3-270M
    mc = model_config(config, "gemma3-270m")
    assert mc["pk"]["nulls"]["cross_threads"] == 16 and null_cross_threads(mc, gemma) == 1
    assert fanout.parts(JOBS["pk_null_cross"], gemma, mc) == [[(w, w + 1, 18) for w in range(17)]]
    assert JOBS["pk_null_cross"].cost(gemma, mc)["threads"] == 1
