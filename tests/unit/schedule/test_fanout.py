"""Fan-out of the cross-layer null stage (headgeom.schedule.fanout): parts cover every layer pair
once, stay under the runtime ceiling, and give the same draws bit for bit whatever the packing."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from headgeom.core.errors import ConfigError
from headgeom.methods import projectors
from headgeom.schedule import costs, fanout
from headgeom.schedule.families import JOBS, null_cross_threads, shard_paths

QWEN25_7B = {"n_layers": 28, "d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv_heads": 4}
QWEN3_235B = {"n_layers": 94, "d_model": 4096, "d_head": 128, "n_heads": 64, "n_kv_heads": 4}
PAPER = {"pk": {"nulls": {"types": ["rotation", "reassign"], "cross_samples": 30, "samples_per_job": 10}}, "fanout": {"max_job_minutes": 120}}


@pytest.mark.parametrize("L,max_pairs", [(2, 1), (5, 1), (5, 3), (5, 4), (5, 100), (28, 25), (94, 4), (94, 50)])
def test_parts_cover_every_pair_once_under_the_cap(L, max_pairs):
    parts = fanout.pair_parts(L, max_pairs)
    pairs = [(w, r) for p in parts for w, r0, r1 in p for r in range(r0, r1)]
    # writer-major order, each pair once
    assert pairs == [(w, r) for w in range(L - 1) for r in range(w + 1, L)]
    assert all(1 <= fanout.n_pairs(p) <= max_pairs for p in parts)
    # a writer row is split only when it alone exceeds the cap; otherwise rows stay whole
    for p in parts:
        for w, r0, r1 in p:
            if L - 1 - w <= max_pairs:
                assert (r0, r1) == (w + 1, L)
    # greedy packing: two neighbouring multi-row parts could not have been merged
    for a, b in zip(parts, parts[1:]):
        assert fanout.n_pairs(a) + (L - 1 - b[0][0]) > max_pairs or b[0][1] != b[0][0] + 1


@pytest.mark.parametrize("L,max_pairs,writer_pairs", [(5, 3, 0.5), (28, 25, 1.0), (28, 10, 4.5), (94, 40, 1.7),
                                                       (94, 6, 5.0)])
def test_parts_count_their_writer_layers_against_the_cap(L, max_pairs, writer_pairs):
    """A part pays once per writer layer (pk_cross_layer: its read, bases and lambda_min(S)): its pairs
    plus writer_pairs a writer stay under the cap, and every pair is still in exactly one part, in order."""
    parts = fanout.pair_parts(L, max_pairs, writer_pairs)
    pairs = [(w, r) for p in parts for w, r0, r1 in p for r in range(r0, r1)]
    assert pairs == [(w, r) for w in range(L - 1) for r in range(w + 1, L)]
    units = [fanout.n_pairs(p) + writer_pairs * fanout.part_layers(p)[1] for p in parts]
    assert all(u <= max_pairs + 1e-12 for u in units), (units, max_pairs)
    # greedy: the next whole row would not have fitted
    whole = lambda seg: seg[1] == seg[0] + 1 and seg[2] == L  # noqa: E731
    for a, b in zip(parts, parts[1:]):
        if whole(a[-1]) and whole(b[0]):
            assert (fanout.n_pairs(a) + writer_pairs * fanout.part_layers(a)[1]
                    + (L - 1 - b[0][0]) + writer_pairs > max_pairs)
    # the writers' cost moves pairs into more parts than the pairs alone need
    assert len(parts) >= len(fanout.pair_parts(L, max_pairs))
    with pytest.raises(ConfigError, match="at least one pair"):
        fanout.pair_parts(L, 2, 1.5)
    # the smallest cap (one pair and its writer) holds one pair, whatever the rounding of 1 + w - w
    assert all(fanout.n_pairs(p) == 1 for p in fanout.pair_parts(L, 1 + writer_pairs, writer_pairs))


@pytest.mark.parametrize("L,side", [(2, 1), (5, 1), (5, 2), (5, 4), (5, 100), (28, 5), (94, 3), (94, 40)])
def test_tiles_cover_every_pair_once_within_their_side(L, side):
    parts = fanout.tile_parts(L, side)
    pairs = [(w, r) for p in parts for w, r0, r1 in p for r in range(r0, r1)]
    assert sorted(pairs) == [(w, r) for w in range(L - 1) for r in range(w + 1, L)]
    assert len(pairs) == len(set(pairs))
    for p in parts:
        n, writers, readers = fanout.part_layers(p)
        assert 1 <= writers <= side and 1 <= readers <= side and n <= side * side
        assert [w for w, _, _ in p] == sorted({w for w, _, _ in p})  # writer-major within a tile
    if side >= L - 1:  # one part: the unsplit job's segments
        assert parts == [[(w, w + 1, L) for w in range(L - 1)]]
    with pytest.raises(ConfigError, match="side"):
        fanout.tile_parts(L, 0)


def test_tiles_draw_fewer_layers_than_row_pieces():
    """A tile of P pairs draws about 2 sqrt(P) layers where a piece of a writer row draws P + 1."""
    tile = fanout.tile_parts(28, 5)[1]  # a full 5 x 5 tile
    assert fanout.part_layers(tile) == (25, 5, 5)
    row = next(p for p in fanout.pair_parts(28, 25) if fanout.n_pairs(p) == 25)  # writer 2's whole row
    assert fanout.part_layers(row) == (25, 1, 25)


def _prep_repeats(D, writers, readers):
    """How often a job of 10 samples makes its rotations' LQ factors: the first ones that fit
    PREPARED_CACHE_MB once, the rest once a sample."""
    n = len(writers) + len(readers)
    kept = min(n, costs.PREPARED_CACHE_MB * 2**20 // (8 * D * D))
    return (kept + (n - kept) * 10) / n


@pytest.mark.parametrize("job", ["pk_cross_layer", "pk_null_cross"])
def test_no_paper_job_exceeds_the_ceiling_and_small_ceilings_make_more_jobs(job):
    for fields in (QWEN25_7B, QWEN3_235B):
        parts = fanout.parts(JOBS[job], fields, PAPER)
        for i, p in enumerate(parts):
            r = JOBS[job].cost(fields, PAPER, {"part": i})
            assert r["runtime"] <= 120, (fields, p, r)
            # the job's runtime: its pairs x the per-pair cost; a null part also its layers' draws, once
            # a sample and null for each writer and each reader layer (an independent recomputation)
            if job == "pk_null_cross":
                writers, readers = {w for w, _, _ in p}, {r for _, r0, r1 in p for r in range(r0, r1)}
                # by projector Grams: each pair's slab products, each layer's packing once a sample and null
                D, d, H, G = fields["d_model"], fields["d_head"], fields["n_heads"], fields["n_kv_heads"]
                draw_w, draw_r = (sum(costs.draw_seconds(D, d, n, null) for null in ("rotation", "reassign"))
                                  for n in (H, G))
                draw_r = draw_w + 2 * draw_r  # a reader layer: Q (H heads), K and V (G each)
                Lp = projectors.packed_length(D)
                gram = 2 * Lp * H * (H + 2 * G) / (projectors.GEMM_FLOPS * projectors.ROUTE_RATES["gram"])
                pack = 2 * d * Lp / (projectors.GEMM_FLOPS * projectors.ROUTE_RATES["pack"]) + 8 * Lp * projectors.BYTES_PER_FLOP_TIME
                # a rotation's LQ factor of each wide matrix (O and Q at 235B: 64 x 128 > 4096), once a job
                prep = costs.draw_prep_seconds(D, d, H, "rotation") * (len(writers) + len(readers))
                want = 10 * (2 * gram * fanout.n_pairs(p) + (draw_w + 2 * H * pack) * len(writers)
                             + (draw_r + 2 * (H + 2 * G) * pack) * len(readers)) + prep * _prep_repeats(D, writers, readers)
                # each side of the part within one projector-Gram call's memory: every head packed once a sample
                assert max(len(writers), len(readers)) <= projectors.tile_side(D, d, H, H + 2 * G, fields["n_layers"])
            else:
                # each pair's reader layer and products, and each writer layer's read, bases and lambda_min(S) once
                want = (costs.pk_cross_pair_seconds(fields) * fanout.n_pairs(p)
                        + costs.pk_cross_writer_seconds(fields) * len({w for w, _, _ in p}))
            assert r["runtime"] == max(5, -(-costs.SAFETY * want // 60))
        lower = {**PAPER, "fanout": {"max_job_minutes": 30}}
        assert len(fanout.parts(JOBS[job], fields, lower)) > len(parts)
    # unsplit, the cross-layer pairs at 235B shape / the whole null stage at 7B shape run for hours
    assert costs.pk_cross_layer(QWEN3_235B, n_pairs=94 * 93 // 2)["runtime"] > 24 * 60
    assert costs.pk_null_cross(QWEN25_7B, 10, 2)["runtime"] > 2 * 60


@pytest.mark.parametrize("job", ["pk_cross_layer", "pk_null_cross"])
def test_a_part_is_priced_alike_from_snakemakes_wildcards_and_from_a_dict(job):
    """The rules hand the cost model Snakemake's wildcards object, whose ``in`` tests the values:
    each part must still be priced as itself, not as the whole job."""
    from snakemake.iocontainers import Wildcards

    for i in range(len(fanout.parts(JOBS[job], QWEN25_7B, PAPER))):
        wc = Wildcards(fromdict={"model": "qwen2.5-7b", "block": "0", "part": str(i)})
        assert JOBS[job].cost(QWEN25_7B, PAPER, wc) == JOBS[job].cost(QWEN25_7B, PAPER, {"part": i})
    assert JOBS[job].cost(QWEN25_7B, PAPER, wc)["runtime"] != JOBS[job].cost(QWEN25_7B, PAPER)["runtime"]


def test_part_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError, match="parts 0.."):
        fanout.part(JOBS["pk_null_cross"], QWEN25_7B, PAPER, 10_000)


def test_shard_paths_are_block_then_part():
    got = shard_paths("pk_null_cross", "m", 5, {"cross": range(2)}, parts=3)
    assert got == [f"results/shards/pk_null_cross/m/block{b}/part{p}.parquet" for b in range(2) for p in range(3)]


SMALL = {"n_layers": 18, "d_model": 640, "d_head": 256, "n_heads": 4, "n_kv_heads": 1}  # Gemma-3-270M's shape


def _nulls(cfg, **nulls):
    return {**cfg, "pk": {**cfg["pk"], "nulls": {**cfg["pk"]["nulls"], **nulls}}}


def test_a_small_models_one_part_holds_up_to_samples_per_job_samples():
    """Where one sample's parts are one (the whole layer-pair triangle), a cross-layer null job holds
    up to samples_per_job samples, as many as keep that part's cost within the least a job asks for
    (costs.MIN_RUNTIME) and the ceiling; the parts stay those of one sample. A model whose one sample
    already costs more, or whose pairs take several parts, keeps its configured block."""
    job = JOBS["pk_null_cross"]
    one = _nulls(PAPER, cross_samples_per_job=1)
    assert len(fanout.parts(job, SMALL, one)) == 1
    assert fanout.block_size(job, SMALL, one) == 10  # samples_per_job
    assert fanout.block_size(job, SMALL, _nulls(one, cross_samples=4)) == 4  # never beyond the samples there are
    assert fanout.block_size(job, SMALL, _nulls(one, samples_per_job=1)) == 1
    assert fanout.block_size(job, SMALL, _nulls(one, cross_samples_per_job=3)) == 10  # any configured block grows
    assert fanout.block_size(job, SMALL, _nulls(one, cross_samples_per_job=None)) == 10
    for fields in (QWEN25_7B, QWEN3_235B):  # a sample's part over the floor or several parts: as configured
        assert fanout.block_size(job, fields, one) == 1
    assert len(fanout.parts(job, QWEN25_7B, one)) == 1 < len(fanout.parts(job, QWEN3_235B, one))
    pairs, writers, readers = fanout.part_layers(fanout.parts(job, SMALL, one)[0])
    assert (pairs, writers, readers) == (18 * 17 // 2, 17, 17)

    def minutes(fields, k, cfg=one):  # the whole triangle as one part, k samples, on the job's cores
        L = fields["n_layers"]
        threads = null_cross_threads(cfg, fields)
        work = costs.pk_null_cross(fields, k, 2, n_pairs=L * (L - 1) // 2, n_writers=L - 1, n_readers=L - 1,
                                   null_types=("rotation", "reassign"), threads=threads)
        return work["work_min"]

    assert minutes(SMALL, 10) <= costs.MIN_RUNTIME < minutes(QWEN25_7B, 1)
    # 16 cores a job (config/paper.yaml): the 7B shape's part is laid out as on one core, so its jobs hold one
    # and its sample still costs more than the floor there
    sixteen = _nulls(one, cross_threads=16)
    assert null_cross_threads(sixteen, QWEN25_7B) == 1 and fanout.block_size(job, QWEN25_7B, sixteen) == 1
    assert minutes(QWEN25_7B, 1, sixteen) > costs.MIN_RUNTIME
    # a ceiling between k and k + 1 samples' cost of the one part: k samples a job
    assert minutes(SMALL, 4) < minutes(SMALL, 5)
    tight = {**one, "fanout": {"max_job_minutes": (minutes(SMALL, 4) + minutes(SMALL, 5)) / 2}}
    assert len(fanout.parts(job, SMALL, tight)) == 1 and fanout.block_size(job, SMALL, tight) == 4
    with pytest.raises(ValueError, match="shape"):
        fanout.block_size(job, None, one)
    assert fanout.parts(job, {**SMALL, "n_layers": 1}, one) == []  # no layer pair, no part: the configured block
    assert fanout.block_size(job, {**SMALL, "n_layers": 1}, one) == 1
    # a within-layer null job keeps samples_per_job whatever the shape
    assert fanout.block_size(JOBS["pk_null_within"], None, _nulls(one, samples_per_job=7)) == 7


def test_a_small_models_cross_null_blocks_reach_the_jobs_params_and_their_requests():
    """The block size reaches every place a block is named: the job list (designs.job_wildcards), a block's
    samples (designs.samples, the rules' params) and the job's cost (its request prices its block's samples)."""
    from headgeom.core.config import load_config
    from headgeom.schedule import designs

    cfg = load_config(overrides={"pk": {"nulls": {"cross_samples": 25, "samples_per_job": 10,
                                                  "cross_samples_per_job": 1}}})
    m = "small"
    wcs = designs.job_wildcards("pk_null_cross", cfg, m, SMALL)
    assert wcs == [{"block": b, "part": 0} for b in range(3)]
    assert [designs.samples("pk_null_cross", cfg, m, b, SMALL) for b in range(3)] == [
        list(range(10)), list(range(10, 20)), list(range(20, 25))]
    job, mc = JOBS["pk_null_cross"], designs.model_config(cfg, m)
    ten, five = (job.cost(SMALL, mc, {"block": b, "part": 0}) for b in (0, 2))
    per_sample = costs.pk_null_cross(SMALL, 1, 2, n_pairs=153, n_writers=17, n_readers=17)
    assert ten == costs.pk_null_cross(SMALL, 10, 2, n_pairs=153, n_writers=17, n_readers=17)
    assert five == costs.pk_null_cross(SMALL, 5, 2, n_pairs=153, n_writers=17, n_readers=17)
    assert ten["work_s"] > five["work_s"] > per_sample["work_s"]
    assert ten["runtime"] == costs.MIN_RUNTIME  # within the least a job asks for


def _rows(paths):
    """Every row, floats as their bytes (bitwise comparison; NaN equals NaN)."""
    rows = []
    for p in paths:
        rows += pq.read_table(p).to_pylist()
    return [{k: np.float64(v).tobytes() if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def test_two_fanouts_give_bitwise_identical_draws(tmp_path):
    """Seeds depend on (model, null, kind, layer, sample) only: the same row per pair, bit for
    bit, whether all pairs run in one job, one pair per job or packed writer blocks; and the
    rows of one part holding every pair are the unsplit job's rows in its order."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_cross_job
    from synth import write_llama

    L = 4
    write_llama(tmp_path / "ck", n_layers=L)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "V"]}
    quiet = lambda *_: None  # noqa: E731

    def run(name, max_pairs, samples):
        paths = []
        for i, seg in enumerate(fanout.pair_parts(L, max_pairs)):
            out = tmp_path / f"{name}{i}.parquet"
            pk_null_cross_job(tmp_path / "store", samples, out, p, segments=seg, log=quiet)
            paths.append(out)
        return paths

    whole = tmp_path / "whole.parquet"
    pk_null_cross_job(tmp_path / "store", [0, 1], whole, p, log=quiet)
    one = run("one", 100, [0, 1])
    assert _rows([whole]) == _rows(one)  # same rows, same order
    fine = run("fine", 1, [0, 1])  # one pair per job
    packed = run("packed", 3, [0]) + run("packed_s1", 3, [1])  # writer blocks x sample blocks
    assert len(fine) == 6 and len(packed) == 4

    def keyed(rows):
        return {(r["null"], r["sample"], r["layer_w"], r["layer_r"], r["kind"]): r for r in rows}

    a, b, c = keyed(_rows([whole])), keyed(_rows(fine)), keyed(_rows(packed))
    assert len(a) == 2 * 2 * 6 * 2 and a.keys() == b.keys() == c.keys()
    for k in a:
        assert a[k] == b[k] == c[k], k
    # the shards name the pairs they hold
    from headgeom.io.shards import read_shard

    assert read_shard(fine[0])[1]["pair_segments"] == [[0, 1, 2]]


def test_cross_parts_give_the_per_writer_rows_bitwise(tmp_path):
    """pk_cross_layer: packed or split parts hold exactly the rows of one job per writer layer."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_cross_job
    from synth import write_llama

    L = 4
    write_llama(tmp_path / "ck", n_layers=L)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "cross_kinds": ["Q", "K", "V"]}
    quiet = lambda *_: None  # noqa: E731
    per_writer = []
    for w in range(L - 1):
        per_writer.append(tmp_path / f"w{w}.parquet")
        pk_cross_job(tmp_path / "store", w, per_writer[-1], p, log=quiet)
    for max_pairs in (1, 2, 100):
        paths = []
        for i, seg in enumerate(fanout.pair_parts(L, max_pairs)):
            paths.append(tmp_path / f"p{max_pairs}_{i}.parquet")
            pk_cross_job(tmp_path / "store", None, paths[-1], p, segments=seg, log=quiet)
        assert _rows(paths) == _rows(per_writer), max_pairs


def test_costs_reads_the_efficiency_report_against_the_cost_model(tmp_path):
    """`headgeom costs`: rule and wildcards from the plugin's comment string, the cost model's
    request recomputed from the manifest, jobs over their request flagged."""
    from headgeom.cli import main
    from headgeom.commands import efficiency
    from headgeom.core.config import load_config
    from headgeom.schedule.designs import per_job

    model = "qwen_7b-x"  # underscores in a model name: the trailing integers are the wildcards
    d = tmp_path / "results" / "tensors" / model
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"fields": QWEN25_7B}))
    cfg = load_config(overrides={"pk": {"nulls": {"cross_samples_per_job": 6}},  # 6 samples a job under a
                                 "fanout": {"max_job_minutes": 30}})  # 30-min ceiling: parts
    nulls = cfg["pk"]["nulls"]
    want_layer = costs.pk_within_layer(QWEN25_7B, nulls["samples_per_job"], len(nulls["types"]))
    seg = fanout.part(JOBS["pk_null_cross"], QWEN25_7B, cfg, 1)
    want_null = costs.pk_null_cross(QWEN25_7B, per_job(nulls, "cross"), len(nulls["types"]),
                                n_pairs=fanout.n_pairs(seg), n_writers=len({w for w, _, _ in seg}),
                                n_readers=len({r for _, r0, r1 in seg for r in range(r0, r1)}))
    rows = [  # the plugin's CSV: pandas index column, then its columns (steps only)
        ("0", "11.batch", f"rule_pk_within_layer_wildcards_{model}_0", 60 * want_layer["runtime"] / 3, 900, want_layer["mem_mb"]),
        ("1", "12.batch", f"rule_pk_within_layer_wildcards_{model}_1", 60 * want_layer["runtime"] * 2, 900, 2 * want_layer["mem_mb"]),
        ("2", "13.batch", f"rule_pk_null_cross_wildcards_{model}_0_1", 60, want_null["mem_mb"] * 1.5, want_null["mem_mb"]),
        ("3", "14.batch", "rule_fetch_wildcards_x", 5, 100, 4000),
    ]
    rep = tmp_path / "efficiency_report_x.csv"
    with open(rep, "w") as fh:
        fh.write(",JobID,JobName,RuleName,Elapsed_sec,MaxRSS_MB,RequestedMem_MB\n")
        for i, jid, rule, el, rss, req in rows:
            fh.write(f"{i},{jid},batch,{rule},{el},{rss},{req}\n")
    res = efficiency.compare(rep, tmp_path, cfg)
    assert set(res) == {"pk_within_layer", "pk_null_cross"}  # fetch is not a registry job
    pl = res["pk_within_layer"]
    assert pl["jobs"] == 2 and pl["model_runtime_max_min"] == want_layer["runtime"]
    assert pl["time_ratio_max"] == pytest.approx(2.0) and pl["retried"] == 1
    assert [o["wildcards"] for o in pl["over"]] == [{"model": model, "layer": "1"}]
    nc = res["pk_null_cross"]
    assert nc["model_mem_max_mb"] == want_null["mem_mb"] and nc["mem_ratio_max"] == pytest.approx(1.5)
    assert nc["over"][0]["wildcards"] == {"model": model, "block": "0", "part": "1"}
    (tmp_path / "six.yaml").write_text("pk: {nulls: {cross_samples_per_job: 6}}\nfanout: {max_job_minutes: 30}\n")
    assert main(["costs", str(rep), "-d", str(tmp_path), "--configfile", str(tmp_path / "six.yaml")]) == 0


def test_spilled_writer_bases_give_bitwise_identical_rows(tmp_path, monkeypatch):
    """pk_null_cross keeps writer bases in memory up to WRITER_CACHE_MB and spills the rest to
    disk: every writer spilled gives the same rows, bit for bit, in the same order."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs import pk_paper as pkjobs
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=4)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K"]}
    spilled = []
    real_save = np.save
    monkeypatch.setattr(np, "save", lambda path, *a, **k: (spilled.append(path), real_save(path, *a, **k)))
    monkeypatch.setattr(pkjobs, "WRITER_CACHE_MB", 1e6)
    pkjobs.pk_null_cross_job(tmp_path / "store", [0, 1], tmp_path / "mem.parquet", p, log=lambda *_: None)
    assert spilled == []
    monkeypatch.setattr(pkjobs, "WRITER_CACHE_MB", 0)
    pkjobs.pk_null_cross_job(tmp_path / "store", [0, 1], tmp_path / "disk.parquet", p, log=lambda *_: None)
    assert len(spilled) == 2 * 2 * 3  # nulls x samples x writer layers
    assert _rows([tmp_path / "mem.parquet"]) == _rows([tmp_path / "disk.parquet"])


def test_null_cross_memory_is_flat_in_the_layer_count():
    """A projector Gram holds a budgeted number of layers a side (the fan-out's tiles fit it), so the
    request does not grow with writers or layers past that budget."""
    from headgeom.methods.projectors import NULL_CROSS_SIDE_MB

    few = costs.pk_null_cross({**QWEN25_7B, "n_layers": 8}, 10, 2)["mem_mb"]
    many = costs.pk_null_cross({**QWEN25_7B, "n_layers": 60}, 10, 2)["mem_mb"]
    more = costs.pk_null_cross({**QWEN25_7B, "n_layers": 80}, 10, 2)["mem_mb"]
    assert few < many == more <= costs.BASE_MB + 2 * NULL_CROSS_SIDE_MB + 512 + costs.MEM_FACTOR["pk_null_cross_draws"] * costs.layer_mib(QWEN25_7B) + 1
    assert costs.pk_null_cross(QWEN3_235B, 10, 2)["mem_mb"] == costs.pk_null_cross({**QWEN3_235B, "n_layers": 30}, 10, 2)["mem_mb"]


def test_pk_cross_computes_each_reader_layer_once_and_recomputes_beyond_the_memo(tmp_path, monkeypatch):
    """pk_cross keeps a reader layer's spaces for all its writers (READER_CACHE_MB): each reader
    layer's spaces are computed once, and with no memo (every reader recomputed for every
    writer) the rows are the same, bit for bit, in the same order."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs import pk_paper as pkjobs
    from headgeom.methods import overlap as pkm
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=5)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "cross_kinds": ["Q", "K", "V"]}
    calls = []
    real = pkm.layer_spaces
    monkeypatch.setattr(pkm, "layer_spaces", lambda f, kinds, *a: (calls.append(tuple(kinds)), real(f, kinds, *a))[1])
    segments = [(0, 1, 5), (1, 2, 5), (2, 3, 5), (3, 4, 5)]
    pkjobs.pk_cross_job(tmp_path / "store", 0, tmp_path / "memo.parquet", p, segments=segments, log=lambda *_: None)
    assert calls.count(("Q", "K", "V")) == 4 and calls.count(("O",)) == 4  # readers 1..4 once, writers 0..3 once
    calls.clear()
    monkeypatch.setattr(pkjobs, "READER_CACHE_MB", 0)
    pkjobs.pk_cross_job(tmp_path / "store", 0, tmp_path / "none.parquet", p, segments=segments, log=lambda *_: None)
    assert calls.count(("Q", "K", "V")) == 4 + 3 + 2 + 1  # every writer's readers recomputed
    memo, none = (pq.read_table(tmp_path / f"{n}.parquet").to_pydict() for n in ("memo", "none"))
    assert memo == none and len(memo["rho"]) > 0


def test_pk_cross_lets_each_layers_mapped_tensors_go(tmp_path, monkeypatch):
    """A pk_cross part reads many layers from the memory-mapped store: the pages of the layers it
    has read must not stay resident (at Qwen2.5-7B's shape they added 112 MiB per layer read,
    4.6 GB for a part reading all 28). Resident file pages (RssFile) after each layer's read stay
    within about one layer's tensors, while the store holds ten."""
    from pathlib import Path

    from headgeom.io.fetch import fetch_model
    from headgeom.io.store import TensorStore
    from headgeom.jobs import pk_paper as pkjobs
    from synth import write_llama

    def rss_file_kib():
        return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("RssFile:"))

    L = 10
    write_llama(tmp_path / "ck", d_model=512, n_heads=8, n_kv=2, d_head=64, n_layers=L, closed=())
    fetch_model("m", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    layer_kib = (tmp_path / "store" / "tensors.safetensors").stat().st_size / L / 1024
    seen = []
    real = TensorStore.layer_factors

    def spy(self, layer):
        f = real(self, layer)
        seen.append(rss_file_kib())
        return f

    monkeypatch.setattr(TensorStore, "layer_factors", spy)
    p = {"rank_rtol": 1e-6, "cross_kinds": ["Q", "K", "V"]}
    pkjobs.pk_cross_job(tmp_path / "store", 0, tmp_path / "x.parquet", p, segments=[(0, 1, L), (1, 2, L)],
                        log=lambda *_: None)
    assert len(seen) >= L
    assert max(seen) - seen[0] < 2 * layer_kib, (seen, layer_kib)
