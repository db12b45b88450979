"""The formats of the outputs: a ``Table`` written as CSV + Markdown + LaTeX (+ an HTML page for
``snakemake --report``) and a figure saved as PNG + PDF, each with a provenance sidecar
(<name>.prov.json)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np

from headgeom.core.provenance import code_version
from headgeom.io.files import atomic_path, write_set, write_text


#: the column of a pooled row that lists the models it pools ("a, b, c"); headgeom.publish.claims
#: compares it with the models a pooled claim names
POOLED_MODELS = "pooled_models"


@dataclass
class Column:
    key: str
    header: str
    fmt: str = "{}"
    latex: str | None = None


@dataclass
class Table:
    """A table's columns and rows. A registered builder returns ``Table(columns=..., rows=...)``:
    its name comes from the registration and its caption from the builder's docstring
    (headgeom.outputs.registry.Output.call); tables built outside the registry name both."""
    name: str = ""
    caption: str = ""
    columns: list[Column] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    notes: str = ""
    aggregation: str | None = None  # what built it (audit); default headgeom.outputs.<name>

    def csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([c.key for c in self.columns])
        for r in self.rows:
            w.writerow([_csv_val(r.get(c.key)) for c in self.columns])
        return buf.getvalue()

    def markdown(self) -> str:
        lines = [f"**{self.name}** — {self.caption}", "",
                 "| " + " | ".join(c.header for c in self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        for r in self.rows:
            lines.append("| " + " | ".join(_fmt(c.fmt, r.get(c.key)) for c in self.columns) + " |")
        if self.notes:
            lines += ["", self.notes]
        return "\n".join(lines) + "\n"

    def latex(self) -> str:
        head = " & ".join(c.latex or tex_escape(c.header) for c in self.columns)
        body = "\n".join(" & ".join(tex_escape(_fmt(c.fmt, r.get(c.key))) for c in self.columns) + r" \\" for r in self.rows)
        return (
            "\\begin{table}[t]\n\\centering\n\\small\n"
            f"\\begin{{tabular}}{{l{'r' * (len(self.columns) - 1)}}}\n\\toprule\n{head} \\\\\n\\midrule\n{body}\n"
            f"\\bottomrule\n\\end{{tabular}}\n\\caption{{{tex_escape(self.caption)}}}\n\\label{{tab:{self.name}}}\n\\end{{table}}\n"
        )

    def html(self, caption: str | None = None) -> str:
        """A self-contained HTML page of the table (what ``snakemake --report`` shows): the
        Markdown's formatted cells, the CSV's column keys as header tooltips, columns sortable
        by a click (a few lines of inline JS, no external assets)."""
        return html_page(self.name, caption if caption is not None else self.caption,
                         [(c.header, c.key) for c in self.columns],
                         [[_fmt(c.fmt, r.get(c.key)) for c in self.columns] for r in self.rows], self.notes)

    def write(self, outputs: dict[str, str], inputs: list[dict], params: dict,
              columns_read: dict[str, list[str]] | None = None) -> None:
        """outputs: {'csv': path, 'md': path, 'tex': path, 'prov': path} and optionally 'html'
        (written first and not recorded in the sidecar, so that the CSV/md/tex/prov.json set
        stays what it was). ``columns_read``: family -> the shard columns the builder read
        (headgeom.outputs.build.ReadLog), recorded in the sidecar."""
        if "html" in outputs:
            write_text(outputs["html"], self.html())
        prov = {
            "table": self.name,
            "aggregation": self.aggregation or f"headgeom.outputs.{self.name}",
            "params": params,
            "code": code_version(),
            "columns": [c.key for c in self.columns],
            "inputs": inputs,
        }
        if columns_read is not None:
            prov["columns_read"] = columns_read
        write_set(outputs, {"csv": self.csv(), "md": self.markdown(), "tex": self.latex()}, prov)


_SORT_JS = """
document.querySelectorAll('table.hg th').forEach(function (th, i) {
  th.style.cursor = 'pointer';
  th.addEventListener('click', function () {
    var tb = th.closest('table').tBodies[0], asc = th.dataset.asc !== '1';
    th.dataset.asc = asc ? '1' : '0';
    var num = function (s) { var x = parseFloat(s.replace('\u2212', '-')); return isNaN(x) ? null : x; };
    Array.from(tb.rows).sort(function (a, b) {
      var x = a.cells[i].textContent, y = b.cells[i].textContent, p = num(x), q = num(y);
      var c = (p !== null && q !== null) ? p - q : x.localeCompare(y);
      return asc ? c : -c;
    }).forEach(function (r) { tb.appendChild(r); });
  });
});
"""


def row_anchor(i: int) -> str:
    """The id of a table page's i-th row (0: the first row of the CSV): what the ledger page links to."""
    return f"row-{i}"


def html_page(name: str, caption: str, header: list[tuple[str, str]], rows: list[list[str]], notes: str = "") -> str:
    """One table as a self-contained HTML page: header (text, tooltip), rows of cell texts, each
    row with the id ``row_anchor(i)`` (highlighted when a link lands on it)."""
    from html import escape

    head = "".join(f'<th title="{escape(k)}">{escape(h)}</th>' for h, k in header)
    body = "\n".join(f'<tr id="{row_anchor(i)}">' + "".join(f"<td>{escape(v)}</td>" for v in r) + "</tr>"
                     for i, r in enumerate(rows))
    note = f"<p>{escape(notes)}</p>\n" if notes else ""
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{escape(name)}</title>\n<style>'
        "body{font-family:sans-serif;font-size:13px} table.hg{border-collapse:collapse}"
        " table.hg th,table.hg td{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        " table.hg th{background:#eee} table.hg td:first-child{text-align:left} table.hg tr:target{background:#ffe08a}"
        "</style></head><body>\n"
        f"<p><b>{escape(name)}</b> — {escape(caption)}</p>\n"
        f'<table class="hg"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>\n{note}'
        f"<script>{_SORT_JS}</script>\n</body></html>\n"
    )


def _csv_val(v):
    if v is None:
        return ""
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else str(v))
    if isinstance(v, np.integer):
        return str(int(v))
    return str(v)


def _fmt(fmt: str, v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"), ("–", "--"), ("≥", r"$\geq$"), ("ρ", r"$\rho$"), ("α", r"$\alpha$"), ("×", r"$\times$"), ("°", r"$^\circ$")):
        s = s.replace(a, b)
    return s


# ------------------------------------------------------------------ figures


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ccdf_steps(x):
    """Vertices of the staircase of S(t) = fraction of values >= t, the curve the figures draw.

    S is left-continuous: S(t) = (n - i)/n on (x_{i-1}, x_i] (sorted x). Drawing (x_i, S(x_i))
    with ``step(where="post")`` puts each level on [x_i, x_{i+1}), one step too high; these
    vertices draw each level on its own interval, drop at every x_i, and stop at (x_max, 1/n)
    (the drop to 0 is left out so that log axes can show the curve)."""
    x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
    n = x.size
    if n == 0:
        return x, x
    levels = (n - np.arange(n + 1)) / n  # S on (x_{i-1}, x_i] for i = 0..n (level n: 0)
    xs = np.repeat(x, 2)
    ys = np.empty(2 * n)
    ys[0::2] = levels[:-1]
    ys[1::2] = levels[1:]
    return xs[:-1], ys[:-1]


def step_ccdf(ax, values, **kw):
    """Draw the CCDF staircase of ``values`` (ccdf_steps) on ``ax``; returns the line or None."""
    xs, ys = ccdf_steps(values)
    if xs.size == 0:
        return None
    return ax.plot(xs, ys, **kw)[0]


def save(fig, outputs: dict[str, str], prov: dict) -> None:
    """PNG and PDF, then the sidecar last with their sha256s (io.write_set: a set or nothing)."""

    def writer(fmt):
        return lambda tmp: fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight",
                                       metadata={"Software": None} if fmt == "png" else {"CreationDate": None})

    writers = {fmt: writer(fmt) for fmt in ("png", "pdf") if fmt in outputs}
    if "prov" not in outputs:
        for fmt, w in writers.items():
            with atomic_path(outputs[fmt]) as tmp:
                w(tmp)
        return
    write_set(outputs, {}, {**prov, "code": code_version()}, writers=writers)
