"""Every comparison rule of the claims ledger follows the sentence it judges: one rule per kind of
statement (headgeom.publish.claim_forms.rule_of), each tried on a paper's own wording with a value that
must agree and one that must differ; and the ledger entries whose reading was a choice read what
their sentence says."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from headgeom.publish.claim_forms import agrees, reduce_values, rule_of
from headgeom.publish.claims import AGREES, DIFFERS, load_ledger
from ledger_tables import judge, write_table as _write

LEDGER = Path(__file__).resolve().parents[3] / "config" / "claims.yaml"

# (the paper's sentence, the ledger's value, tol, the rule, a pipeline value that agrees, one that differs)
SENTENCES = [
    ("pooled median closure is 0.336", "0.336", None, "value", 0.3364, 0.3366),
    ("reduces median closure ... to 1.04×10^-4", "1.04e-4", None, "value", 1.044e-4, 1.046e-4),
    ("model-median g_T ranges from 0.0317 to 2.512", "0.0317 – 2.512", None, "range", (0.03174, 2.5116), (0.0318, 2.512)),
    # near: symmetric on a log scale, a factor 2 either way
    ("low-closure heads are near 0.012", "near 0.012", None, "near", 0.0095, 0.095),
    ("low-closure heads are near 0.012", "near 0.012", None, "near", 0.015, 0.0055),
    # of order (Table 2 prints 10^-10): half a decade either way
    ("λ_min(S) of order 10^-10", "1e-10", "order", "near", 9e-11, 9.9e-10),
    ("λ_min(S) of order 10^-10", "of order 1e-10", None, "near", 3e-10, 4e-10),
    ("λ_min(S) of order 10^-10", "1e-10", "order", "near", 3.2e-11, 3.1e-11),
    # bounds, exact, in symbols or words
    ("wrong-V returns are below 10^-3", "below 1e-3", None, "bound", 9.99e-4, 1e-3),
    ("At least 98.6% of pairs remain below 0.8", "at least 98.6", None, "bound", 98.6, 98.58),
    ("At least 98.6% of pairs remain below 0.8", "≥ 98.6", None, "bound", 99.9, 98.59),
    ("no strong head has g_T < 0.01", "> 0.01", None, "bound", 0.0144, 0.01),
    # within a range or a set: every value read inside
    ("the top five dispersion layers lie within layers 18–27", "within 18 – 27", None, "within", [19, 20, 22, 26, 27], [17, 20, 22, 26, 27]),
    ("the top five dispersion layers lie within layers 18–27", "within 18 – 27", None, "within", (19, 27), (18, 28)),
    ("below d/D in layers 0, 7, 9, 18, 19, 21", "within {0, 7, 9, 18, 19, 21}", None, "within", "7, 9, 21", "7, 8"),
    # a set: exactly these
    ("layers 0, 7, 9, 18, 19, 21", "{0, 7, 9, 18, 19, 21}", None, "set", "0, 7, 9, 18, 19, 21", "0, 7, 9, 18, 19"),
    ("layers 0, 7, 9, 18, 19, 21", "{0, 7, 9, 18, 19, 21}", None, "set", [21, 19, 18, 9, 7, 0], [0, 7, 9, 18, 19, 20]),
    # k of n
    ("higher closure for 7,205/7,304 heads", "7205/7304", None, "fraction", (7205, 7304), (7204, 7304)),
    # quantified
    ("positive in all nine models", "all > 0", None, "quantified", [1e-3] * 9, [1e-3] * 8 + [-1e-6]),
    ("every strong head favors its trained anchor", "all", None, "quantified", (510, 510), (509, 510)),
    ("all 20 informative layers favor the law", "all", None, "quantified", [1.0] * 20, [1.0] * 19 + [0.0]),
    ("wrong-V returns are below 10^-3 (each model median)", "all < 1e-3", None, "quantified", [1e-4, 9e-4], [1e-4, 1.1e-3]),
    ("low-closure heads near 0.012 (each model median)", "all near 0.012", None, "quantified", [0.01, 0.014, 0.02], [0.01, 0.03]),
    ("no mismatch reaches even the lowest tested threshold", "none ≥ 0.75", None, "quantified", [0.1, 0.74], [0.1, 0.75]),
    ("most strong heads contain a latent core", "most", None, "quantified", (1088, 1180), (590, 1180)),
    ("less than half the observed closure gap", "all < 0.5", None, "quantified", [0.2, 0.49], [0.2, 0.5]),
    ("a lower-bound gap less than half", "less than half", None, "quantified", [1, 0, 0], [1, 1, 0]),
    ("the five families with at least ten such pairs", "at least 5 of 7 ≥ 10", None, "quantified",
     [10, 12, 40, 11, 19, 3, 0], [10, 12, 40, 9, 19, 3, 0]),
    ("In the five families with at least ten such pairs (of seven)", "exactly 5 of 7 ≥ 10", None, "quantified",
     [10, 12, 40, 11, 19, 3, 0], [10, 12, 40, 11, 19, 30, 0]),
    ("no attainment-index gap (the interval covers 0) in OLMo and Pythia", "all true", None, "quantified",
     "True, True", "True, False"),
]


@pytest.mark.parametrize("sentence, claim, tol, rule, good, bad", SENTENCES, ids=[s[0][:40] + "|" + s[1] for s in SENTENCES])
def test_each_rule_on_the_papers_wording(sentence, claim, tol, rule, good, bad):
    assert rule_of(claim, tol) == rule
    assert agrees(claim, good, tol), f"{sentence!r}: {good} should agree with {claim!r}"
    assert not agrees(claim, bad, tol), f"{sentence!r}: {bad} should differ from {claim!r}"


def test_every_kind_of_statement_has_a_rule_and_a_sentence():
    assert {s[3] for s in SENTENCES} == {"value", "range", "near", "bound", "within", "set", "fraction", "quantified"}


def test_every_ledger_value_is_read_by_a_rule():
    """Every value in the ledger parses under the rule its form names (no quantified claim with a
    predicate the rules cannot read)."""
    from headgeom.publish.claim_forms import _predicate, _quantifier
    from headgeom.publish.claims import _expand

    for e in load_ledger(LEDGER):
        for _, val, _, tol in _expand(e):
            if rule_of(val, tol) == "quantified":
                _predicate(_quantifier(str(val).strip())[3], tol)  # raises on an unreadable predicate
                assert e.get("reduce") in ("each", "sumfrac", "countfrac", "list", "countof", "sharecount"), (e["id"], val)


def test_near_is_symmetric_on_a_log_scale():
    for width_claim, tol, factor in (("near 0.012", None, 2.0), ("1e-10", "order", math.sqrt(10))):
        v = 0.012 if width_claim.startswith("near") else 1e-10
        for f in (factor * 0.999, 1 / (factor * 0.999)):
            assert agrees(width_claim, v * f, tol)
        for f in (factor * 1.001, 1 / (factor * 1.001)):
            assert not agrees(width_claim, v * f, tol)


def test_each_reduces_to_every_value_read():
    assert reduce_values(["0.1", "0.2", "True", "0"], "each")[0] == [0.1, 0.2, 1.0, 0.0]
    assert reduce_values(["0.1", ""], "each")[0] is None  # an empty cell is not a value


# ------------------------------------------------------------------ the fixed entries


def _entry(cid):
    return next(e for e in load_ledger(LEDGER) if e["id"] == cid)


def _judge(tmp_path, cid, models_run):
    return judge(_entry(cid), tmp_path, models_run)


def test_top5_within_layers_18_to_27(tmp_path):
    """pk.appE.qwen7b.top5: 'within 18–27'; the old rule (lowest = 18 and highest = 27) called
    (19, 27) a difference."""
    def run(layers):
        _write(tmp_path, "pk_appendix_f_layer_stats", [
            {"model": "qwen2.5-7b", "scope": "within", "kind": "O", "sd_rank": r, "layer": L} for r, L in enumerate(layers, 1)])
        return _judge(tmp_path, "pk.appE.qwen7b.top5", ["qwen2.5-7b"])["pk.appE.qwen7b.top5"]

    assert run([27, 19, 22, 20, 26]) == AGREES
    assert run([27, 18, 22, 20, 26]) == AGREES
    assert run([27, 17, 22, 20, 26]) == DIFFERS


def test_band_share_is_a_bound(tmp_path):
    """p1.band.stats.law_lt08_min: 'at least 98.6%' of pairs; the old rule wanted 98.6 ± 0.05."""
    e = _entry("p1.band.stats")
    for share, status in ((100.0, AGREES), (98.6, AGREES), (98.5, DIFFERS)):
        _write(tmp_path, "p1_anchors", [{"model": m, "pooled_models": ""} for m in e["models"]] + [
            {"model": "pooled gqa", "pooled_models": ", ".join(e["models"]), "law_cos2_range": "0.315 – 0.486",
             "law_F_range": "0.935 – 0.952", "law_lt08_min": share}])
        assert _judge(tmp_path, "p1.band.stats", e["models"])["p1.band.stats.law_lt08_min"] == status, share


def _activation(tmp_path, col, values):
    models = _entry("p1.act.direction.low")["models"]
    _write(tmp_path, "p1_activations_natural_return", [{"model": m, col: v} for m, v in zip(models, values)])
    return models


def test_low_closure_alignment_is_near_0012_in_every_model(tmp_path):
    """p1.act.direction.low: 'near 0.012', each model median within a factor 2; the old rule (the
    largest median's power of ten) passed 0.095 and failed 0.0095."""
    for values, status in (([0.0095, 0.012, 0.015, 0.011], AGREES), ([0.012, 0.012, 0.012, 0.095], DIFFERS),
                           ([0.012, 0.012, 0.012, 0.005], DIFFERS)):
        models = _activation(tmp_path, "align_low", values)
        assert _judge(tmp_path, "p1.act.direction.low", models)["p1.act.direction.low"] == status, values


def test_wrong_v_alignment_reads_every_model_median(tmp_path):
    """p1.act.direction.wrong_v: 'below 10^-3' read as every model median below it (the old entry
    reduced to the largest median without saying so)."""
    e = _entry("p1.act.direction.wrong_v")
    assert e["reduce"] == "each" and rule_of(e["value"]) == "quantified" and "every model median" in e["note"]
    for values, status in (([1e-4, 2e-4, 5e-5, 9e-4], AGREES), ([1e-4, 2e-4, 5e-5, 1e-3], DIFFERS)):
        models = _activation(tmp_path, "align_wrong_v", values)
        assert _judge(tmp_path, "p1.act.direction.wrong_v", models)["p1.act.direction.wrong_v"] == status


def test_lambda_of_order_is_symmetric(tmp_path):
    """pk.t2.124m.lambda: Table 2 prints 10^-10 and 10^-6; the old floor(log10) rule took 9.9e-10 as
    the order of 1e-10 and 9e-11 as not."""
    for lo, status in ((9e-11, AGREES), (9.9e-10, DIFFERS)):
        _write(tmp_path, "pk_table2_lower_bound", [{"model": "gpt2-124m", "lambda_min": lo, "lambda_max": 1.2e-6}])
        assert _judge(tmp_path, "pk.t2.124m.lambda", ["gpt2-124m"])["pk.t2.124m.lambda.lambda_min"] == status, lo


def test_latent_score_says_which_statistic():
    assert "median" in _entry("p1.latent.score")["note"]
