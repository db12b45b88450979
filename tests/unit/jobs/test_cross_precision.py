"""The cross-layer nulls' own arithmetic (pk.nulls.cross_precision): a design runs them in float32 and every
other null in float64, as the PK paper ran Qwen2.5-7B (its writer->reader comparison alone in FP32)."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.io.shards import read_shard
from headgeom.methods.nulls import precision_of

QUIET = {"log": lambda *_: None}


def test_precision_of_takes_the_cross_nulls_own_setting_and_falls_back_to_precision():
    assert precision_of({}, "cross") == precision_of({}, "within") == "float64"
    assert precision_of({"precision": "float32"}, "cross") == "float32"
    assert precision_of({"precision": "float32", "cross_precision": None}, "cross") == "float32"
    both = {"precision": "float64", "cross_precision": "float32"}
    assert precision_of(both, "cross") == "float32" and precision_of(both, "within") == "float64"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from headgeom.io.fetch import fetch_model
    from synth import write_llama

    tmp = tmp_path_factory.mktemp("cross_precision")
    write_llama(tmp / "ck", n_layers=3)
    fetch_model("tiny", {"source": "local", "path": str(tmp / "ck")}, tmp / "store", **QUIET)
    return tmp / "store"


def _cols(path):
    cols, prov = read_shard(path)
    return cols.to_pydict(), prov


def _bits(v):
    """A value with every float by its exact bits (float.hex), lists taken apart."""
    if isinstance(v, (list, tuple)):
        return [_bits(x) for x in v]
    return float(v).hex() if isinstance(v, float) else v


def _same_bits(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(_bits(list(a[k])) == _bits(list(b[k])) for k in a)


def test_cross_job_runs_in_cross_precision_and_the_within_job_keeps_precision(store, tmp_path):
    """pk_null_cross with cross_precision float32 is the float32 job bit for bit (and not the float64
    one: its rows move, within the float32 bound on the statistics); pk_null_within under the same params
    is the float64 job bit for bit. The shard's provenance names the arithmetic that ran."""
    from headgeom.jobs.pk_paper import pk_null_cross_job, pk_null_within_job

    base = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"], "kinds": ["O", "K"]}
    runs = {"f64": {"precision": "float64"}, "f32": {"precision": "float32"},
            "split": {"precision": "float64", "cross_precision": "float32"}}
    cross, within = {}, {}
    for name, extra in runs.items():
        p = {**base, **extra}
        pk_null_cross_job(store, [0, 1], tmp_path / f"c-{name}.parquet", p, **QUIET)
        pk_null_within_job(store, 1, [0, 1], tmp_path / f"w-{name}.parquet", p, **QUIET)
        cross[name], within[name] = _cols(tmp_path / f"c-{name}.parquet"), _cols(tmp_path / f"w-{name}.parquet")
    assert _same_bits(cross["split"][0], cross["f32"][0]) and not _same_bits(cross["split"][0], cross["f64"][0])
    assert _same_bits(within["split"][0], within["f64"][0]) and not _same_bits(within["split"][0], within["f32"][0])
    assert cross["split"][1]["precision"] == "float32" and cross["f64"][1]["precision"] == "float64"
    # float32 moves a null's per-condition SD and mean by less than the bound test_null_precision states
    for k in ("sd", "mean"):
        x, y = np.array(cross["split"][0][k], float), np.array(cross["f64"][0][k], float)
        ok = np.isfinite(y) & (y != 0)
        assert ok.sum() > 10 and np.max(np.abs(x[ok] / y[ok] - 1)) < 5e-5, k


def test_the_paper_design_runs_7b_cross_nulls_alone_in_float32():
    """config/paper.yaml: Qwen2.5-7B's cross-layer nulls in float32, its within-layer nulls and every other
    model's nulls in float64; the rule hands the job both keys through the model's design."""
    from headgeom.core import config as CF
    from headgeom.schedule.designs import model_config
    from headgeom.schedule.families import JOBS

    config = CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"])
    assert {"precision", "cross_precision"} <= set(JOBS["pk_null_cross"].params)
    seven = model_config(config, "qwen2.5-7b")["pk"]["nulls"]
    assert (precision_of(seven, "cross"), precision_of(seven, "within")) == ("float32", "float64")
    for other in ("gpt2-124m", "qwen3-235b-a22b"):
        nulls = model_config(config, other)["pk"]["nulls"]
        assert precision_of(nulls, "cross") == precision_of(nulls, "within") == "float64", other
