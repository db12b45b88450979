"""The per-layer PK tables (headgeom.outputs.pk) against numpy/scipy on the raw shard values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from headgeom.outputs.pk import cross_layer
from headgeom.outputs.pk import nulls
from headgeom.outputs.pk import self_overlap
from headgeom.outputs.pk import within_layer

D, d = 64, 8
FIELDS = {"m": {"d_head": d, "d_model": D}}
TYPES = ("rotation", "reassign")


def _data(seed=0, n_layers=4, H=4, n_samples=5):
    rng = np.random.default_rng(seed)
    pk = {c: [] for c in ("model", "layer", "kind", "rho", "min_angle_deg")}
    for layer in range(n_layers):
        for kind in ("O", "Q"):
            for _ in range(H * (H - 1) // 2):
                pk["model"].append("m"), pk["layer"].append(layer), pk["kind"].append(kind)
                hi = 0.18 if (kind, layer) in (("Q", 0), ("Q", 1)) else 0.4  # two layers' mean below d/D
                pk["rho"].append(rng.uniform(0.05, hi)), pk["min_angle_deg"].append(rng.uniform(5, 60))
    cross = {c: [] for c in ("model", "layer", "layer_r", "kind", "head_w", "head_r", "rho", "min_angle_deg",
                             "weighted", "lambda_min_S")}
    for lw in range(n_layers):
        for lr in range(lw + 1, n_layers):
            for kind in ("Q", "V"):
                for hw in range(H):
                    for hr in range(H):
                        for c, v in (("model", "m"), ("layer", lw), ("layer_r", lr), ("kind", kind), ("head_w", hw),
                                     ("head_r", hr), ("rho", rng.uniform(0.05, 0.3)),
                                     ("min_angle_deg", rng.uniform(10, 70)), ("weighted", rng.gamma(2.0)),
                                     ("lambda_min_S", 1e-8)):
                            cross[c].append(v)
    nw = {c: [] for c in ("model", "layer", "kind", "null", "sample", "mean", "sd", "min_angle_deg")}
    for layer in range(n_layers):
        for kind in ("O", "Q"):
            for t in TYPES:
                for s in range(n_samples):
                    for c, v in (("model", "m"), ("layer", layer), ("kind", kind), ("null", t), ("sample", s),
                                 ("mean", rng.uniform(0.1, 0.3)), ("sd", rng.uniform(0.06, 0.14)),
                                 ("min_angle_deg", rng.uniform(5, 60))):
                        nw[c].append(v)
    nc = {c: [] for c in ("model", "layer_w", "layer_r", "kind", "null", "sample", "mean", "sd", "min_angle_deg")}
    for lw in range(n_layers):
        for lr in range(lw + 1, n_layers):
            for kind in ("Q", "V"):
                for t in TYPES:
                    for s in range(n_samples):
                        for c, v in (("model", "m"), ("layer_w", lw), ("layer_r", lr), ("kind", kind), ("null", t),
                                     ("sample", s), ("mean", rng.uniform(0.1, 0.2)), ("sd", rng.uniform(0.05, 0.1)),
                                     ("min_angle_deg", rng.uniform(10, 70))):
                            nc[c].append(v)
    self_ = {"model": ["m"] * 6, "layer": [0, 0, 1, 1, 2, 2], "test": ["V_vs_O", "Q_vs_K"] * 3,
             "observed": rng.uniform(0, 1, 6), "null_mean": rng.uniform(0, 1, 6), "p": rng.uniform(0, 1, 6),
             "n_null": [100] * 6, "exact": [False] * 6}
    arr = lambda x: {k: np.asarray(v) for k, v in x.items()}
    return {"pk_within": arr(pk), "pk_cross": arr(cross), "pk_null_within": arr(nw), "pk_null_cross": arr(nc),
            "pk_self": arr(self_)}


@pytest.fixture(scope="module")
def data():
    return _data()


def _sel(cols, **eq):
    m = np.ones(len(next(iter(cols.values()))), bool)
    for k, v in eq.items():
        m &= cols[k] == v
    return m


def test_null_samples_against_numpy(data):
    t = nulls.pk_sec5_3_null_samples(data, FIELDS, ["m"], TYPES)
    assert len(t.rows) == 4 * 2 * 2 + 6 * 2 * 2
    for r in t.rows:
        if r["scope"] == "within":
            obs = _sel(data["pk_within"], layer=r["layer"], kind=r["kind"])
            rho, ang = data["pk_within"]["rho"][obs], data["pk_within"]["min_angle_deg"][obs]
            nm = _sel(data["pk_null_within"], layer=r["layer"], kind=r["kind"], null=r["null"])
            nl = data["pk_null_within"]
        else:
            obs = _sel(data["pk_cross"], layer=r["layer"], layer_r=r["layer_r"], kind=r["kind"])
            rho, ang = data["pk_cross"]["rho"][obs], data["pk_cross"]["min_angle_deg"][obs]
            nm = _sel(data["pk_null_cross"], layer_w=r["layer"], layer_r=r["layer_r"], kind=r["kind"], null=r["null"])
            nl = data["pk_null_cross"]
        sd, mean, mang = nl["sd"][nm], nl["mean"][nm], nl["min_angle_deg"][nm]
        desc = stats.describe(sd)
        obs_sd = np.sqrt(stats.describe(rho).variance * (rho.size - 1) / rho.size)  # ddof 0
        assert r["n_samples"] == desc.nobs == 5
        assert r["obs_sd"] == pytest.approx(obs_sd, rel=1e-12)
        assert (r["sd_min"], r["sd_max"]) == pytest.approx(desc.minmax, rel=1e-12)
        assert r["sd_mean"] == pytest.approx(desc.mean, rel=1e-12)
        assert r["sd_over_null_mean_sd"] == pytest.approx(obs_sd / desc.mean, rel=1e-12)
        assert r["sd_above_all"] == bool(obs_sd > sd.max())
        assert r["obs_mean"] == pytest.approx(rho.mean(), rel=1e-12)
        assert (r["mean_min"], r["mean_mean"], r["mean_max"]) == pytest.approx((mean.min(), mean.mean(), mean.max()), rel=1e-12)
        assert r["obs_min_angle"] == pytest.approx(ang.min(), rel=1e-12)
        assert (r["min_angle_min"], r["min_angle_max"]) == pytest.approx((mang.min(), mang.max()), rel=1e-12)
        assert r["angle_below_all"] == bool(ang.min() < mang.min())
        assert r["angle_above_all"] == bool(ang.min() > mang.max())


def test_layer_stats_against_numpy(data):
    t = cross_layer.pk_appendix_f_layer_stats(data, FIELDS, ["m"])
    iso = d / D
    iso_sd = np.sqrt(2 * (D - d) ** 2 / (D**2 * (D - 1) * (D + 2)))
    assert len(t.rows) == 4 * 2 + 6 * 2
    for r in t.rows:
        src = data["pk_within"] if r["scope"] == "within" else data["pk_cross"]
        keys = dict(layer=r["layer"], kind=r["kind"]) | ({} if r["scope"] == "within" else dict(layer_r=r["layer_r"]))
        s = _sel(src, **keys)
        rho = src["rho"][s]
        assert r["n_pairs"] == s.sum()
        assert r["mean_over_iso"] == pytest.approx(rho.mean() / iso, rel=1e-12)
        assert r["sd_over_random"] == pytest.approx(np.std(rho) / iso_sd, rel=1e-12)
        assert r["mean_min_angle"] == pytest.approx(np.mean(src["min_angle_deg"][s]), rel=1e-12)
        assert r["median_min_angle"] == pytest.approx(np.median(src["min_angle_deg"][s]), rel=1e-12)
        assert r["below_iso"] == bool(rho.mean() < iso)
        assert r["sds_below_iso"] == pytest.approx((iso - rho.mean()) / iso_sd, rel=1e-12)
        # the SD's rank among the rows of that scope and kind, by counting the larger SDs
        peers = [q["sd"] for q in t.rows if (q["scope"], q["kind"]) == (r["scope"], r["kind"])]
        assert r["sd_rank"] == 1 + sum(x > r["sd"] for x in peers)
        # the smallest pair minimum angle, its rank (1: the smallest) and the lowest-10 % mark
        assert r["min_angle"] == np.min(src["min_angle_deg"][s])
        angles = [q["min_angle"] for q in t.rows if (q["scope"], q["kind"]) == (r["scope"], r["kind"])]
        assert r["min_angle_rank"] == 1 + sum(x < r["min_angle"] for x in angles)
        assert r["min_angle_low"] == (r["min_angle_rank"] <= int(np.ceil(0.1 * len(angles))))
        assert r["from_end"] == (3 - r["layer"] if r["scope"] == "within" else None)
        assert r["max_rho"] == np.max(rho)
        if r["scope"] == "cross":
            w = src["weighted"][s]
            assert r["distance"] == r["layer_r"] - r["layer"]
            assert r["mean_weighted"] == pytest.approx(w.mean(), rel=1e-12)
            assert r["median_weighted"] == pytest.approx(np.median(w), rel=1e-12)
            assert r["max_weighted"] == np.max(w)
        else:
            assert r["distance"] is None and r["mean_weighted"] is None and r["max_weighted"] is None


def test_cross_distance_against_numpy(data):
    t = cross_layer.pk_appendix_f_cross_distance(data, FIELDS, ["m"], TYPES)
    c, nc = data["pk_cross"], data["pk_null_cross"]
    assert {(r["kind"], r["distance"]) for r in t.rows} == {(k, g) for k in ("Q", "V") for g in (1, 2, 3)}
    for r in t.rows:
        pairs = [(lw, lw + r["distance"]) for lw in range(4 - r["distance"])]
        means, below, above = [], 0, 0
        for lw, lr in pairs:
            m = c["rho"][_sel(c, layer=lw, layer_r=lr, kind=r["kind"])].mean()
            null_means = nc["mean"][_sel(nc, layer_w=lw, layer_r=lr, kind=r["kind"])]  # both nulls
            means.append(m)
            below += m < null_means.min()
            above += m > null_means.max()
        assert r["layer_pairs"] == len(pairs) and r["with_nulls"] == len(pairs)
        assert r["mean_rho"] == pytest.approx(np.mean(means), rel=1e-12)
        assert r["mean_over_iso"] == pytest.approx(np.mean(means) / (d / D), rel=1e-12)
        assert r["below_iso"] == bool(np.mean(means) < d / D)
        assert r["abs_dev_iso"] == pytest.approx(abs(np.mean(means) - d / D), rel=1e-12)
        assert (r["mean_below_all"], r["mean_above_all"]) == (below, above)
        assert r["below_frac"] == f"{below}/{len(pairs)}" and r["above_frac"] == f"{above}/{len(pairs)}"
        # within ±0.01 of d/D for every kind at this and every larger distance, by brute force
        dev = [abs(np.mean([c["rho"][_sel(c, layer=lw, layer_r=lw + g, kind=k)].mean() for lw in range(4 - g)]) - d / D)
               for k in ("Q", "V") for g in range(r["distance"], 4)]
        assert r["in_band_onward"] == (max(dev) < 0.01)


def test_self_layers_rows_are_the_shard_rows(data):
    t = self_overlap.pk_appendix_h_self_layers(data, ["m"])
    s = data["pk_self"]
    assert len(t.rows) == 6
    for r in t.rows:
        i = int(np.where(_sel(s, layer=r["layer"], test=r["test"]))[0][0])
        assert (r["observed"], r["null_mean"], r["p"]) == (s["observed"][i], s["null_mean"][i], s["p"][i])
        assert r["at_min_p"] == (s["p"][i] == 1 / (s["n_null"][i] + 1))


def test_self_layers_mark_the_smallest_attainable_p():
    """p = (k+1)/(n+1): 1/24 with 23 permutations is the floor (marked), 2/24 is not; 1/101 with 100."""
    s = {"model": np.array(["m"] * 3), "layer": np.array([0, 1, 2]), "test": np.array(["V_vs_O"] * 3),
         "observed": np.ones(3), "null_mean": np.zeros(3), "p": np.array([1 / 24, 2 / 24, 1 / 101]),
         "n_null": np.array([23, 23, 100]), "exact": np.array([True, True, False])}
    t = self_overlap.pk_appendix_h_self_layers({"pk_self": s}, ["m"])
    assert [r["at_min_p"] for r in t.rows] == [True, False, True]


def test_the_data_exercises_both_sides_of_every_comparison(data):
    """The synthetic shards put observed values on both sides of the null samples, so a reversed
    or loosened comparison changes some row."""
    t = nulls.pk_sec5_3_null_samples(data, FIELDS, ["m"], TYPES)
    for col in ("sd_above_all", "angle_below_all", "angle_above_all"):
        assert {r[col] for r in t.rows} == {True, False}, col
    ls = cross_layer.pk_appendix_f_layer_stats(data, FIELDS, ["m"])
    assert {r["below_iso"] for r in ls.rows} == {True, False}


NEW_READS = ("pk.s52.typical.rho_qwen", "pk.s52.typical.angle", "pk.s55.qwen7b.V_low_ratio.layers",
             "pk.s55.qwen7b.V_low_ratio.ratio", "pk.s55.qwen7b.V_low_ratio.sds", "pk.appE.qwen7b.top5",
             "pk.appF.qwen7b.Q1_meanangle.V_six", "pk.appH.qwen7b.layers.at_min", "pk.appF.distance.qwen_d1",
             "pk.appF.distance.qwen_d1_iso", "pk.appF.distance.qwen_iso_at", "pk.appF.distance.qwen_V_below",
             "pk.appF.distance.qwen_V", "pk.appH.qwen7b.pmin")


def test_ledger_reads_of_the_per_layer_tables_find_their_rows(tmp_path):
    """The ledger's range / count / rank reads over the per-layer tables (config/claims.yaml) get a
    pipeline value from tables the builders wrote, each equal to the numpy reduction of the rows."""
    from pathlib import Path

    from headgeom.publish.claims import build_rows, load_ledger

    m = "qwen2.5-7b"
    data = {}
    for fam, cols in _data(seed=1).items():
        cols = dict(cols, model=np.full(len(cols["model"]), m))
        if fam in ("pk_within", "pk_null_within"):  # within-layer kinds O and V (V below d/D in layers 0, 1)
            cols["kind"] = np.where(cols["kind"] == "Q", "V", cols["kind"])
        if fam == "pk_cross":  # V below d/D from distance 2 on, Q at distance 3
            dist, kind = cols["layer_r"] - cols["layer"], cols["kind"]
            cols["rho"] = cols["rho"] * np.where(((kind == "V") & (dist >= 2)) | ((kind == "Q") & (dist == 3)), 0.5, 1.0)
        data[fam] = cols
    fields = {m: FIELDS["m"]}
    tables = {"pk_appendix_f_layer_stats": cross_layer.pk_appendix_f_layer_stats(data, fields, [m]),
              "pk_appendix_f_cross_distance": cross_layer.pk_appendix_f_cross_distance(data, fields, [m], TYPES),
              "pk_appendix_h_self_layers": self_overlap.pk_appendix_h_self_layers(data, [m]),
              "pk_fig3_fig9_conditions": nulls.pk_fig3_fig9_conditions(data, fields, [m], TYPES)}
    for name, t in tables.items():
        (tmp_path / f"{name}.csv").write_text(t.csv())
    ledger = [e for e in load_ledger(Path(__file__).resolve().parents[3] / "config/claims.yaml")
              if e["id"] in NEW_READS]
    assert {e["id"] for e in ledger} == set(NEW_READS)
    rows = {r["id"]: r for r in build_rows(ledger, tmp_path, [m, "qwen3-235b-a22b", "gpt2-124m"])[0]}
    for i in NEW_READS:
        assert rows[i]["pipeline"] not in ("", None, "–"), (i, rows[i])
    ls = [r for r in tables["pk_appendix_f_layer_stats"].rows if r["scope"] == "within"]
    low = [r for r in ls if r["kind"] == "V" and r["mean"] < d / D]
    assert low and rows["pk.s55.qwen7b.V_low_ratio.layers"]["pipeline"] == str(len(low))
    top = sorted((r for r in ls if r["kind"] == "O"), key=lambda r: -r["sd"])[:5]
    assert rows["pk.appE.qwen7b.top5"]["pipeline"] == ", ".join(str(r["layer"]) for r in top)  # in SD-rank order
    self_v = [r for r in tables["pk_appendix_h_self_layers"].rows if r["test"] == "V_vs_O"]
    assert rows["pk.appH.qwen7b.layers.at_min"]["pipeline"] == f"{sum(r['at_min_p'] for r in self_v)}/{len(self_v)}"
    cd = tables["pk_appendix_f_cross_distance"].rows
    assert [r["distance"] for r in cd if r["kind"] == "V" and r["mean_rho"] < d / D] == [2, 3]
    assert rows["pk.appF.distance.qwen_V_below"]["pipeline"] == "2 – 3"
    assert rows["pk.appF.distance.qwen_iso_at"]["pipeline"] == "3"


def test_wo_spectrum_table_against_numpy():
    rng = np.random.default_rng(3)
    spectra = {0: rng.gamma(2.0, 0.3, 12), 1: rng.gamma(2.0, 0.3, 12)}
    provs = {"pk_within": [{"provenance": {"model": "m", "layer": l, "layer_facts": {"O": {"singular_values": list(sv)}}}}
                    for l, sv in spectra.items()]
             + [{"provenance": {"model": "other", "layer": 0, "layer_facts": {"O": {"singular_values": [1.0]}}}}]}
    t = within_layer.pk_sec5_3_wo_spectrum(provs, ["m"])
    assert [r["layer"] for r in t.rows] == [0, 1]
    for r in t.rows:
        sv = np.sort(spectra[r["layer"]])[::-1]
        assert (r["s1"], r["s2"], r["s3"]) == (sv[0], sv[1], sv[2]) and r["n"] == 12
        assert r["median"] == pytest.approx(np.median(sv), rel=1e-12)
        assert (r["p10"], r["p90"]) == pytest.approx(tuple(np.percentile(sv, [10, 90])), rel=1e-12)
        assert r["s1_over_median"] == pytest.approx(sv[0] / np.median(sv), rel=1e-12)


def test_edge_layer_and_distance_band_reads(tmp_path):
    """App. E's "small minimum angles in the first / last 3 layers" and App. F's "the distance
    from which Q, K and V all lie within d/D ± 0.01" read from planted tables: the count and the
    distance follow the planted layers, and move when the plant moves."""
    from pathlib import Path

    from headgeom.publish.claims import build_rows, load_ledger

    ids = ("pk.appE.qwen235b.blocks.small_first", "pk.appE.qwen235b.blocks.small_last", "pk.appF.distance.far_from")
    ledger = [e for e in load_ledger(Path(__file__).resolve().parents[3] / "config/claims.yaml") if e["id"] in ids]
    assert {e["id"] for e in ledger} == set(ids)

    def run(small_layers, near_dev, n_layers=20, out_at=None):
        rng = np.random.default_rng(3)
        big, gpt = "qwen3-235b-a22b", "gpt2-124m"
        pk = {c: [] for c in ("model", "layer", "kind", "rho", "min_angle_deg")}
        for layer in range(n_layers):
            for _ in range(6):
                lo = 1.0 if layer in small_layers else 20.0
                for c, v in (("model", big), ("layer", layer), ("kind", "O"), ("rho", rng.uniform(0.05, 0.3)),
                             ("min_angle_deg", rng.uniform(lo, lo + 5))):
                    pk[c].append(v)
        cross = {c: [] for c in ("model", "layer", "layer_r", "kind", "head_w", "head_r", "rho", "min_angle_deg",
                                 "weighted", "lambda_min_S")}
        for lw in range(12):
            for lr in range(lw + 1, 12):
                for kind in ("Q", "K", "V"):
                    dev = near_dev if lr - lw < 6 or lr - lw == out_at else 0.004  # far distances within the band
                    for h in range(2):
                        for c, v in (("model", gpt), ("layer", lw), ("layer_r", lr), ("kind", kind), ("head_w", h),
                                     ("head_r", 1 - h), ("rho", 64 / 768 + dev), ("min_angle_deg", 30.0),
                                     ("weighted", 1.0), ("lambda_min_S", 1e-8)):
                            cross[c].append(v)
        data = {"pk_within": {k: np.asarray(v) for k, v in pk.items()}, "pk_cross": {k: np.asarray(v) for k, v in cross.items()}}
        fields = {big: {"d_head": 128, "d_model": 4096}, gpt: {"d_head": 64, "d_model": 768}}
        (tmp_path / "pk_appendix_f_layer_stats.csv").write_text(
            cross_layer.pk_appendix_f_layer_stats(data, fields, [big, gpt]).csv())
        (tmp_path / "pk_appendix_f_cross_distance.csv").write_text(
            cross_layer.pk_appendix_f_cross_distance(data, fields, [gpt], TYPES).csv())
        rows = build_rows(ledger, tmp_path, [big, gpt])[0]
        return {r["id"]: r["pipeline"] for r in rows}

    # 20 layers: the lowest 10 % is 2 layers
    assert run({0, 1}, 0.05) == {ids[0]: "2", ids[1]: "0", ids[2]: "6"}
    assert run({18, 19}, 0.05) == {ids[0]: "0", ids[1]: "2", ids[2]: "6"}
    assert run({2, 17}, 0.005)[ids[0]] == "1" and run({2, 17}, 0.005)[ids[1]] == "1"
    assert run({2, 17}, 0.005)[ids[2]] == "1"  # every distance within the band
    assert run({0}, 0.05, out_at=9)[ids[2]] == "10"  # in the band at 6-8, out at 9: from 10 on


def test_layer_pair_groups_and_model_kind_rows_select_what_masks_select():
    """The grouped selections of the read-path outputs equal the per-pair and per-model masks
    they replace (same rows, same order), on shuffled rows with repeated and missing pairs."""
    from headgeom.methods.read_paths import layer_pair_groups, model_kind_rows

    rng = np.random.default_rng(5)
    wl = rng.integers(0, 6, 400)
    rl = wl + rng.integers(1, 4, 400)
    groups = layer_pair_groups(wl, rl)
    pairs = sorted(set(zip(wl.tolist(), rl.tolist())))
    assert [(a, b) for a, b, _ in groups] == pairs
    for a, b, idx in groups:
        np.testing.assert_array_equal(idx, np.flatnonzero((wl == a) & (rl == b)))
    assert layer_pair_groups(np.array([], int), np.array([], int)) == []
    names = np.array(["a", "b", "c"], dtype=object)
    rp = {"model": names[rng.integers(0, 3, 400)], "kind": np.array(["Q", "K", "V"], dtype=object)[rng.integers(0, 3, 400)]}
    got = list(model_kind_rows(rp, ["c", "a", "x"]))
    assert [(m, k) for m, k, _ in got] == [(m, k) for m in ("c", "a", "x") for k in ("Q", "K", "V")]
    for m, k, s in got:
        np.testing.assert_array_equal(s, (rp["model"] == m) & (rp["kind"] == k))


def test_rows_do_not_depend_on_the_order_of_layers_in_the_shards(data):
    """The same shards with the layers in reverse order (each layer's rows kept in their order) give
    the same tables, row for row: the per-condition tables sort their conditions."""
    def layers_reversed(cols, layer_col):
        order = np.argsort(-np.asarray(cols[layer_col]), kind="stable")
        assert not np.array_equal(order, np.arange(order.size))
        return {k: np.asarray(v)[order] for k, v in cols.items()}

    moved = {"pk_within": layers_reversed(data["pk_within"], "layer"), "pk_cross": layers_reversed(data["pk_cross"], "layer"),
             "pk_null_within": layers_reversed(data["pk_null_within"], "layer"),
             "pk_null_cross": layers_reversed(data["pk_null_cross"], "layer_w"), "pk_self": data["pk_self"]}
    builders = {"layer stats": lambda d: cross_layer.pk_appendix_f_layer_stats(d, FIELDS, ["m"]),
                "distance": lambda d: cross_layer.pk_appendix_f_cross_distance(d, FIELDS, ["m"], TYPES),
                "null samples": lambda d: nulls.pk_sec5_3_null_samples(d, FIELDS, ["m"], TYPES),
                "conditions": lambda d: nulls.pk_fig3_fig9_conditions(d, FIELDS, ["m"], TYPES)}
    for name, build in builders.items():
        want, got = build(data).csv().splitlines(), build(moved).csv().splitlines()
        assert len(want) > 5 and len(got) == len(want), name
        for w, g in zip(want, got):  # a mean over layer pairs may sum them in another order: last bits
            for x, y in zip(w.split(","), g.split(",")):
                assert x == y or float(x) == pytest.approx(float(y), rel=1e-12), (name, w, g)
