"""The forms a ledger value is written in (config/claims.yaml) and the rule that judges each
(``rule_of``, ``agrees``), and the reducers that make one value of the cells an entry reads
(``reduce_values``, ``reduce_per``). headgeom.publish.claims reads the ledger and the tables with them."""

from __future__ import annotations

import math
import numbers
import re
import statistics
from decimal import Decimal, InvalidOperation

# ------------------------------------------------------------------ values


def _num(s):
    """float of a cell or claim value (NaN and ±inf as written: "nan", "inf"), or None."""
    if s is None:
        return None
    if isinstance(s, bool):
        return None
    if isinstance(s, (int, float)):
        return float(s)
    text = str(s).strip()
    m = _NPREPR.match(text)  # "np.float64(25.0)": a numpy scalar's repr in a CSV cell
    if m:
        text = m.group(1)
    try:
        return float(text)
    except ValueError:
        return None


def _finite(x) -> bool:
    """A number a verdict can rest on: a real number, not NaN, not ±inf, not None or a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _whole(x) -> bool:
    """A finite whole number (an int, or a float with no fractional part)."""
    return _finite(x) and float(x) == int(x)


def _integer(x) -> bool:
    """A count as the reducers make one: an integer (not a bool, not a float)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


_NPREPR = re.compile(r"^np\.\w+\((.*)\)$")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# a range: two numbers joined by an en or em dash, "--" (LaTeX), a hyphen (with or without spaces) or "to"
_RANGE = re.compile(rf"^\s*({_NUMBER})\s*(?:–|—|--|-|\bto\b)\s*({_NUMBER})\s*$")
_FRAC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_OF = re.compile(r"^\s*(\d+)\s+of\s+(\d+)\s*$")  # "13 of 18": k of n, as "13/18"
_BOUND = re.compile(r"^\s*(<=|>=|<|>|≤|≥)\s*(\S+)\s*$")
_PERCENT = re.compile(r"\s*%")


def canonical(claim) -> str:
    """A claim as the rules read it: percent signs dropped (the ledger's numbers are in the
    paper's units: "98.6%" and "98.6 %" are 98.6), "k of n" as "k/n", spaces trimmed."""
    c = _PERCENT.sub("", str(claim)).strip()
    m = _OF.match(c)
    return f"{m.group(1)}/{m.group(2)}" if m else c


def _half_unit(text: str) -> float:
    """Half a unit in the last printed digit of a number as written ("0.059" -> 0.0005,
    "1.04e-4" -> 5e-7, "338" -> 0.5)."""
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        return 0.0
    return 0.5 * 10.0 ** d.as_tuple().exponent


def _fmt(x) -> str:
    if isinstance(x, str):
        return x
    if x is None:
        return "–"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if x == int(x) and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.4g}"
    return str(x)


# ------------------------------------------------------------------ the rules, one per kind of statement
#
# Which rule judges a claim follows from how its value is written (and its tol); rule_of names it:
#   value       "0.336", "1.04e-4": equal at the printed precision, ± half a unit in the last printed
#               digit ("3.98" agrees with 3.975 .. 3.985); tol: <number> gives an absolute width instead
#   range       "0.842 – 0.886" (reduce: range): each end at its printed precision
#   near        "near 0.012", "of order 1e-10" (or a bare number with tol: near / tol: order):
#               symmetric on a log scale, |log10(x / v)| ≤ LOG_WIDTHS[...] (near: a factor 2 either
#               way; of order: half a decade, a factor √10 ≈ 3.16 either way)
#   bound       "< 1e-3", "≥ 98.6" and the words "below", "above", "at least", "at most", "less
#               than", "more than": the value against the printed bound, exactly (no rounding slack)
#   within      "within 18 – 27", "within {0, 7, 9}": every value read lies in the range (ends at
#               printed precision) or the set
#   set         "{0, 7, 9, 18, 19, 21}": the values read (reduce: list or each) are exactly this set
#   fraction    "7205/7304": k of n, both exactly
#   quantified  "all", "every", "none", "no", "most", "less than half", "at least k of n", "exactly k of n",
#               each optionally followed by a predicate ("all > 0", "every < 1e-3", "all near 0.012",
#               "none ≥ 0.9", "all within 0.8 – 1", "all positive", "all true"): the predicate is
#               applied to every value read (reduce: each) and the quantifier to how many hold; without
#               a predicate a value is true when nonzero ("True"), and a "k/n" count is read as k of n

LOG_WIDTHS = {"near": math.log10(2.0), "order": 0.5}  # decades either way
_BOUND_WORDS = (("at least", "≥"), ("at most", "≤"), ("less than", "<"), ("more than", ">"),
                ("below", "<"), ("above", ">"))
_QUANTS = ("less than half", "at least", "exactly", "every", "none", "most", "all", "no")
_NEAR = re.compile(r"^\s*(near|of order|about)\s+(\S+)\s*$")
_SET = re.compile(r"^\s*\{([^}]*)\}\s*$")
_WITHIN = re.compile(r"^\s*within\s+(.*)$")
_K_OF_N = re.compile(r"^(\d+)\s+of\s+(\d+)\s*(.*)$")


def _bound_form(c: str) -> str:
    """A bound written in words as the same bound in symbols ("at least 98.6" -> "≥ 98.6")."""
    for word, sym in _BOUND_WORDS:
        if c.startswith(word + " "):
            return f"{sym} {c[len(word):].strip()}"
    return c


def _quantifier(c: str):
    """(quantifier, k, n, predicate) of a quantified claim, or None."""
    for q in _QUANTS:
        if c == q or c.startswith(q + " "):
            rest = c[len(q):].strip()
            if q in ("at least", "exactly"):  # "at least k of n ...": quantified; "at least 98.6": a bound
                m = _K_OF_N.match(rest)
                return (q, int(m.group(1)), int(m.group(2)), m.group(3).strip()) if m else None
            return q, None, None, rest
    return None


def rule_of(claim, tol=None) -> str:
    """The name of the rule that judges a claim written this way (the kinds listed above)."""
    c = canonical(claim)
    if _quantifier(c):
        return "quantified"
    if _SET.match(c):
        return "set"
    if _WITHIN.match(c):
        return "within"
    if _NEAR.match(c) or (tol in LOG_WIDTHS and _num(c) is not None):
        return "near"
    if _BOUND.match(_bound_form(c)):
        return "bound"
    if _FRAC.match(c):
        return "fraction"
    if _RANGE.match(c):
        return "range"
    return "value"


def _readable_number(text: str) -> bool:
    return _finite(_num(text))


def _range_ends(text: str):
    """The two ends of a printed range as written ("0.842 – 0.886" -> ("0.842", "0.886")), or None."""
    m = _RANGE.match(canonical(text))
    return (m.group(1), m.group(2)) if m and _readable_number(m.group(1)) and _readable_number(m.group(2)) else None


def unreadable(claim, tol=None) -> str | None:
    """Why the rules cannot read a claim as written, or None when they can. A value must be a
    finite number, a list of numbers (reduce: list) or a truth ("True"); a form the parser cannot
    read is refused when the ledger loads, not kept as a value that can never agree."""
    c = canonical(claim)
    rule = rule_of(c, tol)
    if rule == "quantified":
        q, k, n, pred = _quantifier(c)
        if k is not None and not 0 <= k <= n:
            return f"{k} of {n}: k must lie in 0 .. n"
        try:
            _predicate(pred, tol)
        except ValueError as err:
            return str(err)
        return None
    if rule == "set":
        return None if _set_of(c) is not None else "a set of numbers ({a, b, ...}) with a part that is not a number"
    if rule == "within":
        inner = _WITHIN.match(c).group(1)
        return None if _set_of(inner) is not None or _range_ends(inner) else f"'within' needs a range or a set, not {inner!r}"
    if rule == "near":
        m = _NEAR.match(c)
        v = _num(m.group(2)) if m else _num(c)
        return None if _finite(v) and v != 0 else "'near' / 'of order' needs a finite nonzero number"
    if rule == "bound":
        return None if _readable_number(_BOUND.match(_bound_form(c)).group(2)) else "a bound needs a finite number"
    if rule in ("fraction", "range"):
        return None if rule == "fraction" or _range_ends(c) else "a range needs two finite numbers"
    if _readable_number(c) or c in ("True", "False", "true", "false"):
        return None
    parts = [x.strip() for x in c.split(",")]
    if len(parts) > 1 and all(_readable_number(x) for x in parts):
        return None  # a list of numbers, as reduce: list shows the cells ("7, 9")
    return "not a number, range, bound, fraction, set or quantified statement the rules read"


def _agree_number(claim: str, x, tol) -> bool:
    v = _num(claim)
    if not _finite(v) or not _finite(x):
        return False
    if tol in LOG_WIDTHS:
        return _near(v, x, LOG_WIDTHS[tol])
    if isinstance(tol, (int, float)) and not isinstance(tol, bool):
        return abs(x - v) <= float(tol)
    return abs(x - v) <= _half_unit(claim) * (1 + 1e-9) + 1e-12 * abs(v)


def _near(v, x, width: float) -> bool:
    """Symmetric on a log scale: x within `width` decades of v either way (same sign, both nonzero, finite)."""
    if not _finite(v) or not _finite(x) or v == 0 or x == 0 or (v > 0) != (x > 0):
        return False
    return abs(math.log10(x / v)) <= width * (1 + 1e-12)


def _values_of(got) -> list[float] | None:
    """Every value read, as numbers: a list (reduce: each / list), a (lo, hi) range, a number, or a
    ", "-joined string of numbers; None when any of them is missing, NaN or ±inf (a verdict needs
    finite evidence)."""
    if isinstance(got, str):
        parts = [p for p in (x.strip() for x in got.split(",")) if p]
        vals = [_num(p) if _num(p) is not None else (None if _truth(p) is None else float(_truth(p))) for p in parts]
    elif isinstance(got, (list, tuple)):
        vals = [_num(v) if not isinstance(v, bool) else float(v) for v in got]
    elif isinstance(got, (int, float)) and not isinstance(got, bool):
        vals = [float(got)]
    else:
        return None
    return vals if vals and all(_finite(v) for v in vals) else None


def _in_range(text: str, v) -> bool:
    ends = _range_ends(text)
    if not ends or not _finite(v):
        return False
    lo, hi = ends
    return _num(lo) - _half_unit(lo) * (1 + 1e-9) <= v <= _num(hi) + _half_unit(hi) * (1 + 1e-9)


def _set_of(text: str) -> set[float] | None:
    m = _SET.match(text)
    if not m:
        return None
    vals = [_num(x) for x in m.group(1).split(",") if x.strip()]
    return None if not vals or not all(_finite(v) for v in vals) else set(vals)


def _predicate(pred: str, tol):
    """A test of one (finite) value for a quantified claim's predicate ("> 0", "near 0.012",
    "within a – b", "positive", "true"; "" or "true": nonzero)."""
    p = canonical(pred)
    if p in ("", "true", "hold", "holds"):
        return lambda v: v != 0
    if p == "false":
        return lambda v: v == 0
    if p == "positive":
        return lambda v: v > 0
    if p == "negative":
        return lambda v: v < 0
    m = _WITHIN.match(p)
    if m:
        s = _set_of(m.group(1))
        if s is not None:
            return lambda v: v in s
        if _range_ends(m.group(1)):
            return lambda v: _in_range(m.group(1), v)
        raise ValueError(f"claims: cannot read the predicate {pred!r}")
    m = _NEAR.match(p)
    if m and _finite(_num(m.group(2))):
        width = LOG_WIDTHS["order" if m.group(1) == "of order" else (tol if tol in LOG_WIDTHS else "near")]
        v0 = _num(m.group(2))
        return lambda v: _near(v0, v, width)
    b = _BOUND.match(_bound_form(p))
    if b and _readable_number(b.group(2)):
        return lambda v: _bound_holds(b.group(1), _num(b.group(2)), v)
    if _readable_number(p):
        return lambda v: _agree_number(p, v, tol)
    raise ValueError(f"claims: cannot read the predicate {pred!r}")


def _bound_holds(op: str, b, x) -> bool:
    if not _finite(b) or not _finite(x):
        return False
    return {"<": x < b, "<=": x <= b, "≤": x <= b, ">": x > b, ">=": x >= b, "≥": x >= b}[op]


def _count(got, of: bool = True):
    """(k, n) of a "k/n" count: two integers, 0 ≤ k ≤ n where k counts n's members (of), else None
    (a float, even 13.0, is not a count: a (lo, hi) range read from a cell must not pass for one).
    A printed fraction may also be a pair of counts ("28 / 4": query heads / KV heads): of=False."""
    if isinstance(got, tuple) and len(got) == 2 and all(_integer(v) for v in got) and 0 <= got[0] \
            and (got[0] <= got[1] or not of):
        return int(got[0]), int(got[1])
    return None


def _quantified(c: str, got, tol) -> bool:
    """The quantifier over how many values hold the predicate. Every value must be finite: a NaN,
    ±inf or missing value is not "does not hold", it makes the statement unjudged (no agreement)."""
    q, k0, n0, pred = _quantifier(c)
    if not pred and isinstance(got, tuple) and len(got) == 2:
        kn = _count(got)  # a "k/n" count read as k of n; a fractional or non-finite count is no count
        if kn is None:
            return False
        k, n = kn
    else:
        vals = _values_of(got)
        if vals is None:
            return False
        test = _predicate(pred, tol)
        k, n = sum(1 for v in vals if test(v)), len(vals)
    if n == 0:
        return False
    if q in ("all", "every"):
        return k == n
    if q in ("none", "no"):
        return k == 0
    if q == "most":
        return 2 * k > n
    if q == "less than half":
        return 2 * k < n
    if q == "exactly":
        return k == k0 and n == n0
    return k >= k0 and n == n0  # at least k of n


def agrees(claim, got, tol=None) -> bool:
    """Does the pipeline's value agree with the claim as printed? (the rule: rule_of)

    claim: the paper's value as the ledger writes it (above); got: the pipeline's value (float,
    (lo, hi) for a range, (k, n) for a fraction, a list for reduce: each, or a cell string). A
    verdict needs finite evidence: None, NaN or ±inf, alone or among the values, never agrees,
    and a fraction's or count's k and n must be whole numbers."""
    c = canonical(claim)
    if got is None:
        return False
    rule = rule_of(c, tol)
    if rule == "quantified":
        return _quantified(c, got, tol)
    if rule == "set":
        vals = _values_of(got)
        return vals is not None and set(vals) == _set_of(c)
    if rule == "within":
        vals = _values_of(got)
        inner = _WITHIN.match(c).group(1)
        s = _set_of(inner)
        return vals is not None and all((v in s) if s is not None else _in_range(inner, v) for v in vals)
    if isinstance(got, list):
        return False  # a list of values is judged only by the rules above
    if isinstance(got, str):
        got_s = got.strip()
        m = _FRAC.match(got_s)
        if m:
            got = (int(m.group(1)), int(m.group(2)))
        elif _RANGE.match(got_s):
            m = _RANGE.match(got_s)
            got = (_num(m.group(1)), _num(m.group(2)))
        elif _num(got_s) is not None:
            got = _num(got_s)
        elif rule == "value" and _num(c) is None:  # a list of cells as reduce: list shows it ("7, 9")
            return re.sub(r"\s+", "", got_s) == re.sub(r"\s+", "", c) and _values_of(got_s) is not None
        else:
            return False
    if rule == "near":
        m = _NEAR.match(c)
        v0 = _num(m.group(2)) if m else _num(c)
        width = LOG_WIDTHS["order" if (m and m.group(1) == "of order") else (tol if tol in LOG_WIDTHS else "near")]
        return isinstance(got, (int, float)) and _near(v0, got, width)
    if rule == "bound":
        m = _BOUND.match(_bound_form(c))
        return isinstance(got, (int, float)) and _bound_holds(m.group(1), _num(m.group(2)), got)
    if rule == "fraction":
        m = _FRAC.match(c)
        return _count(got, of=False) == (int(m.group(1)), int(m.group(2)))
    if rule == "range":
        lo, hi = _range_ends(c)
        if not (isinstance(got, tuple) and len(got) == 2):
            return False
        return _agree_number(lo, got[0], tol) and _agree_number(hi, got[1], tol)
    if isinstance(got, (int, float)):
        return _agree_number(c, got, tol)
    return False


def _truth(cell) -> int | None:
    """1 / 0 for a boolean or numeric cell ("True", "False", "1", "0.0"); None otherwise (empty cells too)."""
    t = str(cell).strip()
    if t in ("True", "true"):
        return 1
    if t in ("False", "false"):
        return 0
    v = _num(t)
    return None if v is None or math.isnan(v) else int(v != 0)


def _is_nan_cell(cell) -> bool:
    v = _num(cell)
    return v is not None and math.isnan(v)


def nan_rule(entry: dict) -> str | None:
    """Why an entry leaves NaN cells out of its reduction (``nan: "exclude: <why>"``), or None: by
    default a NaN cell is kept and the entry cannot agree."""
    rule = str(entry.get("nan") or "").strip()
    return rule[len("exclude:"):].strip() if rule.startswith("exclude:") else None


def _frac_of(cell: str):
    m = _FRAC.match(cell or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def reduce_values(cells: list[str], how: str):
    """Combine the cells of several rows; returns (value for agreement, display string).

    NaN cells ("nan") are never dropped here: min, max, sum, median and range of cells with a NaN
    are NaN (shown with how many cells were NaN), one is NaN, each and list keep the NaN (which no
    rule agrees with), count, countfrac, sumfrac, sumfrac_pct and sumden read no value from a NaN
    cell (None), and rows counts the rows read whatever they hold. An entry that means to leave
    NaN cells out says so and why (``nan: "exclude: <why>"``, nan_rule); the row's note then
    says how many it excluded."""
    if how == "sumden":  # the denominators of "k/n" cells added: how many the fractions count
        fr = [_frac_of(c) for c in cells]
        if any(f is None for f in fr):
            return None, "; ".join(cells)
        n = sum(f[1] for f in fr)
        return float(n), str(n)
    if how in ("sumfrac", "sumfrac_pct"):
        fr = [_frac_of(c) for c in cells]
        if any(f is None for f in fr):
            return None, "; ".join(cells)
        k, n = sum(f[0] for f in fr), sum(f[1] for f in fr)
        if how == "sumfrac":
            return (k, n), f"{k}/{n}"
        pct = 100.0 * k / n if n else float("nan")
        return pct, f"{pct:.2f} ({k}/{n})"
    if how == "list":  # the cells themselves, in row order ("7, 9"): a list of layers
        shown = ", ".join(_fmt(_num(c)) if _num(c) is not None else c for c in cells)
        return shown, shown
    if how == "each":  # every value read, for a quantified claim ("all > 0"): numbers, or 1/0 for a truth
        vals = [_num(c) if _num(c) is not None else _truth(c) for c in cells]
        if any(v is None for v in vals):
            return None, "; ".join(cells)
        vals = [float(v) for v in vals]
        return vals, ", ".join(_fmt(v) for v in vals)
    if how == "rows":  # how many rows were read (with over_rows: how many rows the filters match)
        return float(len(cells)), str(len(cells))
    if how in ("count", "countfrac"):  # cells that are true ("True", or a nonzero number): how many, of how many
        vals = [_truth(c) for c in cells]
        if any(v is None for v in vals):
            return None, "; ".join(cells)
        k = sum(vals)
        return ((float(k), f"{k}") if how == "count" else ((k, len(vals)), f"{k}/{len(vals)}"))
    if how == "one":
        c = cells[0]
        v = _num(c)
        return (v if v is not None else c), (_fmt(v) if v is not None and not _frac_of(c) else c)
    nums = [_num(c) for c in cells]
    if any(v is None for v in nums):
        return None, "; ".join(cells)
    nan = sum(1 for v in nums if math.isnan(v))
    if nan:  # no silent default: a NaN cell makes the reduction NaN (an entry may exclude them: nan_rule)
        shown = f"nan ({nan} of {len(nums)} cells NaN)"
        return ((float("nan"), float("nan")) if how == "range" else float("nan")), shown
    if how == "range":
        lo, hi = min(nums), max(nums)
        return (lo, hi), f"{_fmt(lo)} – {_fmt(hi)}"
    if how == "min":
        return min(nums), _fmt(min(nums))
    if how == "max":
        return max(nums), _fmt(max(nums))
    if how == "sum":
        s = sum(nums)
        return s, _fmt(s)
    if how == "median":
        med = statistics.median(nums)
        return med, _fmt(med)
    raise ValueError(how)


def reduce_per(cells: list[str], per: list[str], how: str):
    """The reducers that read a second column, the entry's ``per``, from the same rows:

    ratio       the column's cells added over per's added (58,432 draws / 7,304 heads: draws per head)
    countof     (k, n): the column's counts added, of per's added (pairs below every null value, of pairs)
    sharecount  (k, n): share × per in each row (a share of pairs as the count it is of), added

    NaN in either column makes a ratio NaN and a count None; a count must come out whole (a share
    that is not k/n of its rows is no count); a cell that is not a number gives None."""
    num, den = [_num(c) for c in cells], [_num(c) for c in per]
    if not num or len(num) != len(den) or any(v is None for v in num + den):
        return None, "; ".join(cells)
    if any(math.isnan(v) for v in num + den):
        return (float("nan"), "nan") if how == "ratio" else (None, "nan")
    if how == "ratio":
        if sum(den) == 0:
            return None, "; ".join(cells)
        r = sum(num) / sum(den)
        return r, f"{_fmt(r)} ({_fmt(sum(num))}/{_fmt(sum(den))})"
    ks = [a * b for a, b in zip(num, den)] if how == "sharecount" else num
    ks = [round(k) if _finite(k) and abs(k - round(k)) <= 1e-6 * max(1.0, abs(k)) else None for k in ks]
    if any(k is None for k in ks) or not all(_whole(n) for n in den):
        return None, "; ".join(cells)
    k, n = int(sum(ks)), int(sum(den))
    return (k, n), f"{k}/{n}"
