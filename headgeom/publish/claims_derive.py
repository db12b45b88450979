"""Numbers the papers derive from their settings or from a format, computed for the claims ledger.

A ledger entry with ``derive: <name>`` (and ``args:`` where the derivation takes any) reads no table:
its pipeline value is ``DERIVATIONS[name]`` applied to the papers' settings (config/config.yaml
with config/paper.yaml merged over it, as ``--configfile config/paper.yaml`` runs them, and
config/models.yaml), and the rule its printed form names judges it like any other entry. The
entry's note says the derivation in words."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from headgeom.io.checkpoint import SAFETENSORS_BITS

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def paper_settings(config_dir: Path = CONFIG_DIR) -> dict:
    """config.yaml with paper.yaml merged over it; the registered models under ``models_yaml``."""
    import yaml

    cfg = yaml.safe_load((Path(config_dir) / "config.yaml").read_text()) or {}
    cfg = _merge(cfg, yaml.safe_load((Path(config_dir) / "paper.yaml").read_text()) or {})
    cfg["models_yaml"] = (yaml.safe_load((Path(config_dir) / "models.yaml").read_text()) or {}).get("models", {})
    return cfg


def _setting(cfg: dict, dotted: str):
    v = cfg
    for part in dotted.split("."):
        if not isinstance(v, dict) or part not in v:
            raise KeyError(f"no setting {dotted!r}")
        v = v[part]
    return v


def bf16_unit_roundoff_pct(cfg: dict) -> float:
    """BF16's unit roundoff in percent: BF16 is the top half of a float32 (SAFETENSORS_BITS: 16 of
    32 bits), so it keeps float32's sign and 8 exponent bits and 23 − 16 = 7 fraction bits; with the
    implicit bit 8 significant bits, rounding to nearest errs by at most 2^-8 relative."""
    fraction_bits = np.finfo(np.float32).nmant - (SAFETENSORS_BITS["F32"] - SAFETENSORS_BITS["BF16"])
    return 100.0 * 2.0 ** -(fraction_bits + 1)


def residual_at_threshold(cfg: dict) -> float:
    """√(1 − t) at the strong threshold t (tables.strong_threshold): a head with P ≥ t has
    ‖T² − αT‖ ≤ √(1 − t) ‖T²‖ (P is the squared cosine of T² with T)."""
    return math.sqrt(1.0 - float(_setting(cfg, "tables.strong_threshold")))


def window_tokens(cfg: dict, section: str) -> float:
    """Tokens an activation section reads: activation.<section>.n_windows × window."""
    sec = _setting(cfg, f"activation.{section}")
    return float(int(sec["n_windows"]) * int(sec["window"]))


_TOKENS = re.compile(r"tokens?-?(\d+(?:\.\d+)?)([BT])", re.I)


def first_checkpoint_tokens_b(cfg: dict, lineage: str) -> float:
    """Training tokens (billions) of a lineage's earliest published checkpoint: the fewest tokens
    named in the pinned revisions of config/models.yaml's checkpoints of that lineage
    ("step-5k-token-10B" -> 10)."""
    seen = []
    for name, m in cfg["models_yaml"].items():
        if (m or {}).get("lineage") != lineage:
            continue
        hit = _TOKENS.search(str(m.get("revision", "")))
        if hit:
            seen.append(float(hit.group(1)) * (1000.0 if hit.group(2).upper() == "T" else 1.0))
    if not seen:
        raise KeyError(f"no checkpoint of lineage {lineage!r} names its tokens in its revision")
    return min(seen)


@dataclass(frozen=True)
class Derivation:
    fn: Callable
    source: str  # where its inputs come from, for the claims table's "Read from"


DERIVATIONS = {
    "bf16_unit_roundoff_pct": Derivation(bf16_unit_roundoff_pct, "the BF16 format (16 of float32's 32 bits)"),
    "residual_at_threshold": Derivation(residual_at_threshold, "config: tables.strong_threshold"),
    "window_tokens": Derivation(window_tokens, "config/paper.yaml: activation.<section>"),
    "first_checkpoint_tokens_b": Derivation(first_checkpoint_tokens_b, "config/models.yaml: the lineage's revisions"),
}


def derived(entry: dict, cfg: dict | None = None) -> tuple[float, str]:
    """(value, where it comes from) of a ``derive:`` entry."""
    d = DERIVATIONS[entry["derive"]]
    args = dict(entry.get("args") or {})
    value = d.fn(paper_settings() if cfg is None else cfg, **args)
    where = d.source.replace("<section>", str(args.get("section", "<section>")))
    return value, f"derived: {entry['derive']}({', '.join(f'{k}={v}' for k, v in args.items())}) from {where}"
