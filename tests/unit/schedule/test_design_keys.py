"""The per-model design's config keys were renamed (``scopes:`` -> ``designs:``,
``models.<m>.scope`` -> ``models.<m>.design``, and ``headgeom plan --unscoped`` ->
``--global-design``): the old ones are not read; each stops the loader, the check and the command
line with one line naming the new one."""

from __future__ import annotations

import copy

import pytest

from headgeom.cli import main as cli
from headgeom.commands import check as K
from headgeom.commands import plan as P
from headgeom.core import config as CF
from headgeom.core.errors import ConfigError
from headgeom.schedule import designs

SCHEMA = CF.ROOT / "workflow" / "schemas" / "config.schema.yaml"
MODEL = "qwen2.5-7b"  # a name with a dot: the line names it whole


@pytest.fixture(scope="module")
def paper():
    """config/models.yaml + config/paper.yaml (new keys) and the same with the old keys."""
    new = CF.load_config([CF.ROOT / "config" / "models.yaml", CF.ROOT / "config" / "paper.yaml"])
    assert new["designs"] and designs.design_of(new, MODEL)
    old = copy.deepcopy(new)
    old["scopes"] = old.pop("designs")
    old["models"][MODEL]["scope"] = old["scopes"].pop(MODEL)
    return new, old


SCOPES = "config: scopes: renamed to 'designs' (the same entries under the new key)"
SCOPE = f"config: models.{MODEL}.scope: renamed to 'models.{MODEL}.design' (the same entries under the new key)"


def test_the_check_names_each_old_key_and_its_new_one(paper):
    new, old = paper
    assert CF.renamed_keys(new) == [] and CF.schema_problems(new, SCHEMA) == []
    assert CF.schema_problems(old, SCHEMA) == [SCOPES, SCOPE]
    assert [p.message for p in K.check(old)] == [SCOPES, SCOPE]
    with pytest.raises(ConfigError, match="renamed to 'designs'"):
        CF.check_config(old, SCHEMA)


def test_the_loader_refuses_an_old_key(tmp_path):
    f = tmp_path / "old.yaml"
    f.write_text(f"scopes:\n  {MODEL}:\n    stages: [pk]\n")
    with pytest.raises(ConfigError) as e:
        CF.load_config([f])
    assert str(e.value) == SCOPES
    f.write_text(f"models:\n  {MODEL}:\n    scope:\n      stages: [pk]\n")
    with pytest.raises(ConfigError) as e:
        CF.load_config([CF.ROOT / "config" / "models.yaml", f])
    assert str(e.value) == SCOPE
    with pytest.raises(ConfigError, match="renamed to 'designs'"):
        CF.load_config(cli=[f"scopes={{{MODEL}: {{stages: [pk]}}}}"])


def test_old_keys_are_not_read_as_a_design(paper):
    """A config that reached the registries without the loader or the check: the old keys give no
    design (the plan is the global one)."""
    new, old = paper
    assert designs.design_of(old, MODEL) == {} and designs.stages(old, MODEL) == designs.STAGES
    jobs = lambda cfg: sorted((j.model, j.rule, tuple(sorted(j.wildcards.items()))) for j in  # noqa: E731
                              P.plan(cfg, models=[MODEL])["jobs"])
    assert jobs(old) == jobs(designs.global_design(new)) != jobs(new)


def test_the_command_line_names_the_new_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli(["plan", "--unscoped"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "headgeom plan: error: --unscoped was renamed: write --global-design"
    f = tmp_path / "old.yaml"
    f.write_text(f"scopes:\n  {MODEL}:\n    stages: [pk]\n")
    assert cli(["plan", "--configfile", str(f)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"headgeom plan: {SCOPES}"]


def test_the_schema_checks_a_design(paper):
    new, _ = paper
    cfg = {**new, "designs": {"gpt2-124m": {"stages": ["pk"], "bogus": 1}}}
    with pytest.raises(ConfigError, match=r"designs\.gpt2-124m.*bogus"):
        CF.check_config(cfg, SCHEMA)
