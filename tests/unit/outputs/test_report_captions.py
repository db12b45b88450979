"""The `snakemake --report` captions (workflow/report/**/*.rst) and the tables' HTML rendering."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from headgeom.publish import docs
from headgeom.outputs.formats import Column, Table

ROOT = Path(__file__).resolve().parents[3]
CAPTIONS = sorted(p for p in (ROOT / "workflow" / "report").rglob("*.rst") if p.name != "workflow.rst")


class _Any:
    """Stands in for snakemake.params / snakemake.config: every name is a short list."""

    def __getattr__(self, name):
        return ["a", "b"]

    def __getitem__(self, name):
        return _Any()


def render_rst(text: str, config=None, categories=None) -> tuple[str, str]:
    """(html, docutils' warnings) of one caption, its Jinja rendered first as Snakemake does."""
    import jinja2
    from docutils.core import publish_parts

    class _Snakemake:
        params = _Any()
        wildcards = _Any()

    _Snakemake.config = _Any() if config is None else config
    rst = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(text).render(
        snakemake=_Snakemake(), categories=categories or {}, files={})
    warnings = io.StringIO()
    html = publish_parts(rst, writer_name="html", settings_overrides={
        "report_level": 1, "halt_level": 5, "warning_stream": warnings})["html_body"]
    return html, warnings.getvalue()


def test_there_are_captions():
    assert len(CAPTIONS) > 30


@pytest.mark.parametrize("path", CAPTIONS, ids=lambda p: p.name)
def test_every_caption_renders_without_docutils_messages(path):
    html, warnings = render_rst(path.read_text(encoding="utf-8"))
    assert not warnings, warnings
    assert "system-message" not in html and "System Message" not in html


def test_rst_escape_keeps_literals_and_jinja():
    s = docs.rst_escape("max of |Δρ| and ``a|b`` {{ snakemake.params.models|join(', ') }}")
    assert s == "max of \\|Δρ\\| and ``a|b`` {{ snakemake.params.models|join(', ') }}"
    html, warnings = render_rst(s)
    assert not warnings and "|Δρ|" in html


def test_table_html_is_a_self_contained_escaped_table():
    t = Table("t", "caption <b>", [Column("model", "model"), Column("x", "x <", "{:.2f}")],
              [{"model": "a&b", "x": 1.234}, {"model": "c", "x": None}], notes="n")
    h = t.html()
    assert "<table" in h and "<th" in h and "<td>1.23</td>" in h and "<td>–</td>" in h
    assert "a&amp;b" in h and "x &lt;" in h and "caption &lt;b&gt;" in h
    assert "<script>" in h and "http" not in h.split("<script>")[1]  # sorting inline, no external assets
    assert "src=" not in h and "href=" not in h


def test_landing_page_renders_with_the_default_config():
    import yaml

    from headgeom.core.provenance import code_version

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["_report_code"] = code_version()
    html, warnings = render_rst((ROOT / "workflow" / "report" / "workflow.rst").read_text(encoding="utf-8"), cfg)
    assert not warnings, warnings
    assert all(m in html for m in cfg["active_models"]) and "source sha256" in html
