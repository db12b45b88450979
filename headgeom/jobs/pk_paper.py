"""The PK paper's per-layer jobs: pk_within, pk_cross, pk_null_within, pk_null_cross (run through the
shard-family registry, headgeom.schedule.families). They hold no math (headgeom.methods.overlap)
and no cost figures: what they add is reading a layer, writing its shard, and the bounded caches
that keep a layer's spaces, bases and factors across pairs and samples, each within its memory
budget (``*_CACHE_MB`` below; headgeom.schedule.costs prices them)."""

from __future__ import annotations

import time

import numpy as np

from headgeom.core.backend import backend_from
from headgeom.core.provenance import code_version
from headgeom.io.shards import write_shard
from headgeom.io.store import TensorStore
from headgeom.jobs.common import shard_provenance, store_dir, with_keys
from headgeom.jobs.draws import Draws, job_threads
from headgeom.core.logs import progress_of

# memory budgets of the caches: what a job keeps in memory at most, the rest recomputed or spilled
# (the same bits either way); headgeom.schedule.costs prices them in the jobs' cost models
READER_CACHE_MB = 256  # pk_cross: reader layers' spaces kept in memory up to this size, the rest recomputed
WRITER_CACHE_MB = 256  # pk_null_cross: writer bases kept in memory up to this size, the rest spilled to $TMPDIR
PREPARED_CACHE_MB = 256  # pk_null_cross: the null models' per-layer preparations (LQ factors) kept across samples
FACTOR_CACHE_MB = 256  # pk_null_cross: stacked layer factors kept across samples (each read and checked once)


def _self_overlap_rows(f, spaces, model: str, layer: int, n_perm: int) -> dict:
    """Self-head overlap tests of one layer (PK paper, Appendix H)."""
    from headgeom.methods.overlap import rho_matrix, self_overlap_test
    from headgeom.core.seeds import rng_for

    rows = {k: [] for k in ("test", "observed", "null_mean", "null_min", "null_max", "p", "n_null", "exact")}
    heads = np.arange(f.n_heads)
    tests = []
    if {"O", "V"} <= set(spaces):  # each head's writer vs its own (group's) V reading space
        tests.append(("V_vs_O", "O", "V", f.kv_group))
    if {"Q", "K"} <= set(spaces):
        tests.append(("Q_vs_K", "Q", "K", f.kv_group))
    if {"Q", "O"} <= set(spaces):
        tests.append(("Q_vs_O", "O", "Q", heads))
    for name, a, b, labels in tests:
        _, Ba, ra = spaces[a]
        _, Bb, rb = spaces[b]
        obs, null, p, exact = self_overlap_test(rho_matrix(Ba, ra, Bb, rb), labels,
                                                rng_for(model, layer, "self-overlap", name), n_perm)
        rows["test"].append(name)
        rows["observed"].append(obs)
        rows["null_mean"].append(float(null.mean()) if null.size else float("nan"))
        rows["null_min"].append(float(null.min()) if null.size else float("nan"))
        rows["null_max"].append(float(null.max()) if null.size else float("nan"))
        rows["p"].append(p)
        rows["n_null"].append(int(null.size))
        rows["exact"].append(bool(exact))
    types = {"test": object, "n_null": np.int64, "exact": bool}  # typed even where no test applies
    return {k: np.array(v, dtype=types.get(k, np.float64)) for k, v in rows.items()}


def pk_rows(f, model: str, layer: int, params: dict, self_overlap: bool = False) -> tuple[dict, dict, dict | None]:
    """The rows of one layer's pk_within shard, key columns first, its layer facts (provenance), and
    with ``self_overlap`` the rows of its pk_self shard (else None): what pk_job writes and
    headgeom.api returns."""
    from headgeom.methods.overlap import pk_within_layer

    cols, facts, spaces = pk_within_layer(f, kinds=tuple(params.get("kinds", ("O", "Q", "K", "V"))),
                                   rank_rtol=params.get("rank_rtol", 1e-6), return_spaces=True)
    rows = None
    if self_overlap:
        rows = with_keys(_self_overlap_rows(f, spaces, model, layer, int(params.get("self_permutations", 10_000))),
                         model, layer)
    return with_keys(cols, model, layer), facts, rows


def pk_job(store_dir, layer: int, out, params: dict, out_self=None, log=print) -> None:
    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    f = store.layer_factors(layer)
    model = store.manifest["model"]
    cols, facts, rows = pk_rows(f, model, layer, params, self_overlap=out_self is not None)
    prov = shard_provenance("pk_within", store, layer, params)
    prov["layer_facts"] = facts
    prov["folded"] = f.notes.get("folded", "")
    write_shard(out, cols, prov)
    if out_self is not None:
        write_shard(out_self, rows, {**prov, "job": "pk_self"})
    log(f"[pk_within {model} L{layer}] {len(cols['pk'])} pairs, {time.perf_counter() - t0:.2f}s")


class _BoundedMemo:
    """Key -> value computed once and kept while the kept values fit in ``budget_mb``; a value
    that does not fit is recomputed on each use (the same bits), so memory stays bounded."""

    def __init__(self, budget_mb: float):
        self.budget, self.used, self.kept = budget_mb * 2**20, 0, {}

    def get(self, key, compute):
        if key in self.kept:
            return self.kept[key]
        value = compute()
        size = sum(a.nbytes for parts in value.values() for a in parts)
        if self.used + size <= self.budget:
            self.kept[key] = value
            self.used += size
        return value


def pair_segments(segments, n_layers: int, job: str = "pk_cross") -> list[tuple[int, int, int]]:
    """``[(writer, reader_start, reader_stop), ...]`` as ints, each checked against the layer count."""
    segments = [tuple(int(x) for x in seg) for seg in segments]
    for w, r0, r1 in segments:
        if not (0 <= w < r0 <= r1 <= n_layers):
            raise ValueError(f"{job}: bad pair segment {(w, r0, r1)} for {n_layers} layers")
    return segments


def pk_cross_rows(layer_factors, model: str, n_layers: int, segments, params: dict) -> tuple[dict, dict]:
    """The rows of a pk_cross shard for the writer -> reader layer pairs of ``segments``
    (``[(writer, reader_start, reader_stop), ...]``), key columns first, and lambda_min(S) of
    each writer layer; ``layer_factors(l)`` gives a layer's LayerFactors (a tensor store's, or
    headgeom.api's). Rows come writer, reader, kind: what pk_cross_job writes and headgeom.api
    returns."""
    from headgeom.methods.overlap import cross_pairs, head_sq_norms, lambda_min_S, layer_spaces, stacked

    segments = pair_segments(segments, n_layers)
    if not segments:
        raise ValueError("pk_cross: no layer pairs to compute")
    rtol = params.get("rank_rtol", 1e-6)
    kinds = tuple(params.get("cross_kinds", ("Q", "K", "V")))
    keys = ("layer_r", "kind", "head_w", "head_r", "pk", "rho", "min_angle_deg", "weighted", "dim_w", "dim_r", "lambda_min_S")
    blocks, lams = [], {}
    readers = _BoundedMemo(READER_CACHE_MB)  # a reader layer's spaces and head norms, computed once for all its writers

    def reader_spaces(lr):
        return {kind: (Xr, Br, rr, head_sq_norms(Xr))
                for kind, (Xr, Br, rr) in layer_spaces(layer_factors(lr), kinds, rtol).items()}

    for w, r0, r1 in segments:
        Xw, Bw, rw = layer_spaces(layer_factors(w), ("O",), rtol)["O"]
        lam = lams[w] = lambda_min_S(Bw)
        Sw, SXw, nw2 = stacked(Bw), stacked(Xw), head_sq_norms(Xw)  # once per writer, for all its readers
        parts = []
        for lr in range(r0, r1):
            for kind, (Xr, Br, rr, nr2) in readers.get(lr, lambda: reader_spaces(lr)).items():
                res = cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, Sw=Sw, SXw=SXw, nw2=nw2, nr2=nr2)
                n = len(res["rho"])
                res.update(layer_r=np.full(n, lr), kind=np.array([kind] * n, dtype=object),
                           lambda_min_S=np.full(n, lam))
                parts.append(res)
        if parts:
            blocks.append(with_keys({k: np.concatenate([p[k] for p in parts]) for k in keys}, model, w))
    if blocks:
        cols = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
    else:
        cols = with_keys({k: np.array([]) for k in keys}, model, sorted(lams)[0])
    return cols, lams


def pk_cross_job(store_dir, layer, out, params: dict, segments=None, log=print) -> None:
    """Writer heads (O) against the reader heads (Q/K/V) of later layers. ``segments``: the
    part of the layer-pair list this job covers, ``[(writer, reader_start, reader_stop), ...]``
    (headgeom.schedule.fanout); default: writer ``layer`` against every later layer. Rows come
    writer, reader, kind: a part's rows are its writers' unsplit rows in order."""
    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    L = store.fields.n_layers
    if segments is None:
        segments = [(int(layer), int(layer) + 1, L)]
    segments = pair_segments(segments, L)

    def layer_factors(l):  # each layer's tensors read once into its factors, then the memory map let go
        f = store.layer_factors(l)
        store.release()
        return f

    cols, lams = pk_cross_rows(layer_factors, model, L, segments, params)
    writers = sorted(lams)
    prov = shard_provenance("pk_cross", store, writers[0], params)
    if len(writers) > 1:
        prov["layer"] = writers
        prov["tensors"] = {w: store.layer_tensors(w) for w in writers}
    prov["pair_segments"] = [list(seg) for seg in segments]
    readers = sorted({lr for _, r0, r1 in segments for lr in range(r0, r1)})
    prov["tensors_readers"] = {lr: store.layer_tensors(lr) for lr in readers}
    write_shard(out, cols, prov)
    log(f"[pk_cross {model} writers {writers}] {len(cols['rho'])} pairs, "
        + ", ".join(f"lambda_min(S)[{w}]={v:.3g}" for w, v in lams.items()) + f", {time.perf_counter() - t0:.2f}s")


class _SpillingCache:
    """Key -> (bases, ranks), in memory up to ``budget_mb`` and in .npy files beyond it, so a
    job's resident memory does not grow with the number of layers it holds. A spilled value
    reads back bit for bit (np.save / np.load, memory-mapped, no pickle)."""

    def __init__(self, budget_mb: float):
        self.budget = budget_mb * 2**20
        self.mem, self.files, self.used = {}, {}, 0

    def __enter__(self):
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="headgeom-spill-")
        return self

    def __exit__(self, *exc):
        self.clear()
        self._dir.cleanup()

    def clear(self):
        import os

        self.mem.clear()
        for path, _ in self.files.values():
            os.unlink(path)
        self.files.clear()
        self.used = 0

    def put(self, key, value):
        """``value``: (array, *rest); the array is what is kept in memory or spilled."""
        B, rest = value[0], tuple(value[1:])
        if self.used + B.nbytes <= self.budget:
            self.mem[key] = value
            self.used += B.nbytes
            return
        import os

        path = os.path.join(self._dir.name, f"{len(self.files)}.npy")
        np.save(path, B, allow_pickle=False)
        self.files[key] = (path, rest)

    def get(self, key):
        """The value as put; a spilled array comes back memory-mapped (read-only, the same bits)."""
        if key in self.mem:
            return self.mem[key]
        path, rest = self.files[key]
        return (np.asarray(np.load(path, mmap_mode="r", allow_pickle=False)), *rest)




class _Factors:
    """(kind, layer) -> that layer's factors of one kind as heads of one stacked matrix
    (pk.stacked_heads: what every null draw of them reads), kept up to ``budget_mb`` so that a job
    drawing many samples reads, checks and folds a layer's tensors once; past the budget they are
    read again for each draw (the same bits either way)."""

    def __init__(self, store, budget_mb: float):
        import threading

        self.store, self.budget, self.used, self.kept = store, budget_mb * 2**20, 0, {}
        self._lock = threading.Lock()  # the store's memory map is one per job: a worker thread reads under it

    def get(self, kind: str, layer: int):
        from headgeom.methods.overlap import factor_stack, stacked_heads

        with self._lock:
            X = self.kept.get((kind, layer))
            if X is None:
                X = stacked_heads(factor_stack(self.store.layer_factors(layer), kind))
                self.store.release()
                if self.used + X.nbytes <= self.budget:
                    self.kept[kind, layer] = X
                    self.used += X.nbytes
        return X


class _Prepared(dict):
    """nulls.null_factors' ``prepared`` dict with a memory budget: past it, a preparation is made for
    the draw and not kept (the same bits either way)."""

    def __init__(self, budget_mb: float):
        import threading

        super().__init__()
        self.budget, self.used = budget_mb * 2**20, 0
        self._lock = threading.Lock()  # worker threads prepare different layers at once

    def __setitem__(self, key, value):
        size = sum(getattr(v, "nbytes", 0) for v in value.values())
        with self._lock:
            if self.used + size <= self.budget:
                super().__setitem__(key, value)
                self.used += size


def _null_stats_row(rows, stats, **keys):
    for k, v in keys.items():
        rows.setdefault(k, []).append(v)
    for k, v in stats.items():
        rows.setdefault(k, []).append(v)


def pk_null_within_job(store_dir, layer: int, samples, out, params: dict, log=print) -> None:
    """The given null sample indices of every kind's within-layer pairs, both nulls."""
    from headgeom.methods.nulls import NULL_MODELS, null_spaces, precision_of
    from headgeom.methods.overlap import isotropic_rho, layer_stats, pk_within, stacked_heads
    from headgeom.core.seeds import rng_for

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    f = store.layer_factors(layer)
    from headgeom.methods.overlap import factor_stack

    iso = isotropic_rho(f.d_head, f.d_model)
    samples = [int(x) for x in samples]
    precision = precision_of(params, "within")
    bk = backend_from(params)
    rows: dict = {}
    prepared: dict = {}  # what every draw of one kind's X shares (nulls.NullModel.prepare)
    for kind in params.get("kinds", ("O", "Q", "K", "V")):
        X = factor_stack(f, kind)
        if X.shape[0] < 2:
            continue
        X = stacked_heads(X)  # stacked once here, not once per draw
        for null in params.get("types", tuple(NULL_MODELS)):
            for s in samples:
                B, r = null_spaces(X, null, rng_for(model, "null-within", null, kind, layer, s), precision, bk,
                                   prepared, kind, params.get("rank_rtol", 1e-6))
                res = pk_within(B, r, bk, angles="min")  # layer_stats reads only the smallest angle
                _null_stats_row(rows, layer_stats(res["rho"], res["min_angle_deg"], iso),
                                kind=kind, null=null, sample=s, rho=np.sort(res["rho"]).tolist())
            progress_of(log)(f"[pk_null_within {model} L{layer}] {kind} {null}: samples {samples[0]}..{samples[-1]} "
                             f"done, {time.perf_counter() - t0:.1f}s")
    cols = {k: (np.array(v, dtype=object) if k in ("kind", "null", "rho") else np.array(v)) for k, v in rows.items()}
    if not cols:
        cols = {"kind": np.array([], dtype=object)}
    prov = shard_provenance("pk_null_within", store, layer, params)
    prov["samples"] = samples
    prov["seed_scheme"] = "rng_for(model, 'null-within', null, kind, layer, sample)"
    write_shard(out, with_keys(cols, model, layer), prov)
    log(f"[pk_null_within {model} L{layer}] samples {samples[0]}..{samples[-1]}, {time.perf_counter() - t0:.2f}s")


def heads_of_kind(fields, kind: str) -> int:
    """How many spaces one layer has of ``kind``: a head each for O and Q, a KV group each for K and V."""
    return fields.n_heads if kind in ("O", "Q") else fields.n_kv_heads


def layer_groups(layers, per_call: int) -> list[list[int]]:
    """Consecutive layers in groups of ``per_call`` (methods.projectors.layers_per_call; at least one): the
    writer or reader layers of one projector_gram call."""
    per = max(1, int(per_call))
    return [list(layers[i:i + per]) for i in range(0, len(layers), per)]


def _projector_call_stats(writers, readers, group, chunk, writers_of: dict, kinds, iso: float, stats: dict,
                          buffers: dict, run_tasks=None) -> None:
    """rho statistics of every (writer, reader layer, kind) pair of a chunk of writer layers and a
    group of reader layers from one projector_gram call: ``writers`` the spilling cache of writer
    draws, ``readers`` (reader layer, kind) -> the group's draws. Each head is packed once for all
    its partners in the call; writers of the chunk without a partner in the group are left out. ``run_tasks``:
    how the call's packing runs (projector_gram: the job's draw workers, one BLAS thread each)."""
    from headgeom.methods.overlap import layer_stats, rho_of_pk
    from headgeom.methods.projectors import projector_gram

    needed = [lw for lw in chunk if any(lw in writers_of[lr] for lr in group)]
    if not needed:
        return
    W = [writers.get(lw) for lw in needed]
    order = [(lr, kind) for lr in group for kind in kinds]
    col, cols = 0, {}
    for key in order:
        n = readers[key][0].shape[0]
        cols[key] = slice(col, col + n)
        col += n
    # each writer from its first partner on: a tile on the triangle's diagonal computes about half its square
    first = [min(cols[lr, kinds[0]].start for lr in group if lw in writers_of[lr]) for lw in needed]
    pk = projector_gram([B for B, _ in W], [readers[k][0] for k in order], buffers, partners_from=first,
                        run_tasks=run_tasks)
    row = 0
    for lw, (B, rw) in zip(needed, W):
        rows = slice(row, row + B.shape[0])
        row += B.shape[0]
        for lr in group:
            if lw not in writers_of[lr]:
                continue
            for kind in kinds:
                rho = rho_of_pk(pk[rows, cols[lr, kind]], rw, readers[lr, kind][1])
                stats[lr, kind, lw] = layer_stats(rho.ravel(), np.full(rho.size, np.nan), iso)


def pk_null_cross_job(store_dir, samples, out, params: dict, segments=None, log=print) -> None:
    """Null samples of writer->reader layer pairs: the writer of layer l and the reader of
    layer l' are drawn independently, seeded by (model, null, [kind,] layer, sample) only.

    ``segments``: the part of the pair list this job covers, ``[(writer, reader_start,
    reader_stop), ...]`` (headgeom.schedule.fanout); default every pair. Each layer's factors are read
    once per job (kept up to FACTOR_CACHE_MB, with what the null models' draws of them share,
    PREPARED_CACHE_MB); each writer and reader layer is drawn once per sample. Pairs come from
    projector Grams where the shape makes them cheaper (methods.projectors.projectors_pay, a cost model of
    FLOPs and bytes): the part's reader layers (every kind) against its writer layers in one
    methods.projectors.projector_gram per sample, so that each head is packed once per sample and its
    packing serves every partner in the part. The fan-out cuts the pairs into tiles whose two sides
    fit NULL_CROSS_SIDE_MB each (methods.projectors.tile_side); a part beyond it (made by hand) runs as
    groups of reader layers and chunks of writer layers within it, one call per (group, chunk). From
    stacked-basis blocks otherwise (reader layers one at a time, each writer read once per reader
    layer; writer draws kept in memory up to WRITER_CACHE_MB and spilled to $TMPDIR beyond it, so
    peak memory does not grow with the layer count). ``params["cross_threads"]`` (pk.nulls.cross_threads): the
    cores the job holds; a sample's draws then run that many at a time in worker threads and the
    products on that many BLAS threads (at most the cores the process may use: jobs.draws.job_threads), and each side
    of a call may hold that many times NULL_CROSS_SIDE_MB (methods.projectors.side_budget_mb, as the fan-out
    sized the tiles, from the config's value). Rows
    come null, sample, reader, kind, writer: with every pair in one part they are the rows of the
    unsplit job, and any fan-out (or budget) gives the same row per pair, bit for bit."""
    from headgeom.methods.nulls import NULL_MODELS, null_spaces, precision_of
    from headgeom.methods import projectors
    from headgeom.methods.overlap import cross_pairs, isotropic_rho, layer_stats, stacked
    from headgeom.methods.projectors import layers_per_call, projectors_pay
    from headgeom.core.seeds import rng_for

    t0 = time.perf_counter()
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    L = store.fields.n_layers
    if segments is None:
        segments = [(w, w + 1, L) for w in range(L - 1)]
    segments = [tuple(int(x) for x in seg) for seg in segments]
    for w, r0, r1 in segments:
        if not (0 <= w < r0 <= r1 <= L):
            raise ValueError(f"pk_null_cross: bad pair segment {(w, r0, r1)} for {L} layers")
    writers_of = {}  # reader layer -> its writers in this part, ascending
    for w, r0, r1 in segments:
        for lr in range(r0, r1):
            writers_of.setdefault(lr, []).append(w)
    writer_layers = sorted({w for w, _, _ in segments})
    rtol = params.get("rank_rtol", 1e-6)
    kinds = tuple(params.get("cross_kinds", ("Q", "K", "V")))
    samples = [int(x) for x in samples]
    fl = store.fields
    iso = isotropic_rho(fl.d_head, fl.d_model)
    precision = precision_of(params, "cross")
    itemsize = 4 if precision == "float32" else 8
    bk = backend_from(params)
    heads = {k: heads_of_kind(fl, k) for k in ("O",) + kinds}
    # the shape decides, not the job: every part of a model takes the same route
    by_projectors = projectors_pay(fl.n_heads, fl.d_model, fl.d_head, L, fl.n_kv_heads, kinds, itemsize)
    asked = int(params.get("cross_threads") or 1)  # pk.nulls.cross_threads: the cores the config gives the job
    threads = job_threads(asked)  # within the cores the process may use
    # what one side of a call may hold: the fan-out sized the tile by the config's cores, whatever this process gets
    side_mb = projectors.side_budget_mb(asked)
    if by_projectors:
        groups = layer_groups(sorted(writers_of), layers_per_call(fl.d_model, fl.d_head, sum(heads[k] for k in kinds),
                                                                  itemsize, side_mb))
        chunks = layer_groups(writer_layers, layers_per_call(fl.d_model, fl.d_head, heads["O"], itemsize, side_mb))
    else:
        groups = [[lr] for lr in sorted(writers_of)]

    prepared = _Prepared(PREPARED_CACHE_MB)  # per (kind, layer): what its draws of every sample share

    def spaces(X, rng, key):  # one draw's (bases, ranks)
        return null_spaces(X, null, rng, precision, bk, prepared, key, rtol)

    factors = _Factors(store, FACTOR_CACHE_MB)  # per (kind, layer): its stacked factors, read once for every sample
    rows: dict = {}
    buffers: dict = {}  # projector_gram's slab buffers, reused by every call of the same size
    # by projector Grams a part's writer bases are one side of its calls (NULL_CROSS_SIDE_MB, priced by the cost
    # model): kept in memory; by blocks beyond WRITER_CACHE_MB they are spilled
    cache_mb = max(WRITER_CACHE_MB, side_mb if by_projectors else 0)

    def draw(kind, l, seed):  # one draw of layer l's factors of ``kind``, for a worker thread
        return lambda: spaces(factors.get(kind, l), seed, (kind, l))

    def reader_draws(group, null, s):
        return [((lr, kind), draw(kind, lr, rng_for(model, "null-cross-reader", null, kind, lr, s)))
                for lr in group for kind in kinds]

    with _SpillingCache(cache_mb) as writers, Draws(threads) as draws:
        for null in params.get("types", tuple(NULL_MODELS)):
            for s in samples:
                writers.clear()
                # one draw per writer layer and sample, kept (or spilled) for its readers; the first group's
                # readers drawn in the same pass (on several threads the workers stay busy)
                first = {}
                for key, value in draws.each([(("O", l), draw("O", l, rng_for(model, "null-cross-writer", null, l, s)))
                                              for l in writer_layers] + (reader_draws(groups[0], null, s) if groups else [])):
                    if key[0] == "O":
                        writers.put(key[1], value)
                    else:
                        first[key] = value
                for gi, group in enumerate(groups):
                    stats = {}
                    readers = first if gi == 0 else dict(draws.each(reader_draws(group, null, s)))
                    first = None
                    if by_projectors:  # one Gram per chunk of writer layers, against every reader of the group
                        with draws.products():
                            for chunk in chunks:
                                _projector_call_stats(writers, readers, group, chunk, writers_of, kinds, iso, stats,
                                                      buffers, draws.tasks_runner)
                    else:
                        lr = group[0]
                        with draws.products():
                            for lw in sorted(writers_of[lr]):  # each writer read once per reader layer
                                Bw, rw = writers.get(lw)
                                Sw = stacked(Bw)  # once per writer and reader layer, for its kinds
                                for kind in kinds:  # nulls compare SD and mean: rho only
                                    Br, rk = readers[lr, kind]
                                    rho = cross_pairs(Bw, rw, Br, rk, angles=False, backend=bk, Sw=Sw)["rho"]
                                    stats[lr, kind, lw] = layer_stats(rho, np.full(len(rho), np.nan), iso)
                                del Bw, Sw
                    del readers
                    for lr in group:
                        for kind in kinds:  # rows in the order null, sample, reader, kind, writer
                            for lw in sorted(writers_of[lr]):
                                _null_stats_row(rows, stats[lr, kind, lw], layer_w=lw, layer_r=lr, kind=kind,
                                                null=null, sample=s)
                progress_of(log)(f"[pk_null_cross {model}] {null} sample {s} done ({time.perf_counter() - t0:.1f}s)")
    cols = {k: (np.array(v, dtype=object) if k in ("kind", "null") else np.array(v)) for k, v in rows.items()}
    prov = {
        "job": "pk_null_cross", "model": model, "samples": samples, "params": params,
        "pair_segments": [list(seg) for seg in segments],
        "pair_products": "projector Grams" if by_projectors else "stacked-basis blocks",
        "precision": precision,  # the arithmetic that ran (pk.nulls.cross_precision, else precision)
        "threads": threads,
        "code": code_version(), "model_source": store.provenance(), "fields": store.manifest["fields"],
        "tensors": {k: v["sha256"] for k, v in store.manifest["tensors"].items()},
        "seed_scheme": "writer: rng_for(model, 'null-cross-writer', null, layer_w, sample); "
                       "reader: rng_for(model, 'null-cross-reader', null, kind, layer_r, sample)",
    }
    n = len(cols.get("kind", []))
    cols = {"model": np.array([model] * n, dtype=object), **cols}
    write_shard(out, cols, prov)
    log(f"[pk_null_cross {model}] samples {samples[0]}..{samples[-1]}, {len(segments)} segments, "
        f"{time.perf_counter() - t0:.2f}s")


# ------------------------------------------------------------------ entry points (the registry's ``run``)


def run_pk_within_layer(inputs, outputs, wildcards, params, log):
    pk_job(store_dir(inputs), int(wildcards["layer"]), outputs["pairs"], params, out_self=outputs["self_overlap"], log=log)


def run_pk_cross(inputs, outputs, wildcards, params, log):
    segments = params.get("pairs")  # a part of the layer-pair list (headgeom.schedule.fanout)
    layer = None if segments else int(wildcards["layer"])
    pk_cross_job(store_dir(inputs), layer, outputs["shard"], params, segments=segments, log=log)


def run_pk_null_within(inputs, outputs, wildcards, params, log):
    pk_null_within_job(store_dir(inputs), int(wildcards["layer"]), params["samples"], outputs["shard"], params, log=log)


def run_pk_null_cross(inputs, outputs, wildcards, params, log):
    pk_null_cross_job(store_dir(inputs), params["samples"], outputs["shard"], params, segments=params["pairs"], log=log)
