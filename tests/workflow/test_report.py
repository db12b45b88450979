"""`snakemake --report` on the shared tiny run: captions without docutils messages, every
table readable (an HTML table), captions from each output's own provenance, a landing page."""

from __future__ import annotations

import base64
import json
import re

import pytest

from tinyrun import snakemake, tiny_run


@pytest.mark.slow
def test_report_of_the_tiny_run(tmp_path_factory, snakemake_bin, root):
    run = tiny_run(tmp_path_factory, snakemake_bin, root)
    # every table (registry, claims, choice sensitivity) has its HTML rendering beside its CSV
    tables = sorted((run / "results/tables").glob("*.md"))
    assert len(tables) > 30
    for md in tables:
        page = md.with_suffix(".html").read_text(encoding="utf-8")
        if md.stem == "claims":  # the ledger page (headgeom.publish.ledger_page)
            assert 'id="ledger"' in page and "new Tabulator(" in page
            continue
        assert '<table class="hg">' in page and "<script>" in page, md.name
    # the report is made with another config than the run's: captions must still say what was built
    prov = json.loads((run / "results/tables/p1_table2_strong_tail.prov.json").read_text())
    built = prov["params"]["strong_threshold"]
    (run / "cfg_other.yaml").write_text("tables: {strong_threshold: 0.123}\n")
    out = run / "report_test.html"
    snakemake(snakemake_bin, root, run, "--report", str(out), configfiles=("cfg.yaml", "cfg_other.yaml"))
    html = out.read_text(encoding="utf-8")
    assert "System Message" not in html and "system-message" not in html
    assert "Undefined substitution" not in html
    # the tables themselves (embedded as data URIs), not only CSV downloads
    pages = [base64.b64decode(b).decode("utf-8", "replace")
             for b in re.findall(r"data:text/html[^,\"']*;base64,([A-Za-z0-9+/=]+)", html)]
    assert pages and any('<table class="hg">' in p and "<th" in p for p in pages), len(pages)
    assert "headgeom: attention-head weight geometry" in html and "tiny" in html  # the landing page
    assert f"t = {built}" in html and "t = 0.123" not in html
    assert re.search(r"p1_table2_strong_tail\.html", html)
