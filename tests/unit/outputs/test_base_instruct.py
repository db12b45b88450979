"""PK §5.5 base vs instruct per pair (issue 13 item 2) on a planted pair whose answer is known
by construction: the instruct checkpoint is the base with
  layer 0: head 1's writing space turned by a Givens rotation of the residual stream (ρ of the
           pairs with head 1 change by an amount computed here from explicit projectors; every
           other pair is unchanged bit for bit),
  layer 1: head 2's W_O right-multiplied by an orthogonal d_head x d_head matrix (same span:
           every ρ unchanged, although the o_proj tensor differs),
  layer 2: untouched (o_proj identical)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from headgeom.io.fetch import fetch_model
from headgeom.io.shards import read_shards
from headgeom.jobs.pk_paper import pk_job
from headgeom.outputs.pk.base_instruct import pk_sec5_5_base_instruct_pairs as table_pairs
from synth import write_llama

H, DH, D, L = 4, 6, 24, 3
THETA = 0.7


def _rho_explicit(WO, i, j):
    """ρ of heads i, j from explicit D x D projectors (independent of headgeom.methods.overlap)."""
    A, B = WO[:, i * DH:(i + 1) * DH], WO[:, j * DH:(j + 1) * DH]
    Pa, Pb = A @ np.linalg.pinv(A), B @ np.linalg.pinv(B)
    return float(np.trace(Pa @ Pb)) / DH


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    w = tmp_path_factory.mktemp("bi")
    write_llama(w / "base", d_model=D, n_heads=H, n_kv=2, d_head=DH, n_layers=L, closed=(), seed=3, dtype=np.float64)
    (w / "inst").mkdir()
    t = load_file(str(w / "base" / "model.safetensors"))
    G = np.eye(D)
    c, s = np.cos(THETA), np.sin(THETA)
    G[[0, 0, 1, 1], [0, 1, 0, 1]] = [c, -s, s, c]
    R = np.linalg.qr(np.random.default_rng(5).standard_normal((DH, DH)))[0]
    W0 = t["model.layers.0.self_attn.o_proj.weight"].copy()
    W0[:, DH:2 * DH] = G @ W0[:, DH:2 * DH]
    W1 = t["model.layers.1.self_attn.o_proj.weight"].copy()
    W1[:, 2 * DH:3 * DH] = W1[:, 2 * DH:3 * DH] @ R
    t2 = dict(t, **{"model.layers.0.self_attn.o_proj.weight": W0, "model.layers.1.self_attn.o_proj.weight": W1})
    save_file({k: np.ascontiguousarray(v) for k, v in t2.items()}, str(w / "inst" / "model.safetensors"),
              metadata={"format": "pt"})
    (w / "inst" / "config.json").write_text((w / "base" / "config.json").read_text())
    paths = []
    for m in ("base", "inst"):
        fetch_model(m, {"source": "local", "path": str(w / m)}, w / "store" / m, log=lambda *_: None)
        for layer in range(L):
            out = w / "shards" / m / f"layer{layer}.parquet"
            out.parent.mkdir(parents=True, exist_ok=True)
            pk_job(w / "store" / m, layer, out, {"kinds": ["O"], "rank_rtol": 1e-6}, log=lambda *_: None)
            paths.append(out)
    cols, provs = read_shards(paths)
    return {"pk_within": cols, "_provs": {"pk_within": provs}}, t, t2


def test_planted_pair_known_differences(planted):
    data, t, t2 = planted
    table = table_pairs(data, [("base", "inst")])
    rows = {r["layer"]: r for r in table.rows}
    assert set(rows) == {0, 1, 2, "all"}
    n = H * (H - 1) // 2
    assert [rows[l]["pairs"] for l in (0, 1, 2)] == [n, n, n] and rows["all"]["pairs"] == L * n

    # layer 0: the expected differences from explicit projectors on the raw weights
    Wb, Wi = t["model.layers.0.self_attn.o_proj.weight"], t2["model.layers.0.self_attn.o_proj.weight"]
    exp = {(i, j): (_rho_explicit(Wb, i, j), _rho_explicit(Wi, i, j)) for i, j in combinations(range(H), 2)}
    d = {k: abs(b - a) for k, (a, b) in exp.items()}
    rel = {k: abs(b - a) / a * 100 for k, (a, b) in exp.items()}
    assert all(d[k] == 0 or 1 in k for k in d) and max(d.values()) > 1e-3  # only pairs with head 1 move
    kmax = max(d, key=d.get)
    assert rows[0]["max_abs"] == pytest.approx(d[kmax], rel=1e-8)
    assert rows[0]["max_abs_at"] == f"L0 h{kmax[0]}-h{kmax[1]}"
    assert rows[0]["max_rel"] == pytest.approx(max(rel.values()), rel=1e-8)
    assert rows[0]["median_abs"] == pytest.approx(np.median(list(d.values())), rel=1e-8, abs=1e-15)

    # layer 1: rotation inside the head's own span: ρ unchanged, o_proj differs
    assert rows[1]["max_abs"] < 1e-12 and rows[1]["o_proj_differ"] == "1 / 1"
    # layer 2: untouched
    assert rows[2]["max_abs"] == 0.0 and rows[2]["o_proj_differ"] == "0 / 1"
    # over all layers: the maxima are layer 0's; per-layer medians' range and median
    assert rows["all"]["max_abs"] == rows[0]["max_abs"] and rows["all"]["o_proj_differ"] == "2 / 3"
    meds = [rows[l]["median_abs"] for l in (0, 1, 2)]
    assert rows["all"]["median_layer_median"] == pytest.approx(np.median(meds), abs=1e-18)
    assert rows["all"]["median_abs"] == pytest.approx(np.median(list(d.values()) + [0.0] * (2 * n)), abs=1e-12)


def test_no_pair_gives_a_note(planted):
    data, _, _ = planted
    assert table_pairs(data, []).notes.startswith("No base/instruct pair")
    assert table_pairs(data, [("base", "nosuch")]).rows == []
