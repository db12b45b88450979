"""Job resources (mem_mb, runtime in minutes) of every per-layer rule: one cost model per job,
read by the shard-family registry (headgeom.schedule.families) and so by the rules and SLURM.

PK jobs and the fetch: scaled from costs measured at Qwen2.5-7B shape (d_model 3584, d_head
128, 28 q / 4 kv heads) with one BLAS thread on this project's 2-core machines, each job run
through Snakemake on a checkpoint of that shape: `make bench-fullwidth` (bench/fullwidth.py;
docs/costs.md). Paper 1 jobs: `paper1_resources` below, measured with `python bench/paper1_costs.py`.

Time scales with the GEMM work D * (H d) * ((H + 2G) d) relative to the reference shape;
memory with the float64 size of one layer's Q/K/V/O factors (224 MiB at the reference)."""

from __future__ import annotations

import json
import math

from headgeom.jobs.pk_paper import FACTOR_CACHE_MB, PREPARED_CACHE_MB, READER_CACHE_MB, WRITER_CACHE_MB
from headgeom.methods.nulls import NULL_MODELS

REF = {"d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv_heads": 4}

# CPU seconds at REF shape, one BLAS thread, measured at full width through Snakemake
# (`make bench-fullwidth`, docs/costs.md)
SECONDS = {
    "pk_within_per_layer": 13.1,       # 4 kinds of bases, pairs, ranks, self-overlap (10,000 perms): 13 s
    "pk_cross_pair": 6.0,          # per later layer: Q/K/V bases, all writer x reader blocks, angles,
    #                                weighted: 4.8 s per pair over a 14-pair part, 6 s for a 1-pair part
    "pk_null_within_sample": 10.5,  # per sample, both nulls, 4 kinds: 10.1 s (Q and K: 4.8 s; O: 4.9 s)
    "pk_null_cross_pair_sample": 9.3,  # per layer pair, per sample, per null
}
# peak RSS = BASE + factor x layer MiB; measured at full width (make bench-fullwidth): pk_within_layer
# 1,243 MiB (request 1,496), pk_null_within 991 (1,608), pk_cross_layer 1,123-1,570 MiB with 2-15
# layers read (2,088: flat in the layers read, the store's map let go after each), pk_null_cross
# 1,008-1,156 MiB with one writer layer (its caches' and draws' model below)
# (make bench-fullwidth, the process tree: pk_within_layer 1,235 MiB and pk_cross_layer 1,646 MiB, so these factors
# leave the 1.3x headroom bench/fullwidth.py checks: 1,664 and 2,200 MiB; pk_null_cross, a 10-min part of
# about 13 layers a side, 5,574 MiB: its draws' working set beyond the part's bases and caches, 7 layer sizes)
MEM_FACTOR = {"pk_within_per_layer": 4.75, "pk_cross_pair": 6.0, "pk_null_within_sample": 4.5,
              "pk_null_cross_draws": 7.0}
# What a job holds before its data: under SLURM each job runs a Snakemake process (the jobstep,
# which for an array task also decodes the array's job list) and the job's Python (numpy, pyarrow,
# headgeom). Measured on the test cluster, whose OverMemoryKill enforces --mem per job step
# (tests/workflow/test_slurm.py; sacct MaxRSS): batch steps of array tasks 355-471 MB (a paper1_heads
# task asking for 451 MB was killed), a tiny layer's job step 297-299 MB. 600 MB covers both.
BASE_MB = 600
SAFETY = 1.5

# the PK jobs' cache budgets (READER_CACHE_MB, ... imported above from headgeom.jobs.pk_paper, where the
# jobs hold them) are priced by the cost models below


def _fields(manifest) -> dict:
    """A model's shape: a manifest path, or already its ``fields`` dict (``headgeom plan``)."""
    if isinstance(manifest, dict):
        return manifest
    with open(manifest) as fh:
        return json.load(fh)["fields"]


def layer_mib(f: dict) -> float:
    return 8 * f["d_model"] * f["d_head"] * (2 * f["n_heads"] + 2 * f["n_kv_heads"]) / 2**20


def work_ratio(f: dict) -> float:
    def w(x):
        return x["d_model"] * x["n_heads"] * x["d_head"] * (x["n_heads"] + 2 * x["n_kv_heads"]) * x["d_head"]

    return w(f) / w(REF)


# Seconds of one writer->reader layer pair of a cross-layer job (before SAFETY): what the
# fan-out (headgeom.schedule.fanout) packs into jobs under the runtime ceiling (a registry job's
# pair_seconds).


def pk_cross_pair_seconds(manifest) -> float:
    return SECONDS["pk_cross_pair"] * work_ratio(_fields(manifest))


# The cross-layer nulls' draws, from counted FLOPs at rates measured against the same process's GEMM rate
# (`bench/null_cross_part.py --draws`: one draw of each kind's layer matrix and its heads' orthonormal
# bases, one BLAS thread; docs/costs.md). A rotation draw of a D x m layer matrix (m = heads x d_head) is a
# Householder QR of an m x min(m, D) Gaussian and its reflectors applied (headgeom.methods.nulls.rotate_spectrum:
# 4/3 m^3 + 2 m^2 D FLOPs when m <= D; for a wide matrix 6 m D^2 - 8/3 D^3, against its LQ factor, itself
# 2 m D^2 - 2/3 D^3 once per job and matrix: ``draw_prep_seconds``); the Gaussian's sampling is priced in
# the draw's rate. A reassignment draw gathers the matrix's columns. Either draw's bases
# (methods.overlap.orthonormal_bases) are priced as four GEMMs of 2 D d^2 a head, at the rate that their
# GEMMs, eigendecompositions and Cholesky factors run at together.
DRAW_RATES = {  # fractions of projectors.GEMM_FLOPS; measured at the Qwen3-235B shape: 0.70, 0.55, 0.35
    "householder": 0.70, "lq": 0.55, "bases": 0.35,
}


def _deals_columns(null: str) -> bool:
    """A draw that deals the matrix's columns anew (methods.nulls.NullModel.keeps_columns): a gather, no
    factorization."""
    model = NULL_MODELS.get(null)
    return model is not None and model.keeps_columns


def _prepares(null: str) -> bool:
    """A null whose draws share a preparation of the layer matrix (NullModel.prepare: a rotation's LQ
    factor); a null registered elsewhere is priced as if it had one."""
    model = NULL_MODELS.get(null)
    return model is None or model.prepare is not None


def draw_seconds(D: int, d: int, n: int, null: str, itemsize: int = 8) -> float:
    """CPU seconds of one null draw of a layer matrix of ``n`` heads (D x n d) and its heads' bases."""
    from headgeom.methods.projectors import BYTES_PER_FLOP_TIME, GEMM_FLOPS

    speed = GEMM_FLOPS * (8 / itemsize)
    m = n * d
    bases = n * 8 * D * d * d / (speed * DRAW_RATES["bases"])
    if _deals_columns(null):  # a reassignment: the columns read and written once
        return bases + 2 * D * m * itemsize * BYTES_PER_FLOP_TIME
    # a rotation (and a null registered elsewhere: priced as the dearer draw)
    qr = 4 / 3 * m**3 + 2 * m * m * D if m <= D else 6 * m * D * D - 8 / 3 * D**3
    return bases + qr / (speed * DRAW_RATES["householder"])


def draw_prep_seconds(D: int, d: int, n: int, null: str, itemsize: int = 8) -> float:
    """CPU seconds of what every draw of one layer matrix shares, once per job (nulls.NullModel.prepare):
    a rotation's LQ factor of a wide matrix (n d > D), nothing otherwise."""
    from headgeom.methods.projectors import GEMM_FLOPS

    m = n * d
    if not _prepares(null) or m <= D:
        return 0.0
    return (2 * m * D * D - 2 / 3 * D**3) / (GEMM_FLOPS * (8 / itemsize) * DRAW_RATES["lq"])


def null_cross_draw_seconds(manifest, null_types=None, kinds=("Q", "K", "V"),
                            precision: str = "float64", per_job: bool = False) -> tuple[float, float]:
    """Seconds of one layer's null draws and bases, summed over ``null_types``, as a writer (O) and as
    a reader (``kinds``): per sample (``draw_seconds``) or, ``per_job``, once per job (``draw_prep_seconds``)."""
    f = _fields(manifest)
    D, d = f["d_model"], f["d_head"]
    itemsize = 4 if precision == "float32" else 8
    cost = draw_prep_seconds if per_job else draw_seconds
    null_types = tuple(NULL_MODELS) if null_types is None else null_types
    heads = {"O": f["n_heads"], "Q": f["n_heads"], "K": f["n_kv_heads"], "V": f["n_kv_heads"]}
    w = sum(cost(D, d, heads["O"], null, itemsize) for null in null_types)
    r = sum(cost(D, d, heads[k], null, itemsize) for null in null_types for k in kinds)
    return w, r


def null_cross_by_projectors(f: dict, precision: str = "float64") -> bool:
    """Whether a model's pk_null_cross jobs take the projector-Gram route (methods.projectors.projectors_pay)."""
    from headgeom.methods.projectors import projectors_pay

    return projectors_pay(f["n_heads"], f["d_model"], f["d_head"], f["n_layers"], f["n_kv_heads"],
                          itemsize=4 if precision == "float32" else 8)


def null_cross_route_pair_seconds(manifest, precision: str = "float64") -> float:
    """Seconds of the head pairs of one writer->reader layer pair, per sample and null, by the route
    the job takes (methods.projectors.projectors_pay: FLOPs and bytes counted, at rates `make bench`
    measures against the GEMM rate; Q, K and V readers); by projector Grams with each layer's packing
    shared by a full tile's partners (methods.projectors.tile_side)."""
    from headgeom.methods.projectors import null_cross_route_seconds

    f = _fields(manifest)
    D, H, d, G, L = f["d_model"], f["n_heads"], f["d_head"], f["n_kv_heads"], f["n_layers"]
    itemsize = 4 if precision == "float32" else 8
    t = null_cross_route_seconds(D, d, H, H + 2 * G, max(L, 2), itemsize)
    return t["projectors"] if null_cross_by_projectors(f, precision) else t["blocks"]


# Parallel efficiency of a pk_null_cross job on several cores (pk.nulls.cross_threads), by phase: the draws
# (worker threads, one BLAS thread each: QR, bases, Gaussians), the packing of the projectors and the slab
# products (GEMMs), both on the job's BLAS threads. Speed-up on 2 threads / 2, measured by `make bench`
# (null_cross_threads, at the Qwen3-235B shape, 1 and 2 threads back to back on an idle 2-core machine: the draws
# and packing of 2 writer and 2 reader layers 0.98-0.99 and 0.80-0.89, a slab product of the design's 93-layer
# tile 0.94-1.04), rounded down. Only 2 cores were there to measure: the model holds the 2-thread efficiency at any
# thread count (docs/performance.md says so).
THREAD_EFFICIENCY = {"draws": 0.95, "packing": 0.8, "gram": 0.9}


def parallel_seconds(work: dict, threads: int = 1) -> float:
    """Wall seconds of phases of single-thread ``work`` ({phase: CPU-s}, phases of THREAD_EFFICIENCY) on
    ``threads`` cores."""
    t = max(1, int(threads))
    if t == 1:
        return float(sum(work.values()))
    return float(sum(w / (t * THREAD_EFFICIENCY[phase]) for phase, w in work.items()))


def null_cross_part_seconds(manifest, n_pairs: int, n_writers: int, n_readers: int, n_samples: int = 1,
                            n_null_types: int = 2, precision: str = "float64", null_types=None,
                            threads: int = 1) -> float:
    """Seconds of a pk_null_cross part on ``threads`` cores (null_cross_part_work's phases at
    THREAD_EFFICIENCY; one thread: the CPU seconds of the work)."""
    return parallel_seconds(null_cross_part_work(manifest, n_pairs, n_writers, n_readers, n_samples, n_null_types,
                                                 precision, null_types), threads)


def null_cross_part_work(manifest, n_pairs: int, n_writers: int, n_readers: int, n_samples: int = 1,
                         n_null_types: int = 2, precision: str = "float64", null_types=None) -> dict:
    """CPU seconds of a pk_null_cross part on one thread, {"draws", "packing", "gram"}: its layers' draws (each
    writer and each reader layer drawn once per sample and null, whatever its pairs; a rotation's LQ factors
    once per job) and its pairs by the job's route ("gram"); by projector Grams the pairs' slab products and
    each layer's packing ("packing"), once per sample and null (the part's heads packed together:
    methods.projectors.projector_gram).
    ``null_types``: the nulls by name (default: the first ``n_null_types`` of methods.nulls.NULL_MODELS)."""
    from headgeom.methods.projectors import null_cross_route_seconds, pack_seconds

    f = _fields(manifest)
    D, H, d, G, L = f["d_model"], f["n_heads"], f["d_head"], f["n_kv_heads"], f["n_layers"]
    itemsize = 4 if precision == "float32" else 8
    types = tuple(null_types) if null_types is not None else tuple(NULL_MODELS)[:n_null_types]
    draw_w, draw_r = null_cross_draw_seconds(f, types, precision=precision)
    prep_w, prep_r = null_cross_draw_seconds(f, types, precision=precision, per_job=True)
    t = null_cross_route_seconds(D, d, H, H + 2 * G, max(L, 2), itemsize)
    pair, pack_w, pack_r = t["blocks"], 0.0, 0.0
    if null_cross_by_projectors(f, precision):
        pair = t["gram"]
        pack_w = len(types) * pack_seconds(D, d, H, itemsize)
        pack_r = len(types) * pack_seconds(D, d, H + 2 * G, itemsize)
    draws = (draw_w * n_writers + draw_r * n_readers) * n_samples
    prep = prep_w * n_writers + prep_r * n_readers  # each wide matrix's preparation once
    n_prep = null_cross_preparations(f, n_writers, n_readers, 1, types, itemsize)
    made = null_cross_preparations(f, n_writers, n_readers, n_samples, types, itemsize)
    return {"draws": draws + (prep * made / n_prep if n_prep else 0.0),
            "packing": (pack_w * n_writers + pack_r * n_readers) * n_samples,
            "gram": pair * n_pairs * len(types) * n_samples}


def null_cross_preparations(f: dict, n_writers: int, n_readers: int, n_samples: int, null_types,
                            itemsize: int = 8, kinds=("Q", "K", "V")) -> int:
    """How many rotation preparations (LQ factors of the wide layer matrices: n d > D) a pk_null_cross
    part makes: each once while they fit PREPARED_CACHE_MB (D x D each, the first ones made), the rest
    again for each sample (headgeom.jobs.pk_paper._Prepared)."""
    D, d = f["d_model"], f["d_head"]
    heads = {"O": f["n_heads"], "Q": f["n_heads"], "K": f["n_kv_heads"], "V": f["n_kv_heads"]}
    wide = sum(heads[k] * d > D for k in kinds)
    n = any(map(_prepares, null_types)) * ((heads["O"] * d > D) * n_writers + wide * n_readers)
    kept = min(n, int(PREPARED_CACHE_MB * 2**20 // (D * D * itemsize)))
    return kept + (n - kept) * n_samples


MIN_RUNTIME = 5  # minutes a job asks for at least (a scheduler's granularity; start-up and imports)


def job_resources(mem_mb: float, work_s: float, safety: float = SAFETY, wait_min: float = 0.0) -> dict:
    """A job's resources from its memory and its expected seconds of work ``work_s`` (the cost
    model's estimate): it asks for ``safety`` x the work plus ``wait_min`` (time not modelled as work,
    e.g. a download), rounded up to at least MIN_RUNTIME. work_min keeps the request's estimate
    before rounding, so that a job doing the work of many (headgeom.publish.choice_sensitivity.alternative_cost)
    adds estimates, not floors; work_s is the expected work itself (``headgeom plan`` reports both)."""
    work_min = safety * work_s / 60 + wait_min
    return {"mem_mb": int(math.ceil(mem_mb)), "runtime": int(max(MIN_RUNTIME, math.ceil(work_min))),
            "work_min": float(work_min), "work_s": float(work_s + 60 * wait_min)}


def _minutes(t_s: float, mem: float) -> dict:
    return job_resources(max(mem, 500), t_s)


def pk_within_layer(manifest, n_samples: int = 1, n_null_types: int = 2) -> dict:
    """mem_mb and runtime (minutes) of one pk_within_layer job of this model (4 kinds, ranks, self-overlap)."""
    f = _fields(manifest)
    return _minutes(SECONDS["pk_within_per_layer"] * work_ratio(f), BASE_MB + MEM_FACTOR["pk_within_per_layer"] * layer_mib(f))


def pk_cross_layer(manifest, n_samples: int = 1, n_null_types: int = 2, n_pairs: int | None = None) -> dict:
    """A part of ``n_pairs`` layer pairs (headgeom.schedule.fanout; default: writer layer 0's row);
    one writer and one reader layer in memory at a time, plus the reader layers' spaces kept for
    later writers up to READER_CACHE_MB."""
    f = _fields(manifest)
    n_pairs = max(f["n_layers"] - 1, 1) if n_pairs is None else n_pairs
    return _minutes(pk_cross_pair_seconds(f) * n_pairs,
                    BASE_MB + READER_CACHE_MB + MEM_FACTOR["pk_cross_pair"] * layer_mib(f))


def kinds_share(f: dict, kinds) -> float:
    """The share of a layer's null work in ``kinds`` (None: all four): each kind's squared head
    count (O and Q: n_heads; K and V: n_kv_heads), as its head pairs. Measured at Qwen2.5-7B's
    shape: O 4.9 s, Q + K 4.8 s, all four 10.1 s per sample (shares 0.49, 0.50, 1)."""
    if kinds is None:
        return 1.0
    heads = {"O": f["n_heads"], "Q": f["n_heads"], "K": f["n_kv_heads"], "V": f["n_kv_heads"]}
    return sum(heads[k] ** 2 for k in kinds) / sum(h ** 2 for h in heads.values())


def pk_null_within(manifest, n_samples: int = 1, n_null_types: int = 2, kinds=None) -> dict:
    """One block of within-layer null samples of the ``kinds`` whose nulls run (all four: None);
    the time scales with the kinds' share of the layer's heads."""
    f = _fields(manifest)
    return _minutes(SECONDS["pk_null_within_sample"] * work_ratio(f) * kinds_share(f, kinds) * n_samples
                    * n_null_types / 2, BASE_MB + MEM_FACTOR["pk_null_within_sample"] * layer_mib(f))


def pk_null_cross(manifest, n_samples: int = 1, n_null_types: int = 2, n_pairs: int | None = None,
                  n_writers: int | None = None, n_readers: int | None = None, precision: str = "float64",
                  null_types=None, threads: int = 1) -> dict:
    """A part of ``n_pairs`` layer pairs of ``n_writers`` writer and ``n_readers`` reader layers
    (headgeom.schedule.fanout; default: all of them). Work: null_cross_part_seconds, its pairs by the
    job's route and its layers' draws (and by projector Grams their packing), per sample and null, and the
    rotation's LQ factors of its wide layer matrices (null_cross_preparations).
    Memory: by projector Grams (methods.projectors.projectors_pay) the part's writer and reader bases and
    slab rows, each side up to NULL_CROSS_SIDE_MB (methods.projectors.layers_per_call whole layers, at most
    the part's); by blocks, writer bases up to WRITER_CACHE_MB (the rest spilled to $TMPDIR) and
    readers one layer at a time. The layers' factors and the
    nulls' preparations are kept up to FACTOR_CACHE_MB and PREPARED_CACHE_MB. Measured peak RSS at
    Qwen2.5-7B shape (blocks, reassign null, K readers, bench/null_cross_rss.py): 739 MB with 6
    writer layers; the model keeps 7 layer-sizes for the draws' working set on top of the caches (a part's measured peak, 1.3x)
    (make bench-fullwidth measures the job through Snakemake). On ``threads`` cores (pk.nulls.cross_threads):
    each side of a call holds up to ``threads`` x NULL_CROSS_SIDE_MB, that many draws' working sets at once,
    and the time is the work's at THREAD_EFFICIENCY; ``threads`` in the result (its core-hours are that
    many times its hours)."""
    f = _fields(manifest)
    L = f["n_layers"]
    n_pairs = L * (L - 1) // 2 if n_pairs is None else n_pairs
    n_writers = min(L - 1, n_pairs) if n_writers is None else n_writers
    n_readers = min(L - 1, n_pairs) if n_readers is None else n_readers
    from headgeom.methods.projectors import head_mib, layers_per_call, side_budget_mb

    D, H, d, G = f["d_model"], f["n_heads"], f["d_head"], f["n_kv_heads"]
    itemsize = 4 if precision == "float32" else 8
    threads = max(1, int(threads))
    factors_mib = min(FACTOR_CACHE_MB + PREPARED_CACHE_MB, L * 8 * D * (2 * H + 2 * G) * d / 2**20)
    if null_cross_by_projectors(f, precision):  # a call's two sides: the part's bases and slab rows, up to a side's budget
        per_head = head_mib(D, d, itemsize)
        held_mib = sum(n * per_head * min(layers_per_call(D, d, n, itemsize, side_budget_mb(threads)), max(k, 1))
                       for n, k in ((H, n_writers), (H + 2 * G, n_readers)))
    else:  # writer draws kept up to WRITER_CACHE_MB (the rest spilled), readers one layer at a time
        held_mib = min(WRITER_CACHE_MB, n_writers * itemsize * D * H * d / 2**20)
    wall_s = null_cross_part_seconds(f, n_pairs, n_writers, n_readers, n_samples, n_null_types, precision, null_types,
                                     threads)
    res = _minutes(wall_s, BASE_MB + held_mib + factors_mib + threads * MEM_FACTOR["pk_null_cross_draws"] * layer_mib(f))
    return {**res, "threads": threads}


# ---------------------------------------------------------------- the fetch
#
# The fetch keeps every tensor it copies into the store (attention projections, their biases and
# the pre-attention norms; bfloat16 widened to float32, GGUF dequantized to float32) until it
# writes the store, plus one tensor's read (headgeom.io.checkpoint reads each tensor with its file
# mapped for that read alone, so the file layout does not add to the peak). Measured at Qwen2.5-7B
# shape, the real repository's four-file layout (bench/fullwidth.py): 3,137 MiB of float32 tensors,
# the job's process 3,611 MiB at its peak (Python, torch and safetensors ~470 MiB on top).
FETCH_BASE_MB = BASE_MB + 400  # the fetch's own process imports torch (safetensors' "pt" reader): +~200 MiB
FETCH_STORE_FACTOR = 1.3  # the tree's peak 3,867 MiB (make bench-fullwidth): 5,176 MiB asked, 1.34x
FETCH_S_PER_GIB = 5.0  # CPU s per GiB of float32 store (read, widen, hash, write, hash): 13 s for 3.06 GiB
# A hub source's download: the fetch reads only the attention tensors' byte ranges (headgeom.io.hub), at
# most 4 bytes a parameter (a float32 checkpoint; bfloat16 ones are half), at a stated sustained rate from
# the hub to a compute node; the request asks SAFETY x that time on top of the work
FETCH_HUB_MB_PER_S = 50.0


def store_mib(f: dict, itemsize: int = 4) -> float:
    """MiB of the tensors a fetch keeps for a model of this shape (float32; biases and norms included)."""
    D, H, G, d = f["d_model"], f["n_heads"], f["n_kv_heads"], f["d_head"]
    per_layer = D * d * (2 * H + 2 * G) + d * (H + 2 * G) + 2 * D
    return f["n_layers"] * per_layer * itemsize / 2**20


def fetch(fields: dict | None, source: str | None = None) -> dict:
    """mem_mb and runtime of one model's fetch (``fields``: its shape, None where it is unknown
    before the fetch: then 4,000 MB / 30 min, enough for models up to ~3 GiB of attention tensors)."""
    if fields is None:
        return job_resources(4000, 0.0, wait_min=30)
    s = store_mib(fields)
    largest = fields["d_model"] * fields["n_heads"] * fields["d_head"] * 4 / 2**20
    return job_resources(FETCH_BASE_MB + FETCH_STORE_FACTOR * s + 2 * largest, FETCH_S_PER_GIB * s / 1024,
                         wait_min=SAFETY * download_seconds(fields) / 60 if source == "hf" else 0)


def download_seconds(fields: dict) -> float:
    """Seconds a hub fetch of this shape downloads: its attention tensors' bytes (float32 at most: the
    store's own size) at FETCH_HUB_MB_PER_S."""
    return store_mib(fields) * 2**20 / (FETCH_HUB_MB_PER_S * 1e6)


# ---------------------------------------------------------------- paper 1 jobs
#
# Measured with `python bench/paper1_costs.py` (one BLAS thread, synthetic tensors, 8 planted
# closed heads); F = float64 bytes of one layer's Q, K, V, O factors:
#   d_model 2048, d_head  64, 32 heads, 8 KV (F =   80 MiB): heads  1.8 s,  381 MiB; capacity 0.16 s/head
#   d_model 4096, d_head 128, 64 heads, 4 KV (F =  544 MiB): heads  9.7 s, 1414 MiB; capacity 0.48 s/head  (Qwen3-235B)
#   d_model 8192, d_head 128, 64 heads, 8 KV (F = 1152 MiB): heads 27.9 s, 2838 MiB; capacity 0.81 s/head  (Qwen2.5-72B)
# (capacity per head at 2 restarts x 30 iterations, fixed load/closure cost included); with
# config/paper.yaml (8 restarts x 300) at Qwen3-235B shape: 5.5 s/head, 99 s for 18 heads, 1414 MiB.
# Peak RSS ~ 150 MiB + 2.3 F; the model below adds margin. Capacity runtime: 8 ms per head x restart
# x iteration at d_head 128 (the unbatched rate; batched restarts run ~2.3 ms), bounded with every
# head of the layer selected (the strong/matched/sample count is only known inside the job).
# The search's convergence rule (paper1.capacity.tol / window) may stop a start before `iters`, but
# at the papers' settings it rarely does (docs/performance.md: 0-38 % fewer SVDs on the embedded
# models, none on Gemma-3-270M), so the model keeps `iters` as the per-start bound.


# The L-BFGS ascent (method lbfgs) pays ~1.5x per start and step (its two-loop recursion over 8
# stored pairs, a gradient at every accepted point, the tangent projection: bench/run.py capacity,
# d_head 256) and keeps LBFGS_MEMORY pairs of d x d matrices per start in memory.
LBFGS_STEP_FACTOR = 1.5


def paper1_resources(kind: str, manifest, restarts: int = 1, iters: int = 0, method: str = "gradient") -> dict:
    """mem_mb and runtime (minutes) of one paper1_heads / paper1_capacity job of this model."""
    fields = _fields(manifest)
    f = layer_mib(fields)
    mem_mb = int(BASE_MB + 2.5 * f)
    work_min = 0.05 * f / 60
    if kind == "capacity":
        per_iter_s = 0.008 * (fields["d_head"] / 128) ** 2.5
        starts = fields["n_heads"] * restarts
        if method == "lbfgs":
            from headgeom.methods.paper1.capacity import LBFGS_MEMORY

            per_iter_s *= LBFGS_STEP_FACTOR
            mem_mb += math.ceil(2 * LBFGS_MEMORY * starts * fields["d_head"] ** 2 * 8 / 2**20)
        work_min += starts * iters * per_iter_s / 60
    # runtime: MIN_RUNTIME on top of the work (the measured seconds leave no margin of their own)
    return {"mem_mb": mem_mb, "runtime": MIN_RUNTIME + math.ceil(work_min), "work_min": work_min,
            "work_s": 60 * work_min}


def grow(res: dict, attempt: int) -> dict:
    """Resources of a retry: attempt k asks for k x the cost model's mem_mb and runtime (a job
    killed for memory or time gets more the next time; profile `retries`)."""
    k = max(1, int(attempt))
    return {key: int(v) * k if key in ("mem_mb", "runtime") else v for key, v in res.items()}
