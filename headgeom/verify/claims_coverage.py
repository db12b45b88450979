"""Coverage of the claims ledger: which numbers the papers print, and which ledger rows claim them.

config/paper_numbers.yaml is the inventory of every number printed in the two papers' text and
tables, made by reading them. Each item names a paragraph or table row of a paper file by line,
and lists the numbers printed there, in order, each with the ledger row(s) that claim it
(``[printed, claim id or [ids]]``), plus the numeric tokens on that line that are not claims
(``skip: [[token, why], ...]``). ``inventory_problems`` checks the inventory against the paper
files (every listed number is printed on that line, in that order) and against the ledger (every
number has a row, every row a number); ``token_audit`` finds every numeric token in the papers and
says which are inventoried, which fall under a rule for non-claims (references, years, section
and figure numbers, names of models, file names, exponents inside formulas) and which nobody has
accounted for. ``coverage_line`` is what ``headgeom claims`` prints under its table."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from headgeom.publish.claims import build_rows, load_ledger

# a number as the papers print it: 1.04\times 10^{-4}, 10^{-10}, 7,304, 0.336, 3
_TOKEN = re.compile(
    r"\d+(?:\.\d+)?\s*\\times\s*10\^\{?-?\d+\}?"
    r"|10\^\{-?\d+\}"
    r"|\d+(?:\.\d+)?e-?\d+"
    r"|\d{1,3}(?:,\d{3})+(?!\d)"
    r"|\d+(?:\.\d+)?")

# rules for tokens that are not claims: (name, pattern matched on the text around the token)
_CONTEXT_RULES = [
    ("section, table, figure, equation or proposition number",
     re.compile(r"(?:Section|Appendix|Equation|Proposition|Table|Figure|表|図|\\tag\{)\s*[\dA-H.]*\s*$")),
    ("citation year", re.compile(r"(?:et al\.|and others|[A-Z][^\W\d_]+|Team|Institute|AI|OLMo),?\s*(?:\d{4}[a-z]?;\s*)*$")),
    ("list item number", re.compile(r"(?:^|\n)$")),
]
_AFTER_RULES = [
    ("section number", re.compile(r"^\s*節")),
    ("counting word in prose (1 つ, 2 つ目: one, two, first)", re.compile(r"^\s*つ")),
    ("citation year", re.compile(r"^[a-z]?\)")),
]


def tokens(text: str) -> list[tuple[int, int, str]]:
    """(start, end, token) for every numeric token."""
    return [(m.start(), m.end(), m.group(0)) for m in _TOKEN.finditer(text)]


def _in_math(line: str, pos: int) -> bool:
    return line[:pos].count("$") % 2 == 1


def classify(line: str, start: int, end: int, refs: bool) -> str | None:
    """Why a token is not a claim, by rule; None when no rule applies."""
    tok = line[start:end]
    before, after = line[:start], line[end:]
    if refs:
        return "reference list"
    # part of a name: Qwen2.5-7B, GPT-2, FP64, A22B, arXiv:2609.01129, capacity-three-baseline-writing.json
    if (re.search(r"[A-Za-z_:]$|[A-Za-z_]/$|[A-Za-z]-$", before) and not re.search(r"\\[a-z]+$", before)) \
            or re.match(r"^[A-Za-z_]|^-[A-Za-z]|^\.(?:json|py)", after):
        return "part of a name (model, format, file, identifier)"
    if _in_math(line, start) and (re.search(r"[\^_]\{?$|[\^_]\{[^}]*$|\\(?:theta|sigma|lambda)_?\{?$", before)
                                  or re.match(r"^\}?\s*[\^_]", after) and tok in ("1", "2")):
        return "exponent or index inside a formula"
    for name, rx in _CONTEXT_RULES:
        if rx.search(before[-40:]) and (name != "citation year" or re.fullmatch(r"(19|20)\d\d", tok)):
            if name == "list item number" and not re.match(r"^\.\s", after):
                continue
            return name
    for name, rx in _AFTER_RULES:
        if rx.search(after) and (name != "citation year" or re.fullmatch(r"(19|20)\d\d", tok)):
            return name
    return None


# ------------------------------------------------------------------ the inventory


def load_inventory(path) -> dict:
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    for tag in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int"):
        _Loader.add_constructor(tag, lambda loader, node: loader.construct_scalar(node))
    return yaml.load(Path(path).read_text(), Loader=_Loader) or {}


def inventory_numbers(inv: dict) -> list[dict]:
    """One record per printed number: paper, line, where, printed, claims."""
    out = []
    for paper, items in (inv.get("numbers") or {}).items():
        for it in items or []:
            for pair in it.get("numbers") or []:
                printed, claims = str(pair[0]), pair[1]
                note = str(pair[2]) if len(pair) > 2 else ""
                claims = [claims] if isinstance(claims, str) else list(claims)
                out.append({"paper": paper, "file": it.get("file"), "line": int(it["line"]),
                            "where": it.get("where", ""), "printed": printed, "claims": claims, "note": note,
                            "verbal": bool(it.get("verbal"))})
    return out


# Why a quantified statement without digits has no ledger row checking it: every statement's
# `reason` starts with one of these (tests/unit/verify/test_claims_statements.py).
STATEMENT_REASONS = (
    "theory",
    "a setting of the study",
    "interpretation of other entries",
    "asserted by the pipeline",
    "reported in the supplement",
    "no criterion stated",
    "needs data the pipeline does not record",
)


def statement_reason(reason) -> str | None:
    """The fixed category a statement's reason belongs to, or None when it is outside the list."""
    text = str(reason or "").strip()
    return next((c for c in STATEMENT_REASONS if text.startswith(c)), None)


def inventory_statements(inv: dict) -> list[dict]:
    """One record per quantified statement without digits: paper, file, line, text, claims, reason."""
    out = []
    for paper, items in (inv.get("statements") or {}).items():
        for it in items or []:
            claims = it.get("claims") or []
            out.append({"paper": paper, "file": it.get("file"), "line": int(it["line"]), "text": str(it.get("text", "")),
                        "claims": [claims] if isinstance(claims, str) else list(claims), "reason": it.get("reason")})
    return out


def statement_problems(inv: dict, row_ids, papers_dir=None) -> list[str]:
    """A statement neither checked by ledger rows nor given a reason from STATEMENT_REASONS, one
    pointing to a row the ledger lacks, or (with the papers) one whose phrase is not on its line."""
    probs, ids = [], set(row_ids)
    for st in inventory_statements(inv):
        where = f"{st['paper']} line {st['line']}: statement {st['text']!r}"
        if not st["claims"] and statement_reason(st["reason"]) is None:
            probs.append(f"{where}: neither ledger rows nor a reason from the fixed list ({st['reason']!r})")
        probs += [f"{where}: points to {c!r}, not a ledger row" for c in st["claims"] if c not in ids]
        if papers_dir is not None:
            name = st["file"] or next(iter(inv["papers"][st["paper"]]["files"]))
            lines = _lines(papers_dir, name)
            if not 1 <= st["line"] <= len(lines) or st["text"] not in lines[st["line"] - 1]:
                probs.append(f"{name}:{st['line']}: statement {st['text']!r} is not printed there")
    return probs


def _paper_file(inv: dict, paper: str, item: dict) -> str:
    files = inv["papers"][paper]["files"]
    return item.get("file") or next(iter(files))


def _lines(papers_dir: Path, name: str) -> list[str]:
    return (Path(papers_dir) / name).read_text().splitlines()


def _find_seq(line: str, wanted: list[str], toks: list[tuple[int, int, str]]):
    """Place each wanted string, in order, in the line (a string may carry words around its number,
    "cos 13"); a place counts when it covers whole numeric tokens only, at least one. Returns the
    token indices each covers, or the first string not found."""
    placed, pos = [], 0
    for w in wanted:
        j = line.find(w, pos)
        while j >= 0:
            end = j + len(w)
            inside = [k for k, (s, e, _) in enumerate(toks) if s >= j and e <= end]
            cut = any(s < j < e or s < end < e for s, e, _ in toks)
            if inside and not cut:
                break
            j = line.find(w, j + 1)
        if j < 0:
            return None, w
        placed.append(inside)
        pos = j + len(w)
    return placed, None


def numbers_in(text: str) -> list[float]:
    """The numbers a printed string or a ledger value holds: LaTeX powers of ten read
    (1.04\\times 10^{-4} -> 1.04e-4), thousands separators dropped, "1e-6" read whole."""
    t = re.sub(r"(\d+(?:\.\d+)?)\s*\\times\s*10\^\{?(-?\d+)\}?", r"\1e\2", str(text))
    t = re.sub(r"(?<![\d.])10\^\{?(-?\d+)\}?", r"1e\1", t)
    t = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", t)
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", t)]


def _corresponds(printed: str, values: list[str]) -> bool:
    """Every number printed is one of the ledger values' numbers, or that number as a
    percentage (31% -> 0.31)."""
    have = [x for v in values for x in numbers_in(v)]
    for x in numbers_in(printed):
        if not any(abs(x - h) <= 1e-9 * max(1.0, abs(h)) or abs(x / 100 - h) <= 1e-9 * max(1.0, abs(h)) for h in have):
            return False
    return True


def inventory_problems(inv: dict, ledger_rows: dict[str, str], papers_dir=None) -> list[str]:
    """Everything wrong with the inventory: a number not printed where it says, a number whose
    claim is not a ledger row or whose printed value is not the row's value (unless a note says
    why the forms differ), a ledger row no printed number points to, a paper file whose sha256 is
    not the one read. ledger_rows: row id -> the paper's value as the ledger writes it."""
    probs = []
    rows = set(ledger_rows)
    used = {c for st in inventory_statements(inv) for c in st["claims"]}  # a qualitative entry: a statement's
    for n in inventory_numbers(inv):
        for c in n["claims"]:
            if c not in rows:
                probs.append(f"{n['paper']} line {n['line']}: {n['printed']!r} points to {c!r}, not a ledger row")
            used.add(c)
        known = [ledger_rows[c] for c in n["claims"] if c in rows]
        if known and not n["verbal"] and not n["note"] and not _corresponds(n["printed"], known):
            probs.append(f"{n['paper']} line {n['line']}: printed {n['printed']!r} is not the ledger's value "
                         f"{' / '.join(known)} ({', '.join(n['claims'])})")
    for r in sorted(rows - used):
        probs.append(f"ledger row {r!r}: no printed number or statement in the inventory points to it")
    probs += statement_problems(inv, rows, papers_dir)
    if papers_dir is not None:
        for paper, meta in inv["papers"].items():
            for name, sha in meta["files"].items():
                p = Path(papers_dir) / name
                got = hashlib.sha256(p.read_bytes()).hexdigest()
                if got != sha:
                    probs.append(f"{name}: sha256 {got} is not the one the inventory was read from ({sha})")
        for paper, items in (inv.get("numbers") or {}).items():
            for it in items:
                name = _paper_file(inv, paper, it)
                lines = _lines(papers_dir, name)
                ln = int(it["line"])
                if not 1 <= ln <= len(lines):
                    probs.append(f"{name}: no line {ln}")
                    continue
                line = lines[ln - 1]
                toks = tokens(line)
                wanted = [str(p[0]) for p in it.get("numbers") or []]
                if it.get("verbal"):
                    missing = [w for w in wanted if w not in line]
                    probs += [f"{name}:{ln}: {w!r} is not printed there" for w in missing]
                    continue
                placed, miss = _find_seq(line, wanted, toks)
                if miss is not None:
                    probs.append(f"{name}:{ln}: {miss!r} is not printed there (in order, as a whole number)")
                skips = [str(s[0]) for s in it.get("skip") or []]
                placed_s, miss_s = _find_seq(line, skips, toks)
                if miss_s is not None:
                    probs.append(f"{name}:{ln}: skipped token {miss_s!r} is not printed there (in order)")
    return probs


def token_audit(inv: dict, papers_dir) -> dict:
    """Every numeric token in the papers: inventoried as a claim, skipped with a reason in the
    inventory, set aside by a rule (with the rule's name), or unaccounted."""
    claimed: dict[tuple[str, int], set[int]] = {}
    rest_reason: dict[tuple[str, int], str] = {}
    skipped: dict[tuple[str, int], set[int]] = {}
    for paper, items in (inv.get("numbers") or {}).items():
        for it in items:
            name = _paper_file(inv, paper, it)
            line = _lines(papers_dir, name)[int(it["line"]) - 1]
            toks = tokens(line)
            key = (name, int(it["line"]))
            if not it.get("verbal"):
                placed, _ = _find_seq(line, [str(p[0]) for p in it.get("numbers") or []], toks)
                claimed.setdefault(key, set()).update(k for ks in placed or [] for k in ks)
            placed, _ = _find_seq(line, [str(s[0]) for s in it.get("skip") or []], toks)
            skipped.setdefault(key, set()).update(k for ks in placed or [] for k in ks)
            if it.get("skip_rest"):  # every other token of the line, for the reason given
                rest_reason[key] = str(it["skip_rest"])
    out = {"tokens": 0, "claimed": 0, "skipped": 0, "rules": {}, "unaccounted": []}
    for paper, meta in inv["papers"].items():
        for name in meta["files"]:
            refs = False
            for ln, line in enumerate(_lines(papers_dir, name), 1):
                if line.strip() == "References" or line.startswith("| Comments:"):
                    refs = True  # the reference list, or the arXiv page furniture under the abstract
                for k, (s, e, tok) in enumerate(tokens(line)):
                    out["tokens"] += 1
                    if k in claimed.get((name, ln), ()):
                        out["claimed"] += 1
                    elif k in skipped.get((name, ln), ()):
                        out["skipped"] += 1
                    else:
                        why = classify(line, s, e, refs) or rest_reason.get((name, ln))
                        if why:
                            out["rules"][why] = out["rules"].get(why, 0) + 1
                        else:
                            out["unaccounted"].append(f"{name}:{ln}: {tok!r} …{line[max(0, s - 30):e + 15]}…")
    return out


# ------------------------------------------------------------------ the coverage line

NOT_COMPUTED_STATUS = "not computed by the pipeline"


def coverage(rows: list[dict], inv: dict | None) -> dict:
    """Counts for the coverage line from the claims rows (build_rows) and the inventory."""
    c = {"numbers": len(inventory_numbers(inv)) if inv else None, "entries": len(rows),
         "agrees": 0, "differs": 0, "not run": 0, "not computed": 0, "other": 0}
    for r in rows:
        s = r["status"].split(" (")[0]
        if s == "agrees":
            c["agrees"] += 1
        elif s == "differs":
            c["differs"] += 1
        elif s == "not run":
            c["not run"] += 1
        elif s == NOT_COMPUTED_STATUS:
            c["not computed"] += 1
        else:
            c["other"] += 1
    if inv:
        ids = {r["id"] for r in rows}
        c["unlisted"] = sum(1 for n in inventory_numbers(inv) if not set(n["claims"]) & ids)
        c["statements"] = _statement_verdicts(inventory_statements(inv), {r["id"]: r["status"].split(" (")[0] for r in rows})
    return c


def _statement_verdicts(statements: list[dict], status: dict[str, str]) -> dict:
    """Counts of quantified statements: checked by entries (agrees when every row agrees, differs
    when any differs, not run when any is not run and none differs, else other) or with a reason."""
    out = {"statements": len(statements), "checked": 0, "agrees": 0, "differs": 0, "not run": 0, "other": 0,
           "reason": 0, "unaccounted": 0}
    for st in statements:
        got = [status.get(c) for c in st["claims"]]
        if not got:
            out["reason" if statement_reason(st["reason"]) else "unaccounted"] += 1
            continue
        out["checked"] += 1
        if all(g == "agrees" for g in got):
            out["agrees"] += 1
        elif "differs" in got:
            out["differs"] += 1
        elif "not run" in got:
            out["not run"] += 1
        else:
            out["other"] += 1
    return out


def coverage_line(c: dict) -> str:
    nums = "?" if c["numbers"] is None else str(c["numbers"])
    s = (f"coverage: {nums} numbers in the papers / {c['entries']} entries / {c['agrees']} agrees / "
         f"{c['differs']} differs / {c['not run']} not run / {c['not computed']} not computed")
    if c["other"]:
        s += f" / {c['other']} other (partial, no row, table not built, not comparable)"
    if c.get("unlisted"):
        s += f" / {c['unlisted']} paper numbers without an entry"
    st = c.get("statements")
    if st and st["statements"]:
        s += (f"; {st['statements']} qualitative statements / {st['checked']} checked by entries ({st['agrees']} agree / "
              f"{st['differs']} differ / {st['not run']} not run / {st['other']} other) / {st['reason']} with a reason")
        if st["unaccounted"]:
            s += f" / {st['unaccounted']} without either"
    return s


def main(argv=None) -> int:
    """python -m headgeom.verify.claims_coverage [PAPERS_DIR]: the inventory's problems and the numeric-token
    audit of the papers (default: docs/papers)."""
    import sys


    root = Path(__file__).resolve().parents[2]
    papers = Path((argv if argv is not None else sys.argv[1:] or [root / "docs" / "papers"])[0])
    inv = load_inventory(root / "config" / "paper_numbers.yaml")
    rows, _ = build_rows(load_ledger(root / "config" / "claims.yaml"), root / "no-such-dir", [])
    probs = inventory_problems(inv, {r["id"]: r["paper_value"] for r in rows}, papers)
    a = token_audit(inv, papers)
    nums = inventory_numbers(inv)
    sts = inventory_statements(inv)
    print(f"inventory: {len(nums)} printed numbers ({sum(n['verbal'] for n in nums)} in words), "
          f"{len({c for n in nums for c in n['claims']})} ledger rows claimed, {len(sts)} qualitative statements "
          f"({sum(1 for x in sts if x['claims'])} checked by ledger rows), {len(probs)} problems")
    print(f"numeric tokens in the papers: {a['tokens']}: {a['claimed']} in inventoried numbers, "
          f"{a['skipped']} skipped by the inventory with a reason, {sum(a['rules'].values())} set aside by rule, "
          f"{len(a['unaccounted'])} unaccounted")
    for k, v in sorted(a["rules"].items(), key=lambda kv: -kv[1]):
        print(f"  {v:5d}  {k}")
    for p in probs + a["unaccounted"]:
        print(p)
    return 1 if probs or a["unaccounted"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
