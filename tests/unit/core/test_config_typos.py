"""A misspelt key in a model entry is named in one line, with the key it was meant to be."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from headgeom.core.config import check_config
from headgeom.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def _config(entry: dict) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["models"] = {**cfg["models"], "mine": entry}
    return cfg


def test_soruce_typo_is_named():
    with pytest.raises(ConfigError) as e:
        check_config(_config({"soruce": "hf", "repo_id": "org/name", "revision": "main"}), SCHEMA)
    msg = str(e.value)
    assert msg == "config: models.mine: unknown key 'soruce' (did you mean 'source'?)", msg
    assert "\n" not in msg and "repo_id" not in msg


def test_default_config_and_a_correct_entry_pass():
    check_config(_config({"source": "hf", "repo_id": "org/name", "revision": "main"}), SCHEMA)


def test_names_with_line_breaks_stay_on_one_line():
    """A model name or key holding a line break (found by the config fuzz test: models {'\\n':
    {'': None}}) is shown escaped, so the error is still one line; so is a schema error's path."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["models"] = {"a\nb": {"x\ty": None}}
    with pytest.raises(ConfigError) as e:
        check_config(cfg, SCHEMA)
    assert str(e.value).startswith("config: models.'a\\nb': unknown key 'x\\ty'") and "\n" not in str(e.value)
    cfg["models"] = {"a\nb": {"source": 3}}
    with pytest.raises(ConfigError) as e:
        check_config(cfg, SCHEMA)
    assert "\n" not in str(e.value) and "'a\\nb'" in str(e.value), str(e.value)
