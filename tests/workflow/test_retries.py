"""A failed job is retried with grown resources (attempt x the cost model's mem_mb and runtime),
and the shard records the attempt that wrote it."""

from __future__ import annotations

import re

import pytest
import yaml

from headgeom.io.shards import read_shard
from headgeom.schedule.families import JOBS
from faults import fault_env
from synth import write_llama
from tinyrun import CFG, snakemake

pytestmark = pytest.mark.slow


def test_retry_grows_memory_and_runtime_and_is_recorded(tmp_path, snakemake_bin, root, monkeypatch):
    w = tmp_path
    write_llama(w / "ckpt", n_layers=2)
    (w / "cfg.yaml").write_text(yaml.safe_dump({"models": {"tiny": {"source": "local", "path": str(w / "ckpt")}}, **CFG}))
    target = "results/shards/pk_within/tiny/layer0.parquet"
    for k, v in fault_env(HEADGEOM_TEST_FAIL_FIRST_ATTEMPT="pk_within_layer").items():  # tests/helpers/jobhooks
        monkeypatch.setenv(k, v)

    # without retries the injected failure fails the run
    r = snakemake(snakemake_bin, root, w, target, ok=False)
    assert r.returncode != 0 and "attempt 1 failed on purpose" in (w / "logs/pk_within/tiny/layer0.log").read_text()

    r = snakemake(snakemake_bin, root, w, target, "--retries", "2")
    text = r.stdout + r.stderr
    base = JOBS["pk_within_layer"].cost(w / "results/tensors/tiny/manifest.json", yaml.safe_load((root / "config/config.yaml").read_text()))
    # the scheduler printed the pk_within_layer job twice: attempt 1 with the cost model, attempt 2 with twice that
    asked = [dict(kv.split("=", 1) for kv in m.group(1).split(", ") if "=" in kv)
             for m in re.finditer(r"rule pk_within_layer:.*?\n    resources: ([^\n]*)", text, re.S)]
    assert [int(a["mem_mb"]) for a in asked] == [base["mem_mb"], 2 * base["mem_mb"]], text[-3000:]
    assert [int(a["runtime"]) for a in asked] == [base["runtime"], 2 * base["runtime"]]
    run = read_shard(w / target)[1]["run"]
    assert run["attempt"] == 2 and run["mem_mb"] == 2 * base["mem_mb"] and run["rule"] == "pk_within_layer"
