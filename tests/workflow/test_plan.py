"""`headgeom plan` lists exactly the per-layer jobs the workflow's dry run lists, with the
resources the rules request; and needs no weights (shape from a local checkpoint's config.json)."""

from __future__ import annotations

import pytest
import yaml

from headgeom.commands import plan as P
from headgeom.core import config as CF
from headgeom.schedule.families import JOBS
from synth import write_llama
from tinyrun import CFG, merge, snakemake
from dryrun import dry_run_requests as _dry_run

pytestmark = pytest.mark.slow

@pytest.mark.parametrize("ceiling,threads,held", [(120, 1, 1), (1e-6, 2, 1), ("between", 2, 2)])
def test_plan_matches_the_dry_run(tmp_path, snakemake_bin, root, ceiling, threads, held):
    """The jobs, their memory, runtime and cores (pk.nulls.cross_threads: the null jobs' cpus_per_task where
    they lay the parts out otherwise than one core would, else one: families.null_cross_threads). "between":
    a ceiling that one core's whole triangle passes and two cores' does not."""
    w = tmp_path
    write_llama(w / "ckpt", n_layers=5, closed=((0, 0, 1.5),))

    def config_file(minutes):
        cfg = merge({"models": {"tiny": {"source": "local", "path": str(w / "ckpt")}}, **CFG},
                    {"pk": {"nulls": {"cross_samples": 3, "cross_threads": threads}},
                     "fanout": {"max_job_minutes": minutes}})
        (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        return CF.load_config([w / "cfg.yaml"])

    if ceiling == "between":
        from headgeom.methods.nulls import per_job
        from headgeom.schedule import costs

        config = config_file(120)
        fields, nulls = P.plan(config, w)["models"]["tiny"]["fields"], config["pk"]["nulls"]
        whole = [costs.SAFETY * costs.null_cross_part_seconds(fields, 10, 4, 4, per_job(nulls, "cross"),
                                                              len(nulls["types"]), threads=t) for t in (1, 2)]
        ceiling = (whole[0] + whole[1]) / 2 / 60
    config = config_file(ceiling)

    # before any fetch: the shape comes from the checkpoint's config.json
    before = P.plan(config, w)
    assert before["models"]["tiny"]["shape_from"].endswith("config.json")

    snakemake(snakemake_bin, root, w, "results/tensors/tiny/manifest.json")
    r = snakemake(snakemake_bin, root, w, "-n")
    dry = {o: j for o, j in _dry_run(r.stdout + r.stderr).items() if j["rule"] in JOBS}

    after = P.plan(config, w)
    assert after["models"]["tiny"]["shape_from"].endswith("manifest.json")
    for p in (before, after):
        planned = {j.output: j for j in p["jobs"]}
        assert planned.keys() == dry.keys()
        for o, j in planned.items():
            assert (j.rule, j.mem_mb, j.runtime, j.threads) == (dry[o]["rule"], dry[o]["mem_mb"], dry[o]["runtime"],
                                                                dry[o]["cpus_per_task"]), o
            assert j.threads == (held if j.rule == "pk_null_cross" else 1)
        for rule, agg in p["rules"].items():
            assert agg["jobs"] == sum(1 for d in dry.values() if d["rule"] == rule)
    # 10 layer pairs, 2 blocks of cross samples: one part each (on two cores "between"), or one pair per part
    n_cross = sum(1 for d in dry.values() if d["rule"] == "pk_null_cross")
    assert n_cross == (20 if ceiling == 1e-6 else 2)


def test_plan_matches_the_dry_run_at_a_paper_models_shape(tmp_path, snakemake_bin, root):
    """The papers' design for Qwen2.5-7B from a manifest with its shape (no tensors read by a dry
    run): fan-out parts of different sizes must each be requested at their own price, in the
    rules as in the plan (Snakemake's wildcards object answers ``in`` on its values: a cost model
    testing ``"part" in wildcards`` priced every part as the whole job)."""
    import json
    import numpy as np
    from safetensors.numpy import save_file
    from headgeom.io.files import sha256_file

    from headgeom import layout

    w, model = tmp_path, "qwen2.5-7b"
    # an 8-minute ceiling (the design's own too) on one core a job: the cross-layer pairs are cut into parts of
    # different sizes
    edit = {"active_models": [model], "activation": {"enabled": False}, "fanout": {"max_job_minutes": 8},
            "designs": {model: {"fanout": {"max_job_minutes": 8}, "pk": {"nulls": {"cross_threads": 1}}}}}
    config = CF.load_config([root / "config" / "models.yaml", root / "config" / "paper.yaml"], edit)
    fields = {**config["models"][model]["shape"], "adapter": "qwen2", "norm_type": "rmsnorm", "norm_position": "pre"}
    manifest = w / layout.manifest(model)
    manifest.parent.mkdir(parents=True)
    # a sound store of no tensors: the workflow's load check finds nothing to refetch, and the
    # dry run takes the shape from the manifest
    save_file({"unused": np.zeros(1)}, manifest.parent / "tensors.safetensors")
    manifest.write_text(json.dumps({"fields": fields, "model": model, "tensors": {},
                                     "store_sha256": sha256_file(manifest.parent / "tensors.safetensors")}))
    (w / "cfg.yaml").write_text(yaml.safe_dump(edit))
    r = snakemake(snakemake_bin, root, w, "-n", configfiles=(root / "config" / "models.yaml",
                                                                root / "config" / "paper.yaml", "cfg.yaml"))
    dry = {o: j for o, j in _dry_run(r.stdout + r.stderr).items() if j["rule"] in JOBS}
    p = P.plan(config, w)
    assert p["models"][model]["shape_from"].endswith("manifest.json")
    planned = {j.output: j for j in p["jobs"]}
    assert planned.keys() == dry.keys()
    for o, j in planned.items():
        assert (j.rule, j.mem_mb, j.runtime) == (dry[o]["rule"], dry[o]["mem_mb"], dry[o]["runtime"]), o
    for rule in ("pk_cross_layer", "pk_null_cross"):  # parts of different sizes, each under the ceiling
        parts = [j.runtime for j in p["jobs"] if j.rule == rule]
        assert len(parts) > 1 and len(set(parts)) > 1 and max(parts) <= p["ceiling_min"], (rule, parts)
    from headgeom.schedule.designs import model_config

    # the whole stage would not fit one job on the design's one core
    assert JOBS["pk_null_cross"].cost(fields, model_config(config, model))["runtime"] > p["ceiling_min"]


def test_wall_clock_falls_with_cores_down_to_the_longest_job():
    config = CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"])
    # the full (global) design at Qwen3-235B's shape: enough jobs that 256 cores still help
    # (the paper's own scope, one null layer, saturates earlier: tests/unit/schedule/test_designs_plan.py)
    config = {**config, "designs": {}}
    p = P.plan(config, models=["qwen3-235b-a22b"])
    longest = max(j.runtime for j in p["jobs"])
    assert longest <= p["ceiling_min"]
    walls = [P.wall_clock_hours(p, c) for c in (1, 64, 256, 1024, 4096, 100_000)]
    assert all(a > b for a, b in zip(walls[:3], walls[1:4]))  # falls with cores ...
    assert all(a >= b for a, b in zip(walls[3:], walls[4:]))  # ... and never rises
    total_h = sum(j.threads * j.runtime for j in p["jobs"]) / 60
    fetch_h = p["fetch_min"] / 60
    assert walls[0] == pytest.approx(total_h + fetch_h)  # one core: fetch + every job in turn
    assert walls[-1] == pytest.approx(longest / 60 + fetch_h)  # enough cores: fetch + the longest job


def test_makespan_against_brute_force():
    import itertools

    times = [7, 5, 4, 3, 3, 2]
    best = min(max(sum(t for t, a in zip(times, assign) if a == k) for k in range(2))
               for assign in itertools.product(range(2), repeat=len(times)))
    assert best <= P.makespan(times, 2) <= 4 / 3 * best
    assert P.makespan(times, 100) == 7 and P.makespan(times, 1) == sum(times)


def test_makespan_of_jobs_on_several_cores():
    """A job holding k cores starts when k are free: worked by hand."""
    # 4 cores: the 4-core job alone, then the four 1-core jobs side by side: 80 core-minutes / 4
    assert P.makespan([10, 10, 10, 10, 10], 4, [4, 1, 1, 1, 1]) == 20
    # 3 cores: the two 2-core jobs cannot overlap (4 cores), so >= 6 + 4; the 1-core job fits beside the first
    assert P.makespan([6, 5, 4], 3, [2, 1, 2]) == 10
    with pytest.raises(ValueError, match="holds 5 cores"):
        P.makespan([1], 4, [5])


def test_plan_counts_a_jobs_cores_in_its_core_hours_and_wall_clock():
    from headgeom.schedule.designs import global_design

    config = global_design(CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"],
                                          {"pk": {"nulls": {"cross_threads": 4}}}))
    p = P.plan(config, models=["qwen3-235b-a22b"])
    cross = [j for j in p["jobs"] if j.rule == "pk_null_cross"]
    assert cross and all(j.threads == 4 for j in cross)
    assert all(j.threads == 1 for j in p["jobs"] if j.rule != "pk_null_cross")
    r = p["rules"]["pk_null_cross"]
    assert r["core_hours"] == pytest.approx(sum(4 * j.runtime / 60 for j in cross))
    assert r["work_core_hours"] == pytest.approx(sum(4 * j.expected_s / 3600 for j in cross))
    # one core: every job's core-minutes in turn (a 4-core job's on the one core), after the fetch
    one = P.wall_clock_hours(p, 1)
    assert one == pytest.approx(p["fetch_min"] / 60 + sum(j.threads * j.runtime for j in p["jobs"]) / 60)
    assert P.wall_clock_hours(p, 1, expected=True) < one
