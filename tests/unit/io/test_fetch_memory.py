"""The fetch's memory: what it holds is the tensors it keeps, whatever the checkpoint's file
layout, and its request is sized from the model's shape (headgeom.schedule.costs.fetch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headgeom.io.checkpoint import SafetensorsDir
from headgeom.schedule import costs
from headgeom.schedule.families import FETCH


def _rss_file_kib() -> int:
    """Resident pages of files mapped into this process (RssFile), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")


def test_reading_a_one_file_checkpoint_keeps_one_tensor_mapped_at_a_time(tmp_path):
    """16 tensors of 4 MiB in one file: reading them one by one (and dropping each) must not leave
    the file's pages resident (a reader holding the file mapped to its end added the whole file
    to the fetch's peak: 1.6 GB at Qwen2.5-7B's shape in one file)."""
    import torch  # noqa: F401  (its libraries mapped before the measurement: the reader imports it)
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {f"model.layers.{i}.self_attn.q_proj.weight": rng.standard_normal((1024, 1024)).astype(np.float32)
               for i in range(16)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    ck = SafetensorsDir(tmp_path)
    before, peak = _rss_file_kib(), 0
    for k, arr, _ in ck.read(sorted(tensors)):
        np.testing.assert_array_equal(arr, tensors[k])
        peak = max(peak, _rss_file_kib() - before)
        del arr
    whole = sum(a.nbytes for a in tensors.values()) / 1024
    assert peak < 0.25 * whole, (peak, whole)


QWEN25_7B = {"n_layers": 28, "d_model": 3584, "n_heads": 28, "n_kv_heads": 4, "d_head": 128}


def test_the_fetch_is_sized_from_the_models_shape():
    # float32 attention tensors of Qwen2.5-7B: 28 x (2 x 3584^2 + 2 x 3584 x 512 + biases + norms) x 4 bytes
    per_layer = 2 * 3584 * 3584 + 2 * 3584 * 512 + 3584 + 2 * 512 + 2 * 3584
    assert costs.store_mib(QWEN25_7B) == 28 * per_layer * 4 / 2**20
    measured_peak_mib = 3728  # bench/fullwidth.py: the fetch's process tree, four-file layout
    req = FETCH.cost(QWEN25_7B, {"models": {}})
    assert measured_peak_mib < req["mem_mb"] < 2 * measured_peak_mib
    big = FETCH.cost({**QWEN25_7B, "n_layers": 94, "d_model": 4096, "n_heads": 64}, {"models": {}})
    assert big["mem_mb"] > 3 * req["mem_mb"]  # Qwen3-235B's 94 layers of 64 heads: the store grows with them
    # the rule's call: no fields, the shape found for the wildcards' model (the registry's shape:)
    config = {"models": {"m": {"source": "hf", "shape": QWEN25_7B}}}
    hub = FETCH.cost(None, config, {"model": "m"})
    assert hub["mem_mb"] == req["mem_mb"]
    # the download: the attention tensors' float32 bytes (3.3 GB) at the stated rate, with the margin
    download_s = costs.store_mib(QWEN25_7B) * 2**20 / (costs.FETCH_HUB_MB_PER_S * 1e6)
    assert 3.2e9 / (costs.FETCH_HUB_MB_PER_S * 1e6) < download_s < 3.4e9 / (costs.FETCH_HUB_MB_PER_S * 1e6)
    # a download is no slower on a slow node: its wait takes the margin alone
    assert hub["work_s"] == pytest.approx(req["work_s"] + costs.MARGIN * download_s)
    assert hub["runtime"] >= (costs.SAFETY * req["work_s"] + costs.MARGIN * download_s) / 60
    assert FETCH.cost(None, {"models": {}}, {"model": "unknown"})["mem_mb"] == 4000  # no shape known
