"""Audit of a table read from ``pk_cross`` shards that each cover several writer layers (a
fan-out part of a model with more than two layers): such a shard records its tensor hashes
grouped by layer, and the audit must check the tensors, not read layer numbers as tensor names."""

from __future__ import annotations

import json

import pytest
import yaml

from headgeom.schedule import costs, fanout
from headgeom.schedule.families import JOBS
from synth import write_llama
from tinyrun import CFG, snakemake

pytestmark = pytest.mark.slow

N_LAYERS = 4
FIELDS = {"d_model": 48, "n_heads": 4, "n_kv_heads": 2, "d_head": 12, "n_layers": N_LAYERS}  # write_llama's defaults


def test_audit_of_a_multi_writer_fanout_part(tmp_path, snakemake_bin, root):
    from headgeom.verify.audit import audit, render_full, render_short

    w = tmp_path
    write_llama(w / "ckpt", n_layers=N_LAYERS, closed=((0, 0, 1.5), (2, 3, -0.8)), shards=2)
    # a ceiling that fits 3.5 layer pairs and two writer layers per pk_cross_layer job: parts [w0 -> 1..3],
    # [w1 -> 2..3, w2 -> 3]
    minutes = costs.SAFETY * (3.5 * costs.pk_cross_pair_seconds(FIELDS) + 2 * costs.pk_cross_writer_seconds(FIELDS)) / 60
    cfg = {"models": {"tiny4": {"source": "local", "path": str(w / "ckpt")}}, **CFG,
           "active_models": ["tiny4"], "fanout": {"max_job_minutes": minutes}}
    parts = fanout.parts(JOBS["pk_cross_layer"], FIELDS, cfg)
    assert parts == [[(0, 1, 4)], [(1, 2, 4), (2, 3, 4)]], parts
    assert len(parts) >= 2 and any(len(p) > 1 for p in parts), parts
    (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(snakemake_bin, root, w, "results/tables/pk_table2_lower_bound.csv")

    prov = json.loads((w / "results/tables/pk_table2_lower_bound.prov.json").read_text())
    multi = [r for r in prov["inputs"] if isinstance(r["provenance"].get("layer"), list)]
    assert len(prov["inputs"]) == len(parts) and multi, [r["path"] for r in prov["inputs"]]
    assert all(isinstance(v, dict) for v in multi[0]["provenance"]["tensors"].values())  # grouped by layer

    res = audit(w, "pk_table2_lower_bound", {"model": "tiny4"}, "min_V", find_rows=False)
    text = "\n".join(render_full(res))
    assert res.verdicts.shards.ok and res.verdicts.tensors.ok, text
    assert not res.integrity and res.ok, text
    assert "NOT IN MANIFEST" not in text and "Verdict: MATCH" in text, text
    manifest = json.loads((w / "results/tensors/tiny4/manifest.json").read_text())
    for layer in range(N_LAYERS - 1):  # every writer layer's W_O was checked against the store
        name = f"model.layers.{layer}.self_attn.o_proj.weight"
        assert f"tensor   {name}  sha256 {manifest['tensors'][name]['sha256']}" in text, (name, text)

    # the one-screen view counts the tensors inside the per-layer groups, once each, all OK
    res = audit(w, "pk_table2_lower_bound", {"model": "tiny4"}, "min_V", tensors=False)
    lines = render_short(res)
    short = "\n".join(lines)
    assert res.ok and len(lines) <= 40, short
    names = set()
    for rec in prov["inputs"]:
        for group in (rec["provenance"].get("tensors"), rec["provenance"].get("tensors_readers")):
            for k, v in (group or {}).items():
                names |= set(v) if isinstance(v, dict) else {k}
    assert names and not any(n.isdigit() for n in names)
    assert f"{len(names)} tensors sha256 OK" in short and "FAILED" not in short, short
    checked = {t.tensor for t in res.inputs.tensors}
    assert checked == names and all(t.status == "ok" for t in res.inputs.tensors)
