"""The three views of an ``AuditReport``: ``render_short`` (one screen: what ``headgeom audit``
prints), ``render_full`` (the whole trace: every shard's provenance, every tensor hash;
``--full``) and ``render_json`` (the report as one JSON object; ``--json``). Each renders the
report as it is and computes nothing."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

from headgeom.verify.audit.report import AuditReport
from headgeom.verify.audit.rows import json_value

VIEWS = ("short", "full", "json")


def _g(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "nan" if v is None else str(v)


def _wrap(items: list[str], first: str, indent: str = "      ", width: int = 110, max_lines: int = 3,
          extra: int = 0) -> list[str]:
    """``first`` then the items joined by "; ", wrapped at ``width``, at most ``max_lines`` lines; what does
    not fit (and ``extra`` more not given) is counted at the end."""
    lines, cur, shown = [], first, 0
    for it in items:
        piece = it if cur.endswith(": ") or cur == indent else "; " + it
        if len(cur) + len(piece) > width and cur.strip():
            if len(lines) + 1 >= max_lines:
                break
            lines.append(cur.rstrip())
            cur, piece = indent, it
        cur += piece
        shown += 1
    if shown < len(items) + extra:
        cur += f"; … {len(items) - shown + extra} more"
    lines.append(cur)
    return lines


def _fmt_value(v) -> str:
    return json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v


# ------------------------------------------------------------------ short: one screen


def _rows_lines(r: dict | None) -> list[str]:
    """The shard rows and columns the number was computed from."""
    L = []
    if r is None:
        return ["Computed from: (rows not looked for)"]
    if "error" in r:
        L.append(f"Computed from: (rows not shown: {r['error']})")
    elif not r["families"]:
        L.append("Computed from: no shard column moves it (from the manifests or the table's params alone)")
    for fam in r.get("families", []):
        verb = "moves with" if r["method"] == "perturbed" else "reads"
        L.append(f"Computed from {fam['rows']} {fam['unit']} of {fam['family']} ({fam['selection']}, "
                 f"{fam['shards']} shards); the number {verb} {', '.join(fam['used'])}")

        def item(t):
            ids = " ".join(f"{k} {_g(t[k])}" for k in fam["ids"])
            vals = " ".join(f"{c}={_g(t[c])}" for c in fam["used"])
            return (ids + " " + vals).strip()

        items = [item(t) for t in fam["top"]]
        if fam["counts"]:
            for c in fam["counts"][1:]:
                L.append(f"  {c['count']} of {c['of']} {fam['unit']} with {c['column']} ≥ {_g(c['threshold'])} ({c['param']})")
            c = fam["counts"][0]
            head = f"  {c['count']} of {c['of']} {fam['unit']} with {c['column']} ≥ {_g(c['threshold'])} ({c['param']}): "
        else:
            head = f"  {fam['order']}: "
        L.extend(_wrap(items, head, indent="    ", max_lines=4, extra=fam["more"]))
    return L


def _code_short(c: dict) -> str:
    if not c:
        return "?"
    s = f"headgeom {c.get('headgeom', '?')}"
    if c.get("git_commit"):
        s += f" git {c['git_commit'][:12]} ({'dirty' if c.get('git_dirty') else 'clean'})"
    else:
        s += " (no git commit recorded)"
    return s + f", source {str(c.get('source_sha256', '?'))[:12]}"


def _ok_count(items: list, noun: str) -> str:
    bad = sum(1 for x in items if x.status != "ok")
    noun = noun if len(items) == 1 else noun + "s"
    return f"{len(items)} {noun} " + ("sha256 OK" if not bad else f"checked, {bad} FAILED")


def render_short(rep: AuditReport) -> list[str]:
    """The audit on one screen (about 30 lines): the number; the shard rows behind it; rule,
    builder and code; the config, each key once; the inputs verified, as counts, every failure
    on its own line; the recomputations and the verdict."""
    n = rep.number
    row = ", ".join(f"{k}={v}" for k, v in n.row.items())
    L = [f"{n.table} [{row}] {n.column} = {n.value}   ({n.csv})"]
    L.extend(_rows_lines(rep.rows))
    L.append(f"Rule {rep.rule.name}: {rep.builder.function}")
    L.append(f"  rebuild: {rep.rule.rebuild}")
    code = rep.code
    sh = code["shards"]
    same = len(sh) == 1 and sh[0] == code["table"]
    L.append(f"Code: table {_code_short(code['table'])}; shards "
             + ("the same" if same else ("none" if not sh else f"{len(sh)} version(s): "
                                         + " | ".join(_code_short(c) for c in sh[:3])))
             + f"; now {_code_short(code['now'])}")
    cfg, first_shard = [], True
    for k, v in rep.config.items():
        s = (f"{k}={_fmt_value(v['value'])}" if "value" in v else
             f"{k}=" + " | ".join(f"{_fmt_value(x['value'])} ({x['shards']} shards)" for x in v["values"]))
        if v["from"] not in ("table", "table and shards") and first_shard:
            s, first_shard = "shards: " + s, False
        cfg.append(s)
    L.extend(_wrap(cfg, "Config (table, then shards; each key once): ", indent="  ", max_lines=5))

    inp = rep.inputs
    feed = [s for s in inp.shards if s.feeds]
    L.append(f"Inputs: {_ok_count(inp.shards, 'shard')} ({len(feed)} feed the row); "
             f"{_ok_count(inp.stores, 'tensor store')}; "
             f"{_ok_count(inp.tensors, 'tensor')} (shards' recorded hashes against the manifest)")
    for x in rep.integrity:  # every failure, one line each
        L.append(f"  FAILED {x}")
    a, b = rep.verdicts.shards, rep.verdicts.tensors
    L.append(f"Recompute (a) {a.what}: {a.value} -> {a.verdict} ({a.how})")
    if b:
        L.append(f"          (b) {b.what}: {b.value} -> {b.verdict} ({b.how})")
    else:
        L.append("          (b) from the tensors: skipped (--no-tensors)")
    L.append(f"Verdict: {rep.verdict_text}")
    L.append("(--full: every shard's provenance and every tensor hash; --json: this audit as JSON)")
    return L


# ------------------------------------------------------------------ full: the whole trace


def _params_text(params: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(params.items())) or "(none)"


def _code_text(code: dict) -> str:
    s = f"headgeom {code.get('headgeom', '?')}, source sha256 {code.get('source_sha256', '?')[:16]}…"
    if code.get("git_commit"):
        s += f", git {code['git_commit'][:12]}{' (dirty)' if code.get('git_dirty') else ''}"
    return s


def _shard_state(s) -> str:
    if s.sha256 is None:
        return "MISSING"
    if s.damage:
        return f"DAMAGED: {'; '.join(s.damage)}"
    if s.sha256 == s.sidecar_sha256:
        return "sha256 matches sidecar"
    return f"sha256 DIFFERS from sidecar (file {s.sha256[:16]}…, sidecar {(s.sidecar_sha256 or '')[:16]}…)"


def _shard_lines(s) -> list[str]:
    L = [f"  {s.path}", f"    rows {s.rows}, {_shard_state(s)}"]
    for r in s.sample or []:
        L.append("      " + ", ".join(f"{k}={v}" for k, v in r.items()))
    if s.sample_more:
        L.append(f"      … {s.sample_more} more rows")
    if s.unreadable is not None:
        L.append(f"      (unreadable: {s.unreadable})")
    L.append(f"    job {s.job}, model {s.model}" + (f", layer {s.layer}" if s.layer is not None else ""))
    L.append(f"    code    {_code_text(s.code or {})}")
    L.append(f"    config  {_params_text(s.params or {})}")
    L.append(f"    seeds   {s.seeds}")
    L.append(f"    rule    {s.rule}")
    L.append(f"    rebuild {s.rebuild}")
    return L


def _store_lines(st, rep: AuditReport) -> list[str]:
    if st.status == "missing":
        return [f"  {st.model}: no tensor store at {st.path}"]
    verdict = "matches manifest" if st.status == "ok" else "DIFFERS from manifest"
    L = [f"  model {st.model}: {st.path} sha256 {str(st.sha256)[:16]}… ({verdict}); "
         f"manifest sha256 {st.manifest_sha256[:16]}…",
         f"    source   {st.source}; adapter {st.adapter}; format {st.format}; headgeom {st.headgeom}"]
    for f in st.files:
        L.append(f"    file     {f.get('name')}  sha256 {f.get('sha256')}" + (f"  ({f['size']} bytes)" if "size" in f else ""))
    others = {x.path: x for x in rep.inputs.stores if x.computed_from and x.model == st.model}
    for p in st.shards:
        if p in others:
            L.append(f"    {p}: computed from store {others[p].computed_from[:16]}…, not the store here")
        for t in rep.inputs.tensors:
            if t.model == st.model and t.first_shard == p:
                status = "matches manifest" if t.status == "ok" else t.status
                L.append(f"    tensor   {t.tensor}  sha256 {t.sha256}  {t.source_dtype}->{t.dtype} {t.shape}  ({status})")
    return L


def render_full(rep: AuditReport) -> list[str]:
    """The whole trace: the aggregation, every feeding shard with its sha256 check, first rows and
    provenance, the tensor stores and every tensor's sha256 against the manifest, the
    recomputations (and the shards recomputed), the integrity problems and the verdict."""
    n, b = rep.number, rep.builder
    L = [f"Audit of {n.csv}, row {', '.join(f'{k}={v}' for k, v in n.row.items())}, column {n.column}",
         f"  value in the table: {n.value}", "",
         "Aggregation",
         f"  function   {b.function}   (sidecar: {b.aggregation})",
         f"  params     {_params_text(b.params)}",
         f"  models     {', '.join(b.models) or '(none)'}",
         f"  code       {_code_text(rep.code['table'])}",
         f"  rule       {rep.rule.name}",
         f"  rebuild    {rep.rule.rebuild}", ""]
    shards = rep.inputs.shards
    feed = [s for s in shards if s.feeds]
    L.append(f"Shards ({len(shards)} listed in the sidecar; {len(feed)} feed this row: {b.feeding})")
    for s in feed:
        L.extend(_shard_lines(s))
    L += ["", "Tensors"]
    for st in rep.inputs.stores:
        if not st.computed_from:
            L.extend(_store_lines(st, rep))
    for m in rep.inputs.manifests:
        L.append(f"    manifest {m['path']} sha256 {m['sha256']}")
    L += ["", "Recompute"]
    a, t = rep.verdicts.shards, rep.verdicts.tensors
    L.append(f"  (a) {a.what}: {a.value}  -> {a.verdict} ({a.how})")
    L.extend(f"    recomputed {p}" for p in rep.verdicts.recomputed)
    if t:
        L.append(f"  (b) {t.what}: {t.value}  -> {t.verdict} ({t.how})")
    else:
        L.append("  (b) from the tensors: skipped (--no-tensors)")
    if rep.integrity:
        L += ["", "Integrity problems"]
        L.extend(f"  {x}" for x in rep.integrity)
    L += ["", "Verdict: " + rep.verdict_text]
    return L


# ------------------------------------------------------------------ JSON


def report_dict(rep: AuditReport) -> dict:
    """The report as JSON-ready data (strict JSON: NaN as None, numpy values as Python)."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else str(x)
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return json_value(x) if not isinstance(x, (str, int, bool, type(None))) else x

    return clean(asdict(rep))


def render_json(rep: AuditReport) -> str:
    """The audit as one JSON object: number, rows, rule, builder, code, config, inputs (shards, stores,
    tensors, manifests; each item with its status: "ok" or what failed), verdicts, integrity, verdict,
    verdict_text, ok, nan."""
    return json.dumps(report_dict(rep), indent=1, default=str, allow_nan=False)


def render(rep: AuditReport, view: str = "short") -> list[str]:
    """The report in one of VIEWS, as lines."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, not {view!r}")
    if view == "json":
        return render_json(rep).splitlines()
    return render_full(rep) if view == "full" else render_short(rep)
