"""Fan-out of the cross-layer stages (pk_cross_layer and the null stage pk_null_cross):
writer->reader layer pairs packed into jobs whose cost-model runtime stays under a ceiling
(config ``fanout.max_job_minutes``).

The L(L-1)/2 pairs (writer l, reader l' > l) are taken writer by writer. Whole writer rows are
packed into one part while the part's pairs fit ``max_pairs`` (a block of writer layers); a
row longer than ``max_pairs`` alone is split into near-equal reader ranges, one part each.
A part is a list of segments ``(writer, reader_start, reader_stop)``. A pk_cross_layer job
covers one part; a pk_null_cross job one part x one block of null samples
(headgeom.methods.nulls.sample_range).

The null stage (fan-out ``"tiles"``) is cut into tiles instead: a block of ``side`` writer layers
against a block of ``side`` reader layers (``tile_parts``), the largest side whose part cost (the
job's ``part_seconds``: its pairs, and the draws of its writer and reader layers, which every part
makes again for each of its samples) stays under the ceiling. A tile of P pairs draws about 2 sqrt(P)
layers where a piece of a writer row draws P + 1.

The draws do not depend on the fan-out: each writer / reader null draw is seeded by (model,
null, kind, layer, sample) only (headgeom.jobs.pk_paper.pk_null_cross_job), so any packing gives
the same rows bit for bit (tests/unit/schedule/test_fanout.py). The samples a null job holds (its
block) are the config's (``block_size``), except where a model's whole layer-pair triangle is one
part: a small model's job then holds up to ``pk.nulls.samples_per_job`` samples, as many as its
least request (costs.MIN_RUNTIME) holds, so that its layers are read and prepared once for all of them."""

from __future__ import annotations

import math

from headgeom.core.errors import ConfigError
from headgeom.schedule import costs

DEFAULT_MAX_JOB_MINUTES = 120


def max_job_minutes(config: dict) -> float:
    return float((config.get("fanout") or {}).get("max_job_minutes", DEFAULT_MAX_JOB_MINUTES))


def pair_parts(n_layers: int, max_pairs: float, writer_pairs: float = 0.0) -> list[list[tuple[int, int, int]]]:
    """The writer-major layer-pair list cut into parts whose pairs, plus ``writer_pairs`` for each of their
    writer layers (what a part pays once per writer, in pairs), are at most ``max_pairs``."""
    per_row = max_pairs - writer_pairs + 1e-9  # the most pairs a part of one writer holds (1 + w - w may round below 1)
    if per_row < 1:
        raise ConfigError(f"fan-out: a part must hold at least one pair and its writer ({max_pairs:g} pairs "
                          f"allowed, a writer costs {writer_pairs:g})")
    parts: list[list[tuple[int, int, int]]] = []
    cur: list[tuple[int, int, int]] = []
    n_cur = 0.0
    for w in range(n_layers - 1):
        row = n_layers - 1 - w
        if row > per_row:  # this writer alone is too long: split its readers
            if cur:
                parts.append(cur)
                cur, n_cur = [], 0.0
            k = math.ceil(row / int(per_row))
            size = math.ceil(row / k)
            for r0 in range(w + 1, n_layers, size):
                parts.append([(w, r0, min(r0 + size, n_layers))])
            continue
        if n_cur + row + writer_pairs > max_pairs + 1e-9:
            parts.append(cur)
            cur, n_cur = [], 0.0
        cur.append((w, w + 1, n_layers))
        n_cur += row + writer_pairs
    if cur:
        parts.append(cur)
    return parts


def n_pairs(part) -> int:
    return sum(r1 - r0 for _, r0, r1 in part)


def max_pairs_per_job(job, fields: dict, config: dict) -> float:
    """How many layer pairs one job of ``job`` (a registry Job) may hold, its writer layers counted as
    ``writer_pairs`` pairs each, so that its cost-model runtime (its pair_seconds, SAFETY included) stays
    under the ceiling; at least one pair and its writer."""
    per_pair = costs.SAFETY * job.pair_seconds(fields, config)
    return max(1 + writer_pairs(job, fields, config), max_job_minutes(config) * 60 / per_pair)


def writer_pairs(job, fields: dict, config: dict) -> float:
    """What a part of ``job`` pays once per writer layer, in layer pairs (its writer_seconds / pair_seconds)."""
    if job.writer_seconds is None:
        return 0.0
    return job.writer_seconds(fields, config) / job.pair_seconds(fields, config)


def tile_parts(n_layers: int, side: int) -> list[list[tuple[int, int, int]]]:
    """The layer pairs in tiles: writer layers w0 .. w0 + side against reader layers r0 .. r0 + side,
    r0 = w0 + 1, w0 + 1 + side, ... (the first tile of a writer block is its triangle); each pair in
    exactly one tile, writer-major within a tile. A side of L - 1 or more is one part, the unsplit
    job's segments."""
    if side < 1:
        raise ConfigError(f"fan-out: a tile's side must be >= 1 (got {side})")
    L = n_layers
    parts = []
    for w0 in range(0, L - 1, side):
        for r0 in range(w0 + 1, L, side):
            seg = [(w, max(w + 1, r0), min(r0 + side, L)) for w in range(w0, min(w0 + side, L - 1))
                   if max(w + 1, r0) < min(r0 + side, L)]
            if seg:
                parts.append(seg)
    return parts


def part_layers(part) -> tuple[int, int, int]:
    """(pairs, writer layers, reader layers) of a part."""
    return (n_pairs(part), len({w for w, _, _ in part}), len({r for _, r0, r1 in part for r in range(r0, r1)}))


def max_tile_side(job, fields: dict, config: dict) -> int:
    """The largest tile side whose tiles' cost (the job's part_seconds, SAFETY included) stays under
    the ceiling, bounded by a full tile's (side^2 pairs, side writer and side reader layers), and at
    most the job's ``max_side`` (what its memory budget holds: pk_null_cross's two sides of one
    projector-Gram call); at least 1."""
    L = fields["n_layers"]
    ceiling = max_job_minutes(config) * 60
    all_pairs = L * (L - 1) // 2
    limit = job.max_side(fields, config) if job.max_side is not None else None
    side = 1
    for s in range(2, max(L, 2) if limit is None else min(max(L, 2), limit + 1)):
        k = min(s, L - 1)
        if costs.SAFETY * job.part_seconds(fields, config, min(s * s, all_pairs), k, k) > ceiling:
            break
        side = s
    return side


def parts(job, fields: dict, config: dict) -> list[list[tuple[int, int, int]]]:
    """The parts of one model's cross-layer job (fields: the manifest's ``fields``)."""
    if job.fanout == "tiles":
        return tile_parts(fields["n_layers"], max_tile_side(job, fields, config))
    return pair_parts(fields["n_layers"], max_pairs_per_job(job, fields, config), writer_pairs(job, fields, config))


def block_size(job, fields: dict | None, config: dict) -> int:
    """Samples one job of the null ``job`` (a registry Job with ``blocks``) holds under ``config`` (a model's,
    its design resolved): the config's per-job count (methods.nulls.per_job). A fanned-out null job whose
    model's layer pairs all fit one part at that count (a small model: its one part holds the whole
    triangle) holds more, up to ``pk.nulls.samples_per_job`` and the samples there are, as many as keep the
    part's cost (SAFETY included) within the least a job asks for (costs.MIN_RUNTIME) and the ceiling: such
    a job then asks for no more time than one of a single sample. The parts stay those of the per-job count
    and each sample's draws are seeded by its own names, so no value changes: the samples only share what a
    job pays once (starting up, reading each layer, the draws' preparations such as the rotation null's LQ
    factors). ``fields``: the model's shape, needed by a fanned-out job."""
    from headgeom.methods.nulls import per_job

    nulls = config["pk"]["nulls"]
    size = per_job(nulls, job.blocks)
    if job.fanout != "tiles":  # the only fanned-out null job (pk_null_cross) is laid out in tiles
        return size
    if fields is None:
        raise ValueError(f"fan-out: {job.name}'s samples a job follow from the model's shape (fields)")
    most = min(max(size, int(nulls["samples_per_job"])), int(nulls[f"{job.blocks}_samples"]))
    if most <= size or len(parts(job, fields, config)) != 1:
        return size
    ceiling = min(costs.MIN_RUNTIME, max_job_minutes(config))

    def fits(k: int) -> bool:  # the job's expected work on its cores (SAFETY included); its one part is the whole job
        return job.cost(fields, config, samples=k)["work_min"] <= ceiling

    if fits(most):  # a small model: one price, not one per sample
        return most
    while size + 1 < most and fits(size + 1):  # the work grows with the samples: the first that does not fit ends it
        size += 1
    return size


def part(job, fields: dict, config: dict, index: int) -> list[tuple[int, int, int]]:
    ps = parts(job, fields, config)
    if not 0 <= index < len(ps):
        raise ConfigError(f"fan-out: {job.name} has parts 0..{len(ps) - 1} for this model, not {index}")
    return ps[index]
