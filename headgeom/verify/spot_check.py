"""``headgeom verify --recompute K``: a seeded random sample of a run's shards recomputed from the
tensors and compared with the stored values.

A content record (headgeom.io.shards) says that a shard's bytes are the bytes its job wrote; it
cannot say that the job wrote the right numbers. A shard rewritten with its record recomputed, or
computed wrong by a silent hardware fault, passes every record check; only recomputing it shows
it. Recomputing every shard costs a whole run, so this recomputes a sample:

* the population is every shard of a known family under ``results/shards`` (``population``);
* ``K`` shards are drawn uniformly without replacement with a seed that is printed
  (``draw``): the same seed over the same shards draws the same sample; ``K`` may be a count or
  a fraction of the population (``sample_size``);
* each drawn shard is checked against its own record, then recomputed from the tensor store by
  its family's job with the params its provenance records (the audit's
  ``headgeom.verify.audit.recompute_shards``), and its columns are compared with the stored ones
  (``compare_columns``): rows matched by their key columns, integers, booleans and strings
  exactly, floats equal or within ``RTOL`` relative (the audit's tolerance; NaN = NaN).

A single rewritten shard among ``N`` is in a sample of ``K`` with probability ``K/N``
(hypergeometric); ``m`` of them are found (at least one) with probability
``1 - C(N-m, K) / C(N, K)`` (``detection_probability``)."""

from __future__ import annotations

import math
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headgeom import layout
from headgeom.verify.audit.read import RTOL

# ------------------------------------------------------------------ the sample


def population(workdir: Path) -> list[str]:
    """Every shard of a known family under results/shards (relative paths, sorted); a killed job's
    temporary file (``.<name>.tmp-*``) is not a shard."""
    from headgeom.schedule.families import family_of

    root = Path(workdir) / layout.SHARDS_ROOT
    out = []
    for p in sorted(root.rglob("*.parquet")):
        rel = p.relative_to(workdir).as_posix()
        if p.name.startswith("."):
            continue
        try:
            family_of(rel)
        except KeyError:
            continue
        out.append(rel)
    return out


def sample_size(spec: str, n: int) -> int:
    """The number of shards ``spec`` asks for out of ``n``: a count (``5``), a fraction
    (``0.1``) or a percentage (``10%``) of them, at least one for a positive fraction, at most ``n``.
    ValueError for anything else."""
    s = str(spec).strip()
    try:
        if s.endswith("%"):
            frac = float(s[:-1]) / 100
        elif s.isdigit():
            return min(int(s), n)
        else:
            frac = float(s)
    except ValueError:
        raise ValueError(f"--recompute takes a count (5), a fraction (0.1) or a percentage (10%), not {spec!r}") \
            from None
    if not 0 < frac <= 1 or math.isnan(frac):
        raise ValueError(f"--recompute {spec}: a fraction must be in (0, 1] (a percentage in (0, 100])")
    return min(n, max(1, math.ceil(frac * n)))


def draw(paths: list[str], k: int, seed: int) -> list[str]:
    """``k`` of ``paths`` drawn uniformly without replacement by ``seed``, in the order drawn."""
    order = np.random.default_rng(seed).permutation(len(paths))[:k]
    return [paths[i] for i in order]


def new_seed() -> int:
    """A fresh seed for a sample nobody chose (printed, so that the sample can be drawn again)."""
    return secrets.randbelow(2 ** 32)


def detection_probability(n: int, k: int, m: int = 1) -> float:
    """The probability that a uniform sample of ``k`` of ``n`` shards holds at least one of ``m``
    rewritten ones: 1 - C(n-m, k) / C(n, k) (``k/n`` for one)."""
    if m <= 0 or k <= 0:
        return 0.0
    if k > n - m:
        return 1.0
    return 1.0 - math.comb(n - m, k) / math.comb(n, k)


# ------------------------------------------------------------------ comparing a shard


def _same_value(a, b, rtol: float) -> bool:
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        if a is None or b is None:
            return a is b
        a, b = list(a), list(b)
        return len(a) == len(b) and all(_same_value(x, y, rtol) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return bool(_close(np.array([a]), np.array([b]), rtol)[0])
    return type(a) is type(b) and a == b


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    """Per value: equal, both NaN, or finite and within ``rtol`` of the larger magnitude."""
    with np.errstate(invalid="ignore", over="ignore"):
        near = np.abs(a - b) <= rtol * np.maximum(np.abs(a), np.abs(b))
    return (a == b) | (np.isnan(a) & np.isnan(b)) | (np.isfinite(a) & np.isfinite(b) & near)


def column_matches(stored: np.ndarray, recomputed: np.ndarray, rtol: float = RTOL) -> np.ndarray:
    """Per row, whether the recomputed value matches the stored one (see the module docstring)."""
    if stored.dtype.kind == "f" and recomputed.dtype.kind == "f":
        return _close(stored.astype(np.float64), recomputed.astype(np.float64), rtol)
    if stored.dtype.kind in "iub" and stored.dtype == recomputed.dtype:
        return stored == recomputed
    return np.array([_same_value(x, y, rtol) for x, y in zip(stored.tolist(), recomputed.tolist())], dtype=bool)


def _plain(v):
    """A numpy scalar as the Python value it holds (printed as a number, not as np.float64(...))."""
    return v.item() if isinstance(v, np.generic) else v


def compare_columns(stored: dict, recomputed: dict, rtol: float = RTOL) -> list[str]:
    """What differs between a stored shard's columns and its recomputation, one line per column
    (rows matched by their key columns, in stored order where the keys repeat); [] when they match."""
    from headgeom.verify.diff import KEYS, _order

    out = [f"column {c!r} only {'stored' if c in stored else 'recomputed'}"
           for c in sorted(set(stored) ^ set(recomputed))]
    ns, nr = (len(next(iter(t.values()))) if t else 0 for t in (stored, recomputed))
    if ns != nr:
        return out + [f"{ns} rows stored, {nr} recomputed"]
    keys = [k for k in KEYS if k in stored and k in recomputed]
    os_, or_ = _order(stored, keys), _order(recomputed, keys)
    if os_ is None or or_ is None:
        os_ = or_ = np.arange(ns)
    for c in sorted(set(stored) & set(recomputed)):
        a, b = stored[c][os_], recomputed[c][or_]
        bad = np.flatnonzero(~column_matches(a, b, rtol))
        if bad.size:
            i = bad[0]
            out.append(f"column {c!r}: {bad.size} of {ns} values differ (first: stored {_plain(a[i])!r}, "
                       f"recomputed {_plain(b[i])!r})")
    return out


# ------------------------------------------------------------------ the spot check


@dataclass
class Finding:
    """One drawn shard: ``status`` "match", "differs", "damaged" or "not recomputed", with what was found."""
    path: str
    status: str
    lines: list = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class SpotCheck:
    seed: int
    population: int
    findings: list = field(default_factory=list)

    @property
    def sampled(self) -> int:
        return len(self.findings)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.status != "match"]


def check_shard(workdir: Path, rel: str, tmp: Path, rtol: float = RTOL) -> Finding:
    """One shard: its record, then its recomputation from the tensors against its stored columns."""
    from headgeom.io.shards import read_shard, shard_check
    from headgeom.verify.audit import recompute_shards
    from headgeom.verify.diff import read_columns

    t0 = time.perf_counter()
    f = Path(workdir) / rel
    damage, _ = shard_check(f)
    if damage:
        return Finding(rel, "damaged", list(damage), time.perf_counter() - t0)
    _, prov = read_shard(f, verified=True)
    out_root = tmp / f"recomputed-{abs(hash(rel))}"
    try:
        recompute_shards([rel], {rel: prov}, Path(workdir), out_root)
        lines = compare_columns(read_columns(f), read_columns(out_root / rel), rtol)
    except Exception as e:  # noqa: BLE001 - a shard whose job cannot run again is itself a finding
        return Finding(rel, "not recomputed", [f"{type(e).__name__}: {e}"], time.perf_counter() - t0)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    return Finding(rel, "differs" if lines else "match", lines, time.perf_counter() - t0)


def spot_check(workdir, spec: str, seed: int | None = None, progress=None, rtol: float = RTOL) -> SpotCheck:
    """Draw ``spec`` shards (a count, fraction or percentage) of the run in ``workdir`` by ``seed``
    (a fresh one when None) and recompute each; ``progress`` is called with a line as each is done
    ("shard k of n: ..."). ValueError for a ``spec`` that is not a size."""
    workdir = Path(workdir).resolve()
    paths = population(workdir)
    k = sample_size(spec, len(paths))
    seed = new_seed() if seed is None else int(seed)
    res = SpotCheck(seed, len(paths))
    drawn = draw(paths, k, seed)
    if progress:
        progress(f"recomputing {k} of {len(paths)} shards from the tensors (seed {seed})")
    with tempfile.TemporaryDirectory(prefix="headgeom-spot-check-") as tmp:
        for i, rel in enumerate(drawn, 1):
            found = check_shard(workdir, rel, Path(tmp), rtol)
            res.findings.append(found)
            if progress:
                progress(f"shard {i} of {k}: {rel}: {found.status} ({found.seconds:.1f} s)")
    return res


def render(res: SpotCheck, spec: str, seconds: float) -> tuple[list[str], list[str]]:
    """(the summary lines, one line per problem) of a spot check."""
    from headgeom.io.shards import rebuild_hint

    n, k = res.population, res.sampled
    problems = [f"{f.path}: {f.status}: {'; '.join(f.lines)}; rebuild: {rebuild_hint(f.path)}" for f in res.problems]
    counts = {}
    for f in res.findings:
        counts[f.status] = counts.get(f.status, 0) + 1
    summary = [
        f"headgeom verify --recompute {spec}: {k} of {n} shards recomputed from the tensors in {seconds:.1f} s "
        f"(seed {res.seed}): " + ", ".join(f"{v} {s}" for s, v in sorted(counts.items())) if k else
        f"headgeom verify --recompute {spec}: no shards under {layout.SHARDS_ROOT} to recompute",
    ]
    if k:
        summary.append(f"  the same sample again: headgeom verify --recompute {spec} --seed {res.seed}")
        summary.append(f"  one consistently rewritten shard among {n} is in a sample of {k} with probability "
                       f"{k}/{n} = {100 * detection_probability(n, k):.1f} %")
    return summary, problems
