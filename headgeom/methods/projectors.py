"""PK of the cross-layer null pairs from projector Grams (the PK paper's cross-layer nulls), and the
cost model that picks this route and sizes a pk_null_cross part (headgeom.jobs.pk_paper,
headgeom.schedule.fanout, headgeom.schedule.costs).

PK(U, V) = tr(P_U P_V) with P = U U^T over orthonormal bases (methods.overlap.orthonormal_bases):
each head's projector packed once per draw and call, every writer by every reader one GEMM over the
packed entries (docs/performance.md, "Cross-layer nulls")."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

# Cross-layer nulls need only rho (SD and mean against the nulls), not the blocks' singular values:
# PK(U_i, V_j) = tr(P_i P_j) = <P_i, P_j>_F with P = U U^T. Over the upper triangle of P (the diagonal
# once, the rest twice) that is D (D + 1) / 2 multiply-adds a pair instead of the blocks' D d^2, for
# each head's packing (D^2 d / 2, a GEMM) once per draw and partner operand.
#
# The triangle is packed in slabs: bands of rows a..b (D / 16 rows each), a band cut into column
# blocks c..e (c >= a) of about SLAB_ELEMS entries, each the rectangle U[a:b] U[c:e]^T of every head,
# written by one batched GEMM straight into its place (no gather). A band's first block begins at
# column a: its first b - a columns are the band's diagonal block, which is symmetric and so counted
# whole (weight 1); every other entry lies strictly above the diagonal (weight 2). A writer's slab
# carries the weights (its GEMM's left factor doubled, the diagonal block then halved: both exact), a
# reader's does not, so tr(P_w P_r) is the plain dot product of the two packings; the diagonal blocks'
# lower halves are the only work done twice (1/16 of it: the band height over D). The band height keeps the
# packing GEMM near the GEMM rate: each head's columns U[c:e] are read (and packed by BLAS) once a
# slab, for (b - a) rows of products (`make bench` at D = 4096: 0.78 of the GEMM rate with 64-row slabs,
# 0.84 with 256-row bands). Up to D = 2048 a band is one block (its D / 16 rows by D - a columns fit SLAB_ELEMS).
SLAB_ELEMS = 2**18  # a slab holds about this many entries per head (2 MiB in float64): the job's buffers
SLAB_ROWS_MIN = 16  # fewer rows make the packing GEMM memory-bound (its intensity is rows / 4 FLOP/byte)


class Slab(NamedTuple):
    """Rows a..b and columns c..e of a packed projector (c >= a; c == a: the band's diagonal block
    leads), its entries at offset .. offset + size, row by row."""

    a: int
    b: int
    c: int
    e: int
    offset: int

    @property
    def size(self) -> int:
        return (self.b - self.a) * (self.e - self.c)


@functools.lru_cache(maxsize=16)
def projector_slabs(D: int) -> tuple[Slab, ...]:
    """The slabs of the packed triangle of a D x D projector, in order. A function of D only, so
    every job packs a head the same way and a PK is the same sum whatever operands it is computed
    in. Bands of max(SLAB_ROWS_MIN, D / 16) rows (the repeated diagonal blocks add 1/16 to the
    work), each cut into equal column blocks of about SLAB_ELEMS entries, each at least as wide as
    the band is tall (the first holds the diagonal block)."""
    out, a, off = [], 0, 0
    height = max(SLAB_ROWS_MIN, D // 16)
    while a < D:
        b = min(a + height, D)
        rows, width = b - a, D - a
        blocks = max(1, min(-(-rows * width // SLAB_ELEMS), width // rows))
        edges = [a + width * i // blocks for i in range(blocks + 1)]
        for c, e in zip(edges, edges[1:]):
            out.append(Slab(a, b, c, e, off))
            off += rows * (e - c)
        a = b
    return tuple(out)


def packed_length(D: int) -> int:
    """Entries of one head's packed projector (its ``pack_slab`` slabs in order): D (D + 1) / 2 and the bands'
    diagonal blocks' lower halves."""
    last = projector_slabs(D)[-1]
    return last.offset + last.size


def slab_width(D: int) -> int:
    """The most entries of one head in any slab of D: a slab buffer's row."""
    return max(s.size for s in projector_slabs(D))


def pack_slab(bases, slab: Slab, out: np.ndarray, twice_upper: bool = False) -> np.ndarray:
    """``slab`` of every head's packed projector into ``out`` ((n, slab.size), any strides between
    heads, each head's entries contiguous): one batched GEMM U[a:b] U[c:e]^T written in place.
    ``bases``: (n, D, d) orthonormal bases (columns beyond the rank zero), or a list of such arrays
    filling consecutive rows of ``out``. ``twice_upper``: the writer's weights (entries strictly above
    the diagonal doubled; exact)."""
    if isinstance(bases, (list, tuple)):
        for task in pack_tasks(bases, slab, out, twice_upper, heads=None):  # each array whole, in this thread
            task()
        return out
    n, D, d = bases.shape
    a, b, c, e, _ = slab
    k = b - a
    if out.shape != (n, slab.size):
        raise ValueError(f"pack_slab: out is {out.shape}, not ({n}, {slab.size})")
    left = bases[:, a:b, :]
    if twice_upper:
        left = left * 2.0  # (n, k, d): small
    G = out.reshape(n, k, e - c)  # a view: each head's rows are contiguous in out
    np.matmul(left, np.swapaxes(bases[:, c:e, :], -1, -2), out=G)
    if twice_upper and c == a:
        G[:, :, :k] *= 0.5  # the diagonal block counts once
    return out


def pack_projectors(bases, twice_upper: bool = False) -> np.ndarray:
    """Every slab of each head's projector, (n, packed_length(D)) in the bases' dtype (``pack_slab`` slab
    by slab; projector_gram keeps one slab at a time instead)."""
    n, D, _ = bases.shape
    out = np.empty((n, packed_length(D)), dtype=bases.dtype)
    for s in projector_slabs(D):
        pack_slab(bases, s, out[:, s.offset:s.offset + s.size], twice_upper)
    return out


# float32 projector Grams (pk.nulls.precision: float32): slab products in float32, summed over slabs in
# float64. Stated bound on rho = PK / min dim against float64 on the same bases: 1e-5. Measured
# (tests/unit/methods/test_null_cross_projectors.py, bench/run.py null_cross): 5e-9 between random subspaces
# at the 7B and 235B shapes, 1.3e-7 between equal subspaces (PK = d) at D = 3584 (rounding of
# entries of size up to 1 summed over ~D^2 / 2 terms); below the float32 null statistics' own bound
# (docs/performance.md, 5e-5).
FLOAT32_RHO_BOUND = 1e-5


PRODUCT_ROWS = 256  # projector_gram with partners_from: writer heads per product (a GEMM this tall runs near peak)
PACK_TASK_HEADS = 8  # projector_gram with run_tasks: heads a packing task packs (small tasks keep many threads even)


def pack_tasks(arrays, slab: Slab, out: np.ndarray, twice_upper: bool = False,
               heads: int | None = PACK_TASK_HEADS) -> list:
    """``pack_slab(arrays, slab, out, twice_upper)`` as zero-argument tasks of at most ``heads`` heads each
    (None: each array whole), to run side by side (each head's GEMM is the one pack_slab makes: the same bits
    in any order and grouping)."""
    tasks, r0 = [], 0
    for B in arrays:
        step = max(1, B.shape[0]) if heads is None else heads
        for h0 in range(0, B.shape[0], step):
            h1 = min(h0 + step, B.shape[0])
            tasks.append(functools.partial(pack_slab, B[h0:h1], slab, out[r0 + h0:r0 + h1], twice_upper))
        r0 += B.shape[0]
    if r0 != out.shape[0]:
        raise ValueError(f"pack_slab: {r0} heads for {out.shape[0]} rows")
    return tasks


def pack_sides(writers, readers, slab: Slab, Pw: np.ndarray, Pr: np.ndarray, run_tasks=None) -> None:
    """One slab of both sides of a projector_gram call: the writers (with their weights) into ``Pw``, the readers
    into ``Pr``; in this thread, or as ``pack_tasks`` handed to ``run_tasks`` (projector_gram's)."""
    if run_tasks is None:
        pack_slab(writers, slab, Pw, twice_upper=True)
        pack_slab(readers, slab, Pr)
    else:
        run_tasks(pack_tasks(writers, slab, Pw, twice_upper=True) + pack_tasks(readers, slab, Pr))


def projector_gram(writers, readers, buffers: dict | None = None, partners_from=None, run_tasks=None) -> np.ndarray:
    """tr(P_w P_r) for every writer head w and reader head r: (n_w, n_r) float64. ``writers``,
    ``readers``: lists of (n, D, d) orthonormal bases (many layers' heads: a pk_null_cross part's
    whole tile, sized to its memory request; each head is packed once per call, so its packing is
    shared by every partner in the call). Slab by slab (``projector_slabs``): both sides packed into
    the slab buffers once, then one GEMM of the writers by the readers over the slab, summed over
    slabs in float64 (the slab products are in the bases' dtype: float32 under
    ``pk.nulls.precision: float32``). Memory: the two buffers, (n_w + n_r) slab rows.

    ``partners_from``: per writer array, the first reader head (a column of the result) it is
    paired with; the columns left of it are not computed (0). Writer arrays are then multiplied in
    consecutive runs of at least PRODUCT_ROWS heads, each run from its smallest start on: a tile on
    the diagonal of the layer-pair triangle (writer l, readers after l) computes about half its
    square. Each entry is the same dot product over the slab whatever the run (BLAS may round a
    thin run's product apart from the whole one's: 1e-16 relative, tests); with fewer than
    PRODUCT_ROWS writer heads there is one run, the whole product. ``buffers``: a dict in which to keep the buffers for
    later calls of the same size (a fresh buffer costs its page faults again). ``run_tasks``: runs a list of
    zero-argument tasks (``pack_tasks``) and returns when all are done, e.g. on worker threads of one BLAS
    thread each (headgeom.jobs.draws.Draws.run); the packing is then the same bits as one thread's, where
    OpenBLAS's own threads would split each head's GEMM (default: each slab packed in this thread)."""
    writers, readers = list(writers), list(readers)
    nw, nr = sum(B.shape[0] for B in writers), sum(B.shape[0] for B in readers)
    D = (writers or readers)[0].shape[1]
    dtype = np.result_type(*writers, *readers)
    pk = np.zeros((nw, nr))
    if nw == 0 or nr == 0:
        return pk
    runs = product_runs([B.shape[0] for B in writers], partners_from, nr)
    width = slab_width(D)
    buffers = {} if buffers is None else buffers

    def buffer(name, n):
        M = buffers.get(name)
        if M is None or M.shape[0] < n or M.shape[1] != width or M.dtype != dtype:
            M = buffers[name] = np.empty((n, width), dtype=dtype)
        return M

    Wbuf, Rbuf = buffer("writers", nw), buffer("readers", nr)
    writers = [B.astype(dtype, copy=False) for B in writers]
    readers = [B.astype(dtype, copy=False) for B in readers]
    for slab in projector_slabs(D):
        Pw, Pr = Wbuf[:nw, :slab.size], Rbuf[:nr, :slab.size]
        pack_sides(writers, readers, slab, Pw, Pr, run_tasks)
        for r0, r1, c0 in runs:
            pk[r0:r1, c0:] += Pw[r0:r1] @ Pr[c0:].T
    return pk


def product_runs(heads, partners_from, n_readers: int) -> list[tuple[int, int, int]]:
    """projector_gram's products, ``(first writer row, row after the last, first reader column)``:
    one run of every writer without ``partners_from``; with it, consecutive writer arrays (``heads``
    each) in runs of at least PRODUCT_ROWS heads, each from its arrays' smallest start."""
    n = sum(heads)
    if partners_from is None:
        return [(0, n, 0)]
    starts = [int(c) for c in partners_from]
    if len(starts) != len(heads) or any(not 0 <= c <= n_readers for c in starts):
        raise ValueError(f"projector_gram: partners_from {starts} for {len(heads)} writer arrays and {n_readers} readers")
    runs, r0, c0 = [], 0, None
    row = 0
    for h, c in zip(heads, starts):
        c0 = c if c0 is None else min(c0, c)
        row += h
        if row - r0 >= PRODUCT_ROWS:
            runs.append((r0, row, c0))
            r0, c0 = row, None
    if row > r0:
        runs.append((r0, row, c0))
    return [r for r in runs if r[2] < n_readers]


# The route of the cross-layer null pairs, from counted FLOPs and bytes at rates relative to one
# thread's float64 GEMM rate, as `make bench` measures them (bench/run.py null_cross: random
# orthonormal bases at the Qwen2.5-7B and Qwen3-235B shapes, one BLAS thread; docs/performance.md).
GEMM_FLOPS = 50e9  # one thread's float64 GEMM rate this model prices in (FLOP/s; measured 50-55 here on most days)
# the slowest node's rate measured (40 GFLOP/s, 36-42 over a day's runs): what a job's request is priced at
# (headgeom.schedule.costs.SAFETY), so that it holds on such a node too
SLOWEST_GEMM_FLOPS = 40e9
NODE_SPREAD = GEMM_FLOPS / SLOWEST_GEMM_FLOPS
ROUTE_RATES = {  # fraction of the GEMM rate: the stacked-basis blocks' GEMM, a slab's packing, the slab product
    # (`make bench` null_cross, float64 at the 7B / 235B shapes: blocks 1.01-1.04 / 0.95-1.03, packing
    # 0.83-0.88 / 0.84-0.87 (float32 0.82-0.83 / 0.83-0.84), slab products at a part's call (its whole tile a side) 0.96-1.06 /
    # 0.94-0.97; the lower ends, rounded down)
    "blocks": 0.95, "pack": 0.8, "gram": 0.9,
}
BYTES_PER_FLOP_TIME = 1 / 6e9  # seconds per byte streamed from memory (about 6 GB/s on one thread)
# pk_null_cross (headgeom.jobs.pk_paper) packs a part's writer layers and its reader layers (every kind)
# in one projector_gram call per null sample while each side's orthonormal bases and slab buffers fit
# this many MiB: the fan-out (headgeom.schedule.fanout.max_tile_side) cuts the layer pairs into tiles
# of at most ``tile_side`` layers a side, so that every head of a part is drawn and packed once per
# sample and shared by all its partners (the packing is d / (heads of the other side) of the products'
# work). A part larger than this (a hand-made one, or a changed budget) is done in (chunk, group) calls.
NULL_CROSS_SIDE_MB = 5632


def side_budget_mb(threads: int = 1) -> float:
    """What one side of a pk_null_cross call may hold: NULL_CROSS_SIDE_MB per core the job holds
    (pk.nulls.cross_threads), so a job on more cores takes a larger tile: each layer drawn and packed
    in fewer parts."""
    return NULL_CROSS_SIDE_MB * max(1, int(threads))


def head_mib(D: int, d: int, itemsize: int = 8) -> float:
    """MiB one head holds in a projector_gram call: its orthonormal basis and its slab buffer row."""
    return (D * d + slab_width(D)) * itemsize / 2**20


def layers_per_call(D: int, d: int, heads_per_layer: int, itemsize: int = 8, budget_mb: float | None = None) -> int:
    """Whole layers on one side of a projector_gram call within NULL_CROSS_SIDE_MB (at least one)."""
    budget = NULL_CROSS_SIDE_MB if budget_mb is None else budget_mb
    return max(1, int(budget // (heads_per_layer * head_mib(D, d, itemsize))))


def tile_side(D: int, d: int, n_w: int, n_r: int, n_layers: int, itemsize: int = 8, threads: int = 1) -> int:
    """The most layers a side of a pk_null_cross part holds by projector Grams: both sides (n_w
    writer heads, n_r reader heads a layer) within ``side_budget_mb(threads)``, at most n_layers - 1."""
    budget = side_budget_mb(threads)
    return max(1, min(n_layers - 1, layers_per_call(D, d, n_w, itemsize, budget),
                      layers_per_call(D, d, n_r, itemsize, budget)))


def pack_seconds(D: int, d: int, heads: int, itemsize: int = 8) -> float:
    """Seconds to pack ``heads`` heads' projectors once (every slab: 2 d L_p FLOPs a head, its L_p
    entries written once), on one thread (float32: itemsize 4, twice the rate)."""
    speed = GEMM_FLOPS * (8 / itemsize)
    Lp = packed_length(D)
    return heads * (2 * d * Lp / (speed * ROUTE_RATES["pack"]) + itemsize * Lp * BYTES_PER_FLOP_TIME)


def null_cross_route_seconds(D: int, d: int, n_w: int, n_r: int, n_layers: int, itemsize: int = 8,
                             side: int | None = None) -> dict:
    """Seconds of one writer layer (n_w heads) against one reader layer (n_r spaces, all kinds) of one
    null sample, by each route, on one thread (float32: itemsize 4, twice the rate):
    blocks: the stacked-basis GEMM, 2 D d^2 per head pair;
    projectors: the slab products, 2 L_p per head pair (L_p = packed_length(D), about D (D + 1) / 2),
    and each head's packing once per sample (``pack_seconds``), a layer's shared by the ``side``
    layers it meets in its part (default ``tile_side``: a square tile within the memory budget)."""
    speed = GEMM_FLOPS * (8 / itemsize)
    pairs = n_w * n_r
    blocks = 2 * D * d * d * pairs / (speed * ROUTE_RATES["blocks"])
    side = tile_side(D, d, n_w, n_r, n_layers, itemsize) if side is None else max(1, side)
    gram = 2 * packed_length(D) * pairs / (speed * ROUTE_RATES["gram"])
    pack = (pack_seconds(D, d, n_w, itemsize) + pack_seconds(D, d, n_r, itemsize)) / side
    return {"blocks": blocks, "projectors": gram + pack, "gram": gram, "pack": pack, "side": side}


def projectors_pay(n_heads: int, d_model: int, d_head: int, n_layers: int, n_kv_heads: int | None = None,
                   kinds=("Q", "K", "V"), itemsize: int = 8) -> bool:
    """Whether a model's cross-layer null pairs are cheaper from projector Grams
    (``projector_gram``) than from stacked-basis blocks, by ``null_cross_route_seconds``. A
    function of the shape only, so every job of a model takes the same route."""
    if n_layers < 2:
        return False
    G = n_heads if n_kv_heads is None else n_kv_heads
    n_r = sum(n_heads if k in ("O", "Q") else G for k in kinds)
    t = null_cross_route_seconds(d_model, d_head, n_heads, n_r, n_layers, itemsize)
    return t["projectors"] < t["blocks"]

