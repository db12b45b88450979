"""The ledger never agrees by accident: a verdict needs finite evidence (NaN, ±inf and missing
values, alone or among the values read, never agree under any rule), counts are whole numbers,
every reducer's NaN handling is the one its docstring states, the papers' printed forms parse (and
a form no rule reads is an error when the ledger loads), and the macros write ``--`` for no value."""

from __future__ import annotations

import math

import pytest

from headgeom.core.errors import ConfigError
from ledger_tables import write_table
from headgeom.publish.claim_forms import agrees, canonical, reduce_per, reduce_values, rule_of, unreadable
from headgeom.publish.claims import AGREES, DIFFERS, LedgerError, build_rows, load_ledger

NAN, INF = float("nan"), float("inf")
BAD = [NAN, INF, -INF, None]

# one claim per rule, each with a finite value that agrees (so a refusal below is the bad value's doing)
RULES = [
    ("value", "0.336", None, 0.336, lambda x: x),
    ("range", "0.842 – 0.886", None, (0.842, 0.886), lambda x: (0.842, x)),
    ("near", "near 0.012", None, 0.012, lambda x: x),
    ("near", "1e-10", "order", 1e-10, lambda x: x),
    ("bound", "at least 98.6", None, 99.0, lambda x: x),
    ("bound", "< 1e-6", None, 1e-7, lambda x: x),
    ("bound", "> 0.1", None, 0.2, lambda x: x),
    ("within", "within 18 – 27", None, [19, 27], lambda x: [19, x]),
    ("within", "within {0, 7, 9}", None, [0, 7], lambda x: [0, x]),
    ("set", "{0, 7, 9}", None, [0, 7, 9], lambda x: [0, 7, 9, x]),
    ("fraction", "13/18", None, (13, 18), lambda x: (13, x)),
    ("quantified", "all > 0", None, [1.0, 2.0], lambda x: [1.0, x]),
    ("quantified", "none", None, [0.0, 0.0], lambda x: [0.0, x]),
    ("quantified", "no < 0", None, [0.5], lambda x: [0.5, x]),
    ("quantified", "none ≥ 0.9", None, [0.1], lambda x: [0.1, x]),
    ("quantified", "all near 0.012", None, [0.012], lambda x: [0.012, x]),
    ("quantified", "all within 0.8 – 1", None, [0.9], lambda x: [0.9, x]),
    ("quantified", "most", None, [1.0, 1.0, 0.0], lambda x: [1.0, 1.0, x]),
    ("quantified", "less than half", None, [1.0, 0.0, 0.0], lambda x: [1.0, 0.0, x]),
    ("quantified", "exactly 2 of 3 ≥ 10", None, [10, 12, 3], lambda x: [10, 12, x]),
    ("quantified", "at least 2 of 3 ≥ 10", None, [10, 12, 3], lambda x: [10, 12, x]),
]


@pytest.mark.parametrize("rule, claim, tol, good, inside", RULES, ids=[f"{r[0]}|{r[1]}" for r in RULES])
@pytest.mark.parametrize("bad", BAD, ids=["nan", "+inf", "-inf", "None"])
def test_no_rule_agrees_with_a_value_that_is_not_finite(rule, claim, tol, good, inside, bad):
    assert rule_of(claim, tol) == rule
    assert agrees(claim, good, tol), "the finite value agrees"
    assert not agrees(claim, bad, tol), f"{claim!r} agreed with {bad!r} alone"
    assert not agrees(claim, [bad], tol), f"{claim!r} agreed with [{bad!r}]"
    assert not agrees(claim, inside(bad), tol), f"{claim!r} agreed with {inside(bad)!r}"
    if bad is not None:
        text = "nan" if math.isnan(bad) else str(bad)
        assert not agrees(claim, text, tol), f"{claim!r} agreed with the cell {text!r}"


def test_the_issue_cases():
    assert not agrees("at least 98.6", INF)
    assert not agrees("< 1e-6", -INF)
    assert not agrees("all > 0", [INF])
    for claim in ("none", "no < 0", "none ≥ 0.9"):
        assert not agrees(claim, [NAN]), claim
    assert not agrees("exactly 5 of 7 ≥ 10", [10, 11, 12, 13, 14, NAN, NAN])
    assert agrees("exactly 5 of 7 ≥ 10", [10, 11, 12, 13, 14, 1, 2])  # the same with finite values


@pytest.mark.parametrize("got", [(13.7, 18.2), (13.5, 18), (13, 18.5), "13 – 18", (13.0, 18.0), (NAN, 18), (13, INF),
                                 (13, None), (-1, 18), (19, 18), (True, 18)])
def test_fractions_and_counts_are_whole_numbers(got):
    assert not agrees("13/18", got)
    assert not agrees("13 of 18", got)
    if isinstance(got, tuple):
        for q in ("all", "most", "none", "less than half"):
            assert not agrees(q, (18.5, 18.5) if q == "all" else got), (q, got)
    assert agrees("13/18", (13, 18)) and agrees("13 of 18", "13/18")
    assert agrees("28 / 4", (28, 4)) and agrees("28 / 4", "28 / 4")  # a pair of counts (query heads / KV heads)
    assert not agrees("28 / 4", (28.0, 4.0)) and not agrees("most", (28, 4))  # k of n needs k ≤ n


def test_fractional_counts_make_no_quantified_verdict():
    assert agrees("most", (590, 1180)) is False and agrees("most", (591, 1180))
    assert not agrees("most", (1088.5, 1180))
    assert not agrees("all", (510.0000001, 510.0000001))
    assert not agrees("none", (0, 2016.5))
    assert agrees("none", (0, 2016))


# ------------------------------------------------------------------ the papers' forms


@pytest.mark.parametrize("printed, claim, rule, good, bad", [
    # "At least 98.6% of pairs remain below 0.8" (paper 1, §Siblings)
    ("At least 98.6% of pairs", "at least 98.6%", "bound", 98.6, 98.59),
    ("At least 98.6% of pairs", "at least 98.6 %", "bound", 99.0, 98.0),
    # "3.98--8.00% of heads" (abstract) and "3.98–8.00% of heads" (body)
    ("3.98--8.00% of heads", "3.98--8.00%", "range", (3.98, 8.0), (3.98, 8.1)),
    ("3.98–8.00% of heads", "3.98–8.00%", "range", (3.984, 7.996), (3.97, 8.0)),
    ("0.3% が半分を下回る", "0.3%", "value", 0.3, 0.4),
    ("98.64% of heads", "98.64 %", "value", 98.64, 98.65),
    # PK: "層 18 - 27", "5.6 - 6.8%", ranges without spaces, "to"
    ("層 18 - 27 にばらつき上位 5 層", "within 18 - 27", "within", [18, 27], [17, 27]),
    ("層 18 - 27 にばらつき上位 5 層", "within 18-27", "within", [18, 27], [28]),
    ("層 18 - 27 にばらつき上位 5 層", "within 18–27", "within", [20], [17]),
    ("5.6 - 6.8%", "5.6 - 6.8%", "range", (5.6, 6.8), (5.6, 6.9)),
    ("5.6 - 6.8%", "5.6-6.8", "range", (5.6, 6.8), (5.4, 6.8)),
    ("ranges from 0.0317 to 2.512", "0.0317 to 2.512", "range", (0.0317, 2.512), (0.0317, 2.6)),
    # k of n: "9,504 ペア中 Q で 441" (441 of 9,504); "198 中 197"
    ("9,504 ペア中 Q で 441", "441 of 9504", "fraction", (441, 9504), (440, 9504)),
    ("198 中 197", "197 of 198", "fraction", "197/198", (197, 199)),
    # exponents are not ranges
    ("1.04\\times 10^{-4}", "1.04e-4", "value", 1.04e-4, 1.06e-4),
])
def test_the_papers_forms_parse(printed, claim, rule, good, bad):
    assert unreadable(claim) is None, (printed, unreadable(claim))
    assert rule_of(claim) == rule, (printed, rule_of(claim))
    assert agrees(claim, good), (printed, claim, good)
    assert not agrees(claim, bad), (printed, claim, bad)


def test_canonical_forms():
    assert canonical("at least 98.6%") == "at least 98.6" == canonical("at least 98.6 %")
    assert canonical("13 of 18") == "13/18"
    assert canonical(" 3.98–8.00% ") == "3.98–8.00"


@pytest.mark.parametrize("value", ["about", "13 of", "within 18 –", "{0, x}", "< nan", "at least inf", "near 0", "nan",
                                   "inf", "1.2.3", "all > x", "exactly 9 of 7", "0.5 – nan"])
def test_an_unreadable_form_is_an_error_when_the_ledger_loads(tmp_path, value):
    p = tmp_path / "c.yaml"
    p.write_text(f'claims:\n  pk:\n    - {{id: a, model: m, table: t, column: x, value: "{value}"}}\n')
    with pytest.raises(LedgerError, match="cannot read") as err:
        load_ledger(p)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, ValueError)


def test_every_value_of_the_ledger_is_readable():
    from pathlib import Path

    load_ledger(Path(__file__).resolve().parents[3] / "config" / "claims.yaml")  # raises on an unreadable value


# ------------------------------------------------------------------ reducers and NaN


CELLS = ["0.5", "nan", "0.2"]


@pytest.mark.parametrize("how", ["min", "max", "sum", "median"])
def test_a_reduction_over_a_nan_cell_is_nan(how):
    value, shown = reduce_values(CELLS, how)
    assert math.isnan(value) and "1 of 3 cells NaN" in shown
    assert not agrees("< 0.9", value) and not agrees("> 0.1", value)


def test_each_reducers_nan_handling():
    lo, hi = reduce_values(CELLS, "range")[0]
    assert math.isnan(lo) and math.isnan(hi) and not agrees("0.2 – 0.5", (lo, hi))
    assert math.isnan(reduce_values(["nan"], "one")[0])
    each = reduce_values(CELLS, "each")[0]
    assert math.isnan(each[1]) and not agrees("all > 0", each) and not agrees("none > 0.9", each)
    shown = reduce_values(["7", "nan"], "list")[0]
    assert shown == "7, nan" and not agrees("within {7, 9}", shown) and not agrees("7, nan", shown)
    for how in ("count", "countfrac", "sumfrac", "sumden"):
        assert reduce_values(["1/2", "nan"] if how.startswith("sum") else ["True", "nan"], how)[0] is None, how
    assert math.isnan(reduce_values(["0/0"], "sumfrac_pct")[0])
    assert reduce_values(["nan", "nan", "1"], "rows")[0] == 3  # rows counts rows, whatever they hold
    assert math.isnan(reduce_per(["8", "nan"], ["1", "1"], "ratio")[0])
    assert reduce_per(["0.5", "nan"], ["2", "2"], "sharecount")[0] is None
    assert reduce_per(["3", "1"], ["4", "nan"], "countof")[0] is None


def test_per_reducers():
    assert reduce_per(["58432"], ["7304"], "ratio")[0] == 8.0
    assert reduce_per(["0.004", "0"], ["2000", "16"], "sharecount")[0] == (8, 2016)
    assert reduce_per(["0.0041"], ["2000"], "sharecount")[0] is None  # 8.2 pairs: a share of no whole count
    assert reduce_per(["60", "270"], ["66", "378"], "countof")[0] == (330, 444)


def _write(tmp_path, rows):
    write_table(tmp_path, "t", rows)


def test_an_entry_states_its_nan_rule(tmp_path):
    """By default a NaN cell keeps a max from agreeing (the note says so); an entry that excludes
    NaN cells says why, and the note counts them."""
    _write(tmp_path, [{"model": m, "v": v} for m, v in (("a", "nan"), ("b", "0.5"))])
    base = {"id": "x", "paper": "p1", "models": ["a", "b"], "table": "t", "row": {"model": "{model}"}, "column": "v",
            "reduce": "max", "value": "< 0.9"}
    (r,) = build_rows([base], tmp_path, ["a", "b"])[0]
    assert r["status"] == DIFFERS and "1 of 2 cells NaN: no verdict" in r["note"]
    (r,) = build_rows([base | {"nan": "exclude: a model with one KV group has no control"}], tmp_path, ["a", "b"])[0]
    assert r["status"] == AGREES and r["pipeline"] == "0.5"
    assert "1 of 2 cells NaN, excluded: a model with one KV group has no control" in r["note"]


@pytest.mark.parametrize("rule", ['"exclude:"', "drop", '"exclude"'])
def test_a_nan_rule_must_say_why(tmp_path, rule):
    (tmp_path / "c.yaml").write_text(f"claims:\n  pk:\n    - {{id: a, model: m, table: t, column: x, value: 1, reduce: max, nan: {rule}}}\n")
    with pytest.raises(LedgerError, match="nan must be"):
        load_ledger(tmp_path / "c.yaml")


# ------------------------------------------------------------------ macros


def test_macros_write_no_value_for_nan_and_inf(tmp_path):
    from headgeom.publish.macros import NO_VALUE, cell_macros, pipeline_text

    for v in (NAN, INF, -INF, None, (NAN, NAN), (0.1, INF)):
        assert pipeline_text("0.336", v, "nan") == NO_VALUE, v
        assert pipeline_text("0.1 – 0.2", v, "nan") == NO_VALUE, v
    assert pipeline_text("0.336", 0.3361, "0.3361") == "0.336"
    _write(tmp_path, [{"k": "a", "v": "nan"}, {"k": "b", "v": "inf"}, {"k": "c", "v": ""}, {"k": "d", "v": "0.25"}])
    specs = [{"name": f"hgCell{k.upper()}", "table": "t", "row": {"k": k}, "column": "v"} for k in "abcd"]
    lines = cell_macros(specs, tmp_path, "0" * 64).splitlines()
    body = {ln.split("}{")[0].removeprefix("\\newcommand{\\"): ln.split("}{")[1].split("}")[0]
            for ln in lines if ln.startswith("\\newcommand")}
    assert body == {"hgCellA": NO_VALUE, "hgCellB": NO_VALUE, "hgCellC": NO_VALUE, "hgCellD": "0.25"}
