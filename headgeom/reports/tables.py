"""Aggregation of shards into the papers' tables, written as CSV + Markdown + LaTeX, each
with a provenance sidecar (<name>.prov.json)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

import numpy as np

from headgeom.io.files import write_set, write_text
from headgeom.methods.pk import isotropic_rho, isotropic_sd
from headgeom.core.provenance import code_version


@dataclass
class Column:
    key: str
    header: str
    fmt: str = "{}"
    latex: str | None = None


@dataclass
class Table:
    name: str
    caption: str
    columns: list[Column]
    rows: list[dict]
    notes: str = ""
    aggregation: str | None = None  # what built it (audit); default headgeom.tables.<name>

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

    def write(self, outputs: dict[str, str], inputs: list[dict], params: dict) -> None:
        """outputs: {'csv': path, 'md': path, 'tex': path, 'prov': path} and optionally 'html'
        (written first and not recorded in the sidecar, so that the CSV/md/tex/prov.json set
        stays what it was)."""
        if "html" in outputs:
            write_text(outputs["html"], self.html())
        write_set(outputs, {"csv": self.csv(), "md": self.markdown(), "tex": self.latex()}, {
            "table": self.name,
            "aggregation": self.aggregation or f"headgeom.tables.{self.name}",
            "params": params,
            "code": code_version(),
            "columns": [c.key for c in self.columns],
            "inputs": inputs,
        })


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


def html_page(name: str, caption: str, header: list[tuple[str, str]], rows: list[list[str]], notes: str = "") -> str:
    """One table as a self-contained HTML page: header (text, tooltip), rows of cell texts."""
    from html import escape

    head = "".join(f'<th title="{escape(k)}">{escape(h)}</th>' for h, k in header)
    body = "\n".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    note = f"<p>{escape(notes)}</p>\n" if notes else ""
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{escape(name)}</title>\n<style>'
        "body{font-family:sans-serif;font-size:13px} table.hg{border-collapse:collapse}"
        " table.hg th,table.hg td{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        " table.hg th{background:#eee} table.hg td:first-child{text-align:left}"
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


def nanstat(fn, x):
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(fn(x)) if x.size else float("nan")


# ------------------------------------------------------------------ paper 1, Table 2


def strong_tail(P, Pw, alpha, g, threshold: float) -> dict:
    """The per-model strong-tail statistics both closure_tail and paper 1's Table 2 report."""
    defined = np.isfinite(P)
    strong = defined & (P >= threshold)
    n_strong = int(strong.sum())
    return {
        "defined": defined, "strong_mask": strong, "n_defined": int(defined.sum()), "strong": n_strong,
        "wrong_v_median": nanstat(np.median, Pw),
        "wrong_v_max": nanstat(np.max, Pw),
        "neg_alpha_share": float(np.mean(alpha[strong] < 0)) if n_strong else float("nan"),
        "gT_median_strong": nanstat(np.median, g[strong]),
        "gT_min_strong": nanstat(np.min, g[strong]),
        "gT_median_all": nanstat(np.median, g),
    }


def closure_tail(cols: dict, models: list[str], strong_threshold: float = 0.9) -> Table:
    rows = []
    for m in models:
        sel = cols["model"] == m
        P, Pw, alpha, g = (np.asarray(cols[k][sel], dtype=float) for k in ("P", "P_wrong_v", "alpha", "g_T"))
        st = strong_tail(P, Pw, alpha, g, strong_threshold)
        rows.append({
            "model": m,
            "layers": int(np.unique(cols["layer"][sel]).size),
            "heads": int(sel.sum()),
            "undefined": int((~st["defined"]).sum()),
            "strong": st["strong"],
            "strong_pct": 100.0 * st["strong"] / max(st["n_defined"], 1),
            "median_P": nanstat(np.median, P),
            "wrong_v_median": st["wrong_v_median"],
            "wrong_v_max": st["wrong_v_max"],
            "wrong_v_strong": int(np.sum(np.isfinite(Pw) & (Pw >= strong_threshold))),
            "neg_alpha_share": st["neg_alpha_share"],
            "gT_median_strong": st["gT_median_strong"],
            "gT_min_strong": st["gT_min_strong"],
            "gT_median_all": st["gT_median_all"],
        })
    return Table(
        name="closure_tail",
        caption=f"Strong closure tail (P ≥ {strong_threshold:g}) per model against the cyclic wrong-V control.",
        columns=[
            Column("model", "Model"), Column("layers", "Layers"), Column("heads", "Heads"),
            Column("strong_pct", "% P≥t", "{:.2f}"), Column("strong", "Count"),
            Column("median_P", "Median P", "{:.3g}"),
            Column("wrong_v_median", "Wrong-V median", "{:.2e}"), Column("wrong_v_max", "Wrong-V max", "{:.3g}"),
            Column("wrong_v_strong", "Wrong-V ≥ t"),
            Column("neg_alpha_share", "Neg. α share (strong)", "{:.2f}"),
            Column("gT_median_strong", "g_T median (strong)", "{:.3g}"), Column("gT_min_strong", "g_T min (strong)", "{:.3g}"),
            Column("gT_median_all", "g_T median (all)", "{:.3g}"),
            Column("undefined", "Undefined"),
        ],
        rows=rows,
        notes="Wrong-V is undefined (–) for single-KV-group (MQA) models. 'Undefined' counts heads with T or T² = 0 (NaN + flag).",
    )


# ------------------------------------------------------------------ PK paper, Table 5


def pk_writing(cols: dict, models: list[str], fields: dict[str, dict], small_angle_deg: float = 10.0) -> Table:
    rows = []
    for m in models:
        f = fields[m]
        sel = (cols["model"] == m) & (cols["kind"] == "O")
        layers = np.unique(cols["layer"][sel])
        means, sds, small = [], [], 0
        for l in layers:
            s = sel & (cols["layer"] == l)
            rho = np.asarray(cols["rho"][s], dtype=float)
            means.append(rho.mean())
            sds.append(rho.std(ddof=0))
            small += int(np.any(np.asarray(cols["min_angle_deg"][s], dtype=float) < small_angle_deg))
        D, d = f["d_model"], f["d_head"]
        rows.append({
            "model": m, "D": D, "d": d, "heads": f["n_heads"], "layers": f["n_layers"],
            "iso": isotropic_rho(d, D),
            "mean_rho_median": nanstat(np.median, means), "mean_rho_min": nanstat(np.min, means),
            "mean_rho_max": nanstat(np.max, means),
            "sd_median": nanstat(np.median, sds), "sd_min": nanstat(np.min, sds), "sd_max": nanstat(np.max, sds),
            "random_sd": isotropic_sd(d, D),
            "layers_small_angle": small,
        })
    return Table(
        name="pk_writing",
        caption="Mean and dispersion of ρ between writing spaces of one layer (layer median and range).",
        columns=[
            Column("model", "Model"), Column("D", "D"), Column("d", "d"), Column("heads", "Heads"), Column("layers", "Layers"),
            Column("iso", "Isotropic d/D", "{:.4f}"),
            Column("mean_rho_median", "Mean ρ (median)", "{:.3f}"), Column("mean_rho_min", "min", "{:.3f}"),
            Column("mean_rho_max", "max", "{:.3f}"),
            Column("sd_median", "SD (median)", "{:.3f}"), Column("sd_min", "min", "{:.3f}"), Column("sd_max", "max", "{:.3f}"),
            Column("random_sd", "Random-subspace SD", "{:.4f}"),
            Column("layers_small_angle", f"Layers with a pair < {small_angle_deg:g}°"),
        ],
        rows=rows,
    )
