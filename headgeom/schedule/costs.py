"""Job resources (mem_mb, runtime in minutes) of every per-layer rule: one cost model per job,
read by the shard-family registry (headgeom.schedule.families) and so by the rules and SLURM.

Time: the PK jobs from counted FLOPs, each kernel at a rate measured against the same process's GEMM
rate with one BLAS thread, priced at the reference rate methods.projectors.GEMM_FLOPS (checked at the
Qwen2.5-7B and Qwen3-235B layer shapes by `bench/pk_job_costs.py` and `bench/null_cross_part.py`, and
through Snakemake at Qwen2.5-7B's full width by `make bench-fullwidth`; docs/costs.md). The fetch: per
GiB kept. Paper 1 jobs: `paper1_resources` below, measured with `python bench/paper1_costs.py`.
A request asks SAFETY x that expected work: a margin, and the slowest node measured.

Memory: scaled with the float64 size of one layer's Q/K/V/O factors (224 MiB at Qwen2.5-7B's layer),
measured at full width."""

from __future__ import annotations

import json
import math

from headgeom.jobs.pk_paper import FACTOR_CACHE_MB, PREPARED_CACHE_MB, READER_CACHE_MB, WRITER_CACHE_MB
from headgeom.methods.nulls import NULL_MODELS
from headgeom.methods.projectors import NODE_SPREAD

REF = {"d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv_heads": 4}  # Qwen2.5-7B's layer: make bench-fullwidth's shape

# peak RSS = BASE + factor x layer MiB; measured at full width: through Snakemake at Qwen2.5-7B's (make
# bench-fullwidth, the process tree: pk_within_layer 1,226 MiB, pk_null_within 1,212, pk_cross_layer 1,641-1,642
# with 8-28 layers read: flat in the layers read, the store's map let go after each; pk_null_cross, a 10-min part
# of about 13 layers a side, 5,574 MiB: its draws' working set beyond the part's bases and caches, 7 layer sizes),
# and the job's own process at Qwen3-235B's (bench/pk_job_costs.py: pk_within_layer 2,490 MB, pk_null_within
# 2,735, pk_cross_layer 2,813: 4.7 layer sizes for the wide Q's rotation, where 7B's needs 3.9). The factors
# leave 1.3 x at both shapes, with Snakemake's own ~190 MiB on top of the 235B process
MEM_FACTOR = {"pk_within_per_layer": 5.5, "pk_cross_pair": 6.0, "pk_null_within_sample": 6.0,
              "pk_null_cross_draws": 7.0}
# What a job holds before its data: under SLURM each job runs a Snakemake process (the jobstep,
# which for an array task also decodes the array's job list) and the job's Python (numpy, pyarrow,
# headgeom). Measured on the test cluster, whose OverMemoryKill enforces --mem per job step
# (tests/workflow/test_slurm.py; sacct MaxRSS): batch steps of array tasks 355-471 MB (a paper1_heads
# task asking for 451 MB was killed), a tiny layer's job step 297-299 MB. 600 MB covers both.
BASE_MB = 600
# A request is MARGIN x the expected work (the model's error and a loaded node) x NODE_SPREAD: the expected
# work is priced at the reference GEMM rate (methods.projectors.GEMM_FLOPS: the rate measured on most days,
# 50-55 GFLOP/s a thread), a request at the slowest node measured (SLOWEST_GEMM_FLOPS), so that a job keeps
# its margin there too (make bench-fullwidth checks 1.3 x on the node it runs on). A download is no
# slower on a slow node: it takes MARGIN alone.
MARGIN = 1.5
SAFETY = MARGIN * NODE_SPREAD

# the PK jobs' cache budgets (READER_CACHE_MB, ... imported above from headgeom.jobs.pk_paper, where the
# jobs hold them) are priced by the cost models below


def _fields(manifest) -> dict:
    """A model's shape: a manifest path, or already its ``fields`` dict (``headgeom plan``)."""
    if isinstance(manifest, dict):
        return manifest
    with open(manifest) as fh:
        return json.load(fh)["fields"]


def _heads(f: dict) -> dict:
    """Spaces of each kind in one layer: a head each for O and Q, a KV group each for K and V."""
    return {"O": f["n_heads"], "Q": f["n_heads"], "K": f["n_kv_heads"], "V": f["n_kv_heads"]}


def layer_mib(f: dict) -> float:
    return 8 * f["d_model"] * f["d_head"] * (2 * f["n_heads"] + 2 * f["n_kv_heads"]) / 2**20


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
    bases = bases_seconds(D, d, n, itemsize)
    if _deals_columns(null):  # a reassignment: the columns read and written once
        return bases + 2 * D * m * itemsize * BYTES_PER_FLOP_TIME
    # a rotation (and a null registered elsewhere: priced as the dearer draw)
    qr = 4 / 3 * m**3 + 2 * m * m * D if m <= D else 6 * m * D * D - 8 / 3 * D**3
    return bases + qr / (speed * DRAW_RATES["householder"])


def bases_seconds(D: int, d: int, n: int, itemsize: int = 8) -> float:
    """CPU seconds of ``n`` heads' orthonormal bases (methods.overlap.orthonormal_bases: four GEMMs of
    2 D d^2 a head, at the rate their GEMMs, eigendecompositions and Cholesky factors run at together)."""
    from headgeom.methods.projectors import GEMM_FLOPS

    return n * 8 * D * d * d / (GEMM_FLOPS * (8 / itemsize) * DRAW_RATES["bases"])


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
    heads = _heads(f)
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
    heads = _heads(f)
    wide = sum(heads[k] * d > D for k in kinds)
    n = any(map(_prepares, null_types)) * ((heads["O"] * d > D) * n_writers + wide * n_readers)
    kept = min(n, int(PREPARED_CACHE_MB * 2**20 // (D * D * itemsize)))
    return kept + (n - kept) * n_samples


# ---------------------------------------------------------------- the PK jobs' kernels
#
# pk_cross_layer and pk_null_within from counted FLOPs, as the cross-layer nulls are: each kernel at a rate
# measured against the same process's GEMM rate (one BLAS thread), so that the models hold on a node of any
# speed (`bench/pk_job_costs.py` checks each job at the Qwen2.5-7B and Qwen3-235B shapes; docs/costs.md).
# The products of stacked bases or factors run at projectors.ROUTE_RATES["blocks"]; the heads' orthonormal
# bases at DRAW_RATES["bases"]; the rest here:
KERNEL_RATES = {  # fractions of projectors.GEMM_FLOPS
    "eigvalsh": 0.33,  # an m x m symmetric matrix's eigenvalues (LAPACK syevd, no vectors), 4/3 m^3: 0.34 at m 3584
    "sigma": 0.16,  # sigma_max of a d x d block (overlap.sigma_max): its Gram, 2 d^3, and its eigenvalues, 4/3 d^3
}
# a layer read from the tensor store (hashes checked, float32 widened to float64 factors), per GiB of its float64
# factors (one layer of Qwen2.5-7B: 224 MiB)
LAYER_READ_S_PER_GIB = 4.8


def read_seconds(f: dict) -> float:
    return LAYER_READ_S_PER_GIB * layer_mib(f) / 1024


def gemm_seconds(flops: float, itemsize: int = 8) -> float:
    """CPU seconds of a product of stacked bases or factors of ``flops`` FLOPs."""
    from headgeom.methods.projectors import GEMM_FLOPS, ROUTE_RATES

    return flops / (GEMM_FLOPS * (8 / itemsize) * ROUTE_RATES["blocks"])


def eigvalsh_seconds(m: int) -> float:
    from headgeom.methods.projectors import GEMM_FLOPS

    return 4 / 3 * m**3 / (GEMM_FLOPS * KERNEL_RATES["eigvalsh"])


def sigma_seconds(n_blocks: int, d: int) -> float:
    """CPU seconds of sigma_max over ``n_blocks`` d x d blocks (always float64: the statistics' arithmetic)."""
    from headgeom.methods.projectors import GEMM_FLOPS

    return n_blocks * (2 + 4 / 3) * d**3 / (GEMM_FLOPS * KERNEL_RATES["sigma"])


def upper_blocks_flops(D: int, d: int, n: int, itemsize: int = 8) -> float:
    """FLOPs of methods.overlap.upper_blocks for ``n`` heads: its strips of heads, each against every head
    right of its first one."""
    from headgeom.methods.overlap import UPPER_STRIP_COLS, UPPER_STRIP_MB

    k = max(1, min(n, UPPER_STRIP_COLS // d, int(UPPER_STRIP_MB * 2**20 // (itemsize * n * d * d))))
    return float(sum(2 * D * (min(a + k, n) - a) * d * (n - a - 1) * d for a in range(0, n - 1, k)))


def pk_cross_pair_seconds(manifest, kinds=("Q", "K", "V")) -> float:
    """CPU seconds of one writer -> reader layer pair of a pk_cross_layer part: the reader layer read and
    its heads' bases (a part keeps no reader layer at these widths: READER_CACHE_MB), the writer x reader
    blocks of the bases and of the factors (the weighted overlap), and each block's sigma_max."""
    f = _fields(manifest)
    D, d, H = f["d_model"], f["d_head"], f["n_heads"]
    R = sum(_heads(f)[k] for k in kinds)
    return (read_seconds(f) + bases_seconds(D, d, R) + gemm_seconds(2 * 2 * D * (H * d) * (R * d))
            + sigma_seconds(H * R, d))


def pk_cross_writer_seconds(manifest) -> float:
    """CPU seconds a pk_cross_layer part pays once per writer layer: its read, its heads' bases and
    lambda_min(S) (methods.overlap.lambda_min_S: the stacked bases' Gram and its eigenvalues, when the heads
    span the residual stream)."""
    f = _fields(manifest)
    D, d, H = f["d_model"], f["d_head"], f["n_heads"]
    span = (gemm_seconds(2 * D * (H * d) ** 2) + eigvalsh_seconds(H * d)) if H * d >= D else 0.0
    return read_seconds(f) + bases_seconds(D, d, H) + span


def span_seconds(D: int, m: int) -> float:
    """CPU seconds of the spectrum of a D x m stacked matrix from the smaller of its Grams
    (methods.overlap.stacked_rank, stacked_singular_values): the Gram and its eigenvalues."""
    small, large = min(m, D), max(m, D)
    return gemm_seconds(2 * small * small * large) + eigvalsh_seconds(small)


# pk_within_layer's self-overlap tests (jobs.pk_paper._self_overlap_rows): writer and reader kinds of one layer
SELF_OVERLAP_TESTS = (("O", "V"), ("Q", "K"), ("O", "Q"))


def pk_within_seconds(manifest, kinds=("O", "Q", "K", "V")) -> float:
    """CPU seconds of a pk_within_layer job: its layer read; per kind its heads' bases, their pairs and the
    stacked bases' rank; W_O's spectrum; and the self-overlap tests' blocks (their 10,000 permutations
    of the labels cost little beside them)."""
    f = _fields(manifest)
    D, d, H = f["d_model"], f["d_head"], f["n_heads"]
    heads = _heads(f)
    t = read_seconds(f)
    for kind in kinds:
        n = heads[kind]
        t += bases_seconds(D, d, n) + within_pairs_seconds(D, d, n) + span_seconds(D, n * d)
    if "O" in kinds:
        t += span_seconds(D, H * d)
    for a, b in SELF_OVERLAP_TESTS:
        if a in kinds and b in kinds:
            t += gemm_seconds(2 * D * heads[a] * d * heads[b] * d)
    return t


def within_pairs_seconds(D: int, d: int, n: int, itemsize: int = 8) -> float:
    """CPU seconds of one set of ``n`` heads' within-layer pairs (methods.overlap.pk_within): their blocks
    (upper_blocks) and each block's sigma_max."""
    return gemm_seconds(upper_blocks_flops(D, d, n, itemsize), itemsize) + sigma_seconds(n * (n - 1) // 2, d)


def null_within_seconds(manifest, n_samples: int, null_types, kinds, precision: str = "float64") -> float:
    """CPU seconds of a pk_null_within job: its layer read, then per kind (two heads or more) and null the
    draws' shared preparation once (draw_prep_seconds) and per sample a draw with its bases (draw_seconds)
    and the draw's within-layer pairs."""
    f = _fields(manifest)
    D, d = f["d_model"], f["d_head"]
    itemsize = 4 if precision == "float32" else 8
    heads = _heads(f)
    t = read_seconds(f)
    for kind in kinds:
        n = heads[kind]
        if n < 2:
            continue
        for null in null_types:
            t += draw_prep_seconds(D, d, n, null, itemsize) + n_samples * (
                draw_seconds(D, d, n, null, itemsize) + within_pairs_seconds(D, d, n, itemsize))
    return t


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
    """mem_mb and runtime (minutes) of one pk_within_layer job of this model (4 kinds, ranks, self-overlap):
    pk_within_seconds."""
    f = _fields(manifest)
    return _minutes(pk_within_seconds(f), BASE_MB + MEM_FACTOR["pk_within_per_layer"] * layer_mib(f))


def pk_cross_layer(manifest, n_samples: int = 1, n_null_types: int = 2, n_pairs: int | None = None,
                   n_writers: int | None = None) -> dict:
    """A part of ``n_pairs`` layer pairs of ``n_writers`` writer layers (headgeom.schedule.fanout; default:
    writer layer 0's row): pk_cross_pair_seconds a pair, pk_cross_writer_seconds a writer layer; one writer
    and one reader layer in memory at a time, plus the reader layers' spaces kept for later writers up to
    READER_CACHE_MB."""
    f = _fields(manifest)
    n_pairs = max(f["n_layers"] - 1, 1) if n_pairs is None else n_pairs
    n_writers = 1 if n_writers is None else n_writers
    return _minutes(pk_cross_pair_seconds(f) * n_pairs + pk_cross_writer_seconds(f) * n_writers,
                    BASE_MB + READER_CACHE_MB + MEM_FACTOR["pk_cross_pair"] * layer_mib(f))


def pk_null_within(manifest, n_samples: int = 1, n_null_types: int = 2, kinds=None, precision: str = "float64",
                   null_types=None) -> dict:
    """One block of within-layer null samples of the ``kinds`` whose nulls run (all four: None), of
    ``null_types`` (default: the first ``n_null_types`` of methods.nulls.NULL_MODELS): null_within_seconds."""
    f = _fields(manifest)
    types = tuple(null_types) if null_types is not None else tuple(NULL_MODELS)[:n_null_types]
    kinds = ("O", "Q", "K", "V") if kinds is None else tuple(kinds)
    return _minutes(null_within_seconds(f, n_samples, types, kinds, precision),
                    BASE_MB + MEM_FACTOR["pk_null_within_sample"] * layer_mib(f))


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
FETCH_S_PER_GIB = 6.9  # CPU s per GiB of float32 store (read, widen, hash, write, hash): 26 s for 3.06 GiB on a
#                        node whose GEMM ran at 40 GFLOP/s, x 40 / 50 to the reference rate
# A hub source's download: the fetch reads only the attention tensors' byte ranges (headgeom.io.hub), at
# most 4 bytes a parameter (a float32 checkpoint; bfloat16 ones are half), at a stated sustained rate from
# the hub to a compute node; the request asks MARGIN x that time on top of the work
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
                         wait_min=MARGIN * download_seconds(fields) / 60 if source == "hf" else 0)


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
