"""The per-model design's config keys were renamed (``scopes:`` -> ``designs:``,
``models.<m>.scope`` -> ``models.<m>.design``): the old keys still pass the schema, give the same
design, and the config check warns once, naming the old and the new key."""

from __future__ import annotations

import copy
import io

import pytest

from headgeom.core import config as C
from headgeom.schedule import designs
from headgeom.commands import plan as P

SCHEMA = P.ROOT / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def paper():
    """config/models.yaml + config/paper.yaml (new keys) and the same with the old keys."""
    new = P.load_config([P.ROOT / "config" / "models.yaml", P.ROOT / "config" / "paper.yaml"])
    assert new["designs"] and not new.get("scopes")
    old = copy.deepcopy(new)
    old["scopes"] = old.pop("designs")
    m = "gpt2-124m"  # one design given the other way: as the model entry's own key
    old["models"][m]["scope"] = old["scopes"].pop(m)
    return new, old


def test_old_keys_give_the_same_design(paper):
    new, old = paper
    assert designs.design_of(old, "gpt2-124m")  # the design is really read from the old keys
    for m in new["models"]:
        assert designs.design_of(old, m) == designs.design_of(new, m), m
        assert designs.model_config(old, m)["pk"] == designs.model_config(new, m)["pk"], m
    jobs = lambda cfg: sorted((j.model, j.rule, tuple(sorted(j.wildcards.items()))) for j in  # noqa: E731
                              P.plan(cfg, models=["gpt2-124m", "qwen2.5-7b"])["jobs"])
    assert jobs(old) == jobs(new)


def test_old_keys_pass_the_schema_and_warn_once(paper, monkeypatch):
    new, old = paper
    monkeypatch.setattr(C, "_warned", set())
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    C.check_config(new, SCHEMA)
    assert err.getvalue() == ""
    C.check_config(old, SCHEMA)
    C.check_config(old, SCHEMA)
    lines = err.getvalue().splitlines()
    assert lines == ["headgeom: config key 'scopes' is now 'designs'; the old key still works",
                     "headgeom: config key 'models.<m>.scope' is now 'models.<m>.design'; the old key still works"]


def test_new_key_wins_over_old():
    cfg = {"models": {"m": {"scope": {"stages": ["pk"]}, "design": {"stages": ["paper1"]}}}}
    assert designs.design_of(cfg, "m") == {"stages": ["paper1"]}
    cfg = {"scopes": {"m": {"stages": ["pk"]}}, "designs": {"m": {"stages": ["paper1"]}}}
    assert designs.stages(cfg, "m") == ("paper1",)


def test_the_schema_checks_a_design_under_either_key(paper):
    from headgeom.core.errors import ConfigError

    new, _ = paper
    for key in ("designs", "scopes"):
        cfg = {**new, key: {"gpt2-124m": {"stages": ["pk"], "bogus": 1}}}
        with pytest.raises(ConfigError, match=rf"{key}\.gpt2-124m.*bogus"):
            C.check_config(cfg, SCHEMA)
