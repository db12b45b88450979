"""``headgeom verify --recompute K`` (headgeom.verify.spot_check): a shard rewritten with its
content record recomputed passes every record check, and a sample of shards recomputed from the
tensors that includes it finds it; the sample is the one its printed seed draws; the detection
probability the docs state (K/N for one shard) is the hypergeometric one."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from headgeom.cli import main as cli
from headgeom.io.shards import shard_problems, write_shard
from headgeom.verify import spot_check as S
from auditrun import SHARDS, audit_results

PAIRS = [p.replace("paper1_heads", "paper1_pairs") for p in SHARDS]
REWRITTEN = SHARDS[1]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return audit_results(tmp_path_factory.mktemp("spot"))


def rewrite_consistently(path) -> None:
    """Change one value of P and write the shard as a job writes one: a content record of its own."""
    t = pq.read_table(path)
    cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}
    P = cols["P"].copy()
    P[2] = P[2] * 0.9 + 0.01
    write_shard(path, {**cols, "P": P}, json.loads(t.schema.metadata[b"headgeom"]))


@pytest.fixture
def rewritten(workdir, tmp_path):
    w = tmp_path / "w"
    shutil.copytree(workdir / "results", w / "results")
    rewrite_consistently(w / REWRITTEN)
    return w


def seeds_drawing(paths, k, inside: bool, want: str) -> int:
    """A seed whose sample of k holds ``want`` (inside) or not."""
    return next(s for s in range(10_000) if (want in S.draw(paths, k, s)) == inside)


def test_population_is_every_shard_of_a_known_family(workdir):
    assert S.population(workdir) == sorted(SHARDS + PAIRS)


def test_a_consistent_rewrite_passes_the_records_and_is_found_by_recomputation(rewritten, capsys):
    assert shard_problems(rewritten / REWRITTEN) == []  # the record was recomputed: records cannot see it
    # the tree holds only these shards, so the default config's other files are reported missing;
    # no shard is reported damaged: the rewritten one passes every record check
    cli(["verify", "-d", str(rewritten)])
    err = capsys.readouterr().err
    assert "missing: " in err and "damaged: " not in err and REWRITTEN not in err, err
    assert cli(["verify", "-d", str(rewritten), "--recompute", "4"]) == 1
    out = capsys.readouterr()
    bad = [ln for ln in out.err.splitlines() if ln.startswith("recomputed: ")]
    assert len(bad) == 1 and bad[0].startswith(f"recomputed: {REWRITTEN}: differs: column 'P': 1 of 4 values differ"), out.err
    assert "rebuild: snakemake -c2" in bad[0]
    assert "4 of 4 shards recomputed from the tensors" in out.out and "1 differs, 3 match" in out.out, out.out
    # progress: one line per shard, "shard k of n", on stderr
    progress = [ln for ln in out.err.splitlines() if ln.startswith("shard ")]
    assert [ln.split(":")[0] for ln in progress] == [f"shard {k} of 4" for k in range(1, 5)]


def test_the_printed_seed_draws_the_same_sample(rewritten, capsys):
    pop = S.population(rewritten)
    hit, miss = seeds_drawing(pop, 1, True, REWRITTEN), seeds_drawing(pop, 1, False, REWRITTEN)
    assert cli(["verify", "-d", str(rewritten), "--recompute", "1", "--seed", str(hit)]) == 1
    out = capsys.readouterr()
    assert f"(seed {hit})" in out.out and f"--recompute 1 --seed {hit}" in out.out
    assert f"shard 1 of 1: {REWRITTEN}: differs" in out.err
    # (exit 1 either way here: the tree lacks the default config's other files, which verify lists)
    cli(["verify", "-d", str(rewritten), "--recompute", "1", "--seed", str(miss)])
    out = capsys.readouterr()
    assert "1 match" in out.out and "probability 1/4 = 25.0 %" in out.out, out.out
    assert not [ln for ln in out.err.splitlines() if ln.startswith("recomputed: ")], out.err
    # no seed given: a fresh one is printed, and it draws that sample again
    cli(["verify", "-d", str(rewritten), "--recompute", "25%"])
    first = capsys.readouterr()
    seed = int(first.out.split("(seed ")[1].split(")")[0])
    drawn = [ln.split(": ")[1] for ln in first.err.splitlines() if ln.startswith("shard ")]
    assert drawn == S.draw(pop, 1, seed)
    cli(["verify", "-d", str(rewritten), "--recompute", "25%", "--seed", str(seed)])
    again = capsys.readouterr()
    assert [ln.split(": ")[1] for ln in again.err.splitlines() if ln.startswith("shard ")] == drawn


def test_an_intact_run_recomputes_to_its_stored_values(workdir, capsys):
    cli(["verify", "-d", str(workdir), "--recompute", "1.0"])
    out = capsys.readouterr()
    assert "4 of 4 shards recomputed from the tensors" in out.out and ": 4 match" in out.out, out.out
    assert not [ln for ln in out.err.splitlines() if ln.startswith("recomputed: ")], out.err


def test_a_damaged_shard_in_the_sample_is_named_damaged(workdir, tmp_path):
    w = tmp_path / "w"
    shutil.copytree(workdir / "results", w / "results")
    b = bytearray((w / PAIRS[0]).read_bytes())
    b[len(b) // 4] ^= 0x10
    (w / PAIRS[0]).write_bytes(bytes(b))
    res = S.spot_check(w, "4", seed=0)
    assert [(f.path, f.status) for f in res.problems] == [(PAIRS[0], "damaged")]


def test_sample_sizes():
    assert [S.sample_size(s, 54) for s in ("5", "0", "100", "0.1", "10%", "1.0", "0.001")] == [5, 0, 54, 6, 6, 54, 1]
    for bad in ("-1", "1.5", "abc", "0%", "nan"):
        with pytest.raises(ValueError):
            S.sample_size(bad, 54)


def test_draws_are_uniform_and_without_replacement():
    paths = [f"s{i}" for i in range(12)]
    counts = dict.fromkeys(paths, 0)
    for seed in range(3000):
        d = S.draw(paths, 3, seed)
        assert len(set(d)) == 3
        for p in d:
            counts[p] += 1
    # each shard is drawn with probability 3/12: 750 of 3000 (binomial sd ~24)
    assert all(abs(c - 750) < 100 for c in counts.values()), counts


@pytest.mark.parametrize("n,k,m", [(10, 3, 1), (10, 3, 2), (8, 5, 3), (9, 0, 1), (7, 7, 1), (6, 4, 0)])
def test_detection_probability_is_the_fraction_of_samples_holding_a_rewritten_shard(n, k, m):
    samples = list(itertools.combinations(range(n), k))
    hits = sum(any(i < m for i in s) for s in samples)  # shards 0..m-1 are the rewritten ones
    assert S.detection_probability(n, k, m) == pytest.approx(hits / len(samples), abs=1e-15)
    if m == 1:
        assert S.detection_probability(n, k) == pytest.approx(k / n)


def test_tolerance_is_relative_and_exact_for_integers():
    a = np.array([1.0, 1e-300, np.nan, np.inf, 0.0])
    assert S.column_matches(a, a * (1 + 1e-13)).tolist() == [True, True, True, True, True]
    assert S.column_matches(a, a * (1 + 1e-11)).tolist() == [False, False, True, True, True]
    assert S.column_matches(np.array([1, 2]), np.array([1, 3])).tolist() == [True, False]
    assert S.column_matches(np.array(["a", "b"], dtype=object), np.array(["a", "c"], dtype=object)).tolist() == \
        [True, False]
