"""The cross-layer nulls' draws in the cost model (headgeom.schedule.costs): counted as the job makes them."""

from __future__ import annotations

import math

import pytest

from headgeom.schedule import costs

TINY = {"d_model": 48, "n_heads": 4, "n_kv_heads": 2, "d_head": 16, "n_layers": 3}  # O, Q wide (64 > 48); K, V not


@pytest.mark.parametrize("budget_matrices,types", [(100, ["rotation"]), (1, ["rotation"]), (0, ["rotation", "reassign"]),
                                                   (100, ["reassign"])])
def test_rotation_preparations_are_priced_as_often_as_the_job_makes_them(tmp_path, monkeypatch, budget_matrices, types):
    """A pk_null_cross part makes the LQ factor of each wide layer matrix (O and Q here) once while the
    factors fit PREPARED_CACHE_MB and again for each sample beyond it; the model counts the same number
    (counted here by wrapping the factorization the job calls)."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_cross_job
    from headgeom.methods import nulls
    from headgeom.jobs import pk_paper
    from synth import write_llama

    write_llama(tmp_path / "ck", d_model=48, n_heads=4, n_kv=2, d_head=16, n_layers=3, closed=())
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    made = []
    real = nulls.lq_factor
    monkeypatch.setattr(nulls, "lq_factor", lambda S: (made.append(S.shape), real(S))[1])
    for holder in (costs, pk_paper):  # the job holds the budget; the cost model prices it
        monkeypatch.setattr(holder, "PREPARED_CACHE_MB", budget_matrices * 48 * 48 * 8 / 2**20)
    segments = [(0, 1, 3), (1, 2, 3)]  # writer layers 0 and 1, reader layers 1 and 2
    p = {"rank_rtol": 1e-6, "types": types, "cross_kinds": ["Q", "K", "V"]}
    pk_null_cross_job(tmp_path / "store", [0, 1, 2], tmp_path / "out.parquet", p, segments=segments, log=lambda *_: None)
    assert all(shape == (48, 64) for shape in made)  # only the wide matrices (K, V: 32 columns) are factored
    assert len(made) == costs.null_cross_preparations(TINY, 2, 2, 3, types)
    want = {(100, ("rotation",)): 4, (1, ("rotation",)): 1 + 3 * 3, (0, ("rotation", "reassign")): 4 * 3,
            (100, ("reassign",)): 0}[budget_matrices, tuple(types)]
    assert len(made) == want


def test_a_parts_draws_are_priced_per_sample_and_its_preparations_once(monkeypatch):
    """null_cross_part_seconds: each writer and reader layer's draws once a sample and null
    (draw_seconds, rotation dearer than reassignment), the wide matrices' preparations once a job while
    they fit their budget, again each sample beyond it; a square or narrow layer matrix has none."""
    f235 = {"d_model": 4096, "n_heads": 64, "n_kv_heads": 4, "d_head": 128, "n_layers": 94}
    f7 = {"d_model": 3584, "n_heads": 28, "n_kv_heads": 4, "d_head": 128, "n_layers": 28}
    assert costs.draw_prep_seconds(3584, 128, 28, "rotation") == 0  # 28 x 128 = 3584: not wide
    assert costs.draw_prep_seconds(4096, 128, 64, "rotation") > 0 == costs.draw_prep_seconds(4096, 128, 64, "reassign")
    assert costs.draw_prep_seconds(4096, 128, 4, "rotation") == 0  # K, V: 512 columns
    for budget, kept in ((1e9, 4), (128, 1)):  # one 4096 x 4096 float64 factor is 128 MiB
        monkeypatch.setattr(costs, "PREPARED_CACHE_MB", budget)
        for f in (f7, f235):
            D, d, H = f["d_model"], f["d_head"], f["n_heads"]
            assert costs.draw_seconds(D, d, H, "rotation") > 5 * costs.draw_seconds(D, d, H, "reassign")
            one = costs.null_cross_part_seconds(f, 4, 2, 2, 1)
            two = costs.null_cross_part_seconds(f, 4, 2, 2, 2)
            dp = costs.draw_prep_seconds(D, d, H, "rotation")  # O of the 2 writers, Q of the 2 readers
            # a second sample: everything again but the preparations kept
            assert two - one == pytest.approx(one - (kept if dp else 0) * dp)


QWEN3_235B = {"d_model": 4096, "d_head": 128, "n_heads": 64, "n_kv_heads": 4, "n_layers": 94}


def test_a_part_on_several_cores_is_its_phases_at_their_efficiencies():
    from headgeom.schedule import costs

    work = costs.null_cross_part_work(QWEN3_235B, 300, 20, 20, 1, 2)
    assert set(work) == set(costs.THREAD_EFFICIENCY) and all(v > 0 for v in work.values())
    one = costs.null_cross_part_seconds(QWEN3_235B, 300, 20, 20, 1, 2)
    assert one == pytest.approx(sum(work.values()))  # one core: the CPU seconds
    eff = costs.THREAD_EFFICIENCY
    four = costs.null_cross_part_seconds(QWEN3_235B, 300, 20, 20, 1, 2, threads=4)
    assert four == pytest.approx(work["draws"] / (4 * eff["draws"]) + work["packing"] / (4 * eff["packing"])
                                 + work["gram"] / (4 * eff["gram"]))
    res = costs.pk_null_cross(QWEN3_235B, 1, 2, 300, 20, 20, threads=4)
    assert res["threads"] == 4 and res["work_s"] == pytest.approx(four)
    assert res["runtime"] == math.ceil(costs.SAFETY * four / 60)
    # the memory: the sides may hold 4 x NULL_CROSS_SIDE_MB, and 4 draws' working sets
    assert res["mem_mb"] > costs.pk_null_cross(QWEN3_235B, 1, 2, 300, 20, 20)["mem_mb"]


def test_more_cores_a_job_give_larger_tiles_and_fewer_draws_at_the_235b_shape():
    """config/paper.yaml's cores per cross-layer null job: the tile grows until one sample's whole triangle
    is one part (each layer drawn once a sample), every part within the ceiling on its cores, and the stage's
    core-hours fall though each core does less than its share."""
    from headgeom.core.config import ROOT, load_config
    from headgeom.schedule import designs, fanout
    from headgeom.schedule.families import JOBS

    base = designs.global_design(load_config([ROOT / "config" / "models.yaml", ROOT / "config" / "paper.yaml"]))
    job = JOBS["pk_null_cross"]
    work, n_parts = {}, {}
    for threads in (1, 16):
        cfg = {**base, "pk": {**base["pk"], "nulls": {**base["pk"]["nulls"], "cross_threads": threads}}}
        parts = fanout.parts(job, QWEN3_235B, cfg)
        n_parts[threads] = len(parts)
        costs_ = [job.cost(QWEN3_235B, cfg, {"part": str(i), "block": "0"}) for i in range(len(parts))]
        assert all(c["runtime"] <= fanout.max_job_minutes(cfg) for c in costs_)
        assert all(c["threads"] == threads for c in costs_)
        work[threads] = sum(c["threads"] * c["work_s"] for c in costs_)
    assert n_parts[1] > 1 and n_parts[16] == 1
    assert work[16] < work[1]
