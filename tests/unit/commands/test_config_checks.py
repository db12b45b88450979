"""The config checks are a registry (headgeom.commands.check.CONFIG_CHECKS): one decorated function is
one more line of `headgeom check` and of the workflow's load check."""

from __future__ import annotations

import pytest

from headgeom.commands import check as C
from headgeom.core.config import load_config


@pytest.fixture
def checks(monkeypatch):
    monkeypatch.setattr(C, "CONFIG_CHECKS", list(C.CONFIG_CHECKS))
    return C


def config_lines(cfg):
    return [p.line() for p in C.check(cfg) if p.what == "config"]


def test_a_registered_check_is_a_line_of_the_check(checks):
    cfg = load_config()
    assert config_lines(cfg) == []

    @checks.config_check
    def three_models_at_most(config, shapes):
        if len(config["active_models"]) > 2:
            yield f"config: active_models: {len(config['active_models'])} models, at most 2"

    assert config_lines(cfg) == [f"config: active_models: {len(cfg['active_models'])} models, at most 2"]


def test_an_only_if_clean_check_waits_for_the_checks_before_it(checks):
    checks.CONFIG_CHECKS.clear()
    seen = []

    @checks.config_check
    def always(config, shapes):
        yield "config: first"

    @checks.config_check(only_if_clean=True)
    def premised(config, shapes):
        seen.append(True)
        yield "config: second"

    assert [p.message for p in checks.registry_problems({}, {})] == ["config: first"]
    assert seen == []
    checks.CONFIG_CHECKS.remove((always, False))
    assert [p.message for p in checks.registry_problems({}, {})] == ["config: second"]


def test_a_line_two_checks_give_is_printed_once(checks):
    checks.CONFIG_CHECKS[:] = [(lambda c, s: ["config: same"], False), (lambda c, s: ["config: same"], False)]
    assert [p.message for p in checks.registry_problems({}, {})] == ["config: same"]
