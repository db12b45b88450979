"""Per-model designs: which per-layer jobs run for which model and layer, with which null types,
kinds and sample counts (docs/methods.md, "Per-model designs").

The global ``pk:`` block is the default design. A model narrows or changes it with a design,
given in its ``models:`` entry (``design:``) or, for registries defined elsewhere, under the
top-level ``designs: {<model>: ...}`` (config/paper.yaml uses the latter so that it loads with
or without config/models.yaml; a design naming a model that is not configured is ignored).
Later wins: global ``pk`` < ``models.<m>.design`` < ``designs.<m>``; dicts merge key by key,
lists and scalars replace.

A design holds
  ``stages``: which per-layer stages run for the model (``pk``, ``paper1``; default both);
  ``pk``:     any key of the global ``pk`` block, plus the layer selections
              ``pk.layers`` (the within-layer pair jobs, pk_within_layer) and
              ``pk.nulls.within_layers`` (the within-layer null jobs); a layer selection is
              null (every layer) or a list of layer indices and inclusive ranges "a-b";
              ``pk.nulls.by_layer``: a list of ``{layers: ..., types / within_kinds /
              within_samples / samples_per_job: ...}`` that set the within-layer nulls of those
              layers (later entries win; e.g. more samples, or other kinds, at a few layers).
              Empty ``kinds`` / ``cross_kinds`` / ``nulls.types`` / ``nulls.within_kinds`` or a
              sample count of 0 schedules no job of that kind.
  ``fanout``: the model's own ``fanout.max_job_minutes`` (a small model's jobs kept short beside a
              large one's, so that its wall-clock is bound by its total work, not by one job).

``model_config(config, model)`` is the config a model's jobs see (its ``pk`` block resolved);
the rule files (job list, params, resources, fan-out) and ``headgeom plan`` all go through
``job_wildcards`` / ``shard_paths`` / ``lookup`` here, so the dry run and the plan agree.
With no designs every function returns what the global config gives (the default design)."""

from __future__ import annotations

import re

from headgeom.core.config import merge, value_at
from headgeom.core.errors import ConfigError
from headgeom.methods.nulls import per_job  # noqa: F401 (the config's samples per null job; tests read it here)

# the per-layer stages a design turns on or off (each registry job names its stage)
STAGES = ("pk", "paper1")
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


def design_of(config: dict, model: str) -> dict:
    """The model's design: ``models.<m>.design`` merged with ``designs.<m>`` ({} when none)."""
    entry = (config.get("models") or {}).get(model) or {}
    return merge(entry.get("design") or {}, (config.get("designs") or {}).get(model) or {})


def stages(config: dict, model: str) -> tuple[str, ...]:
    st = design_of(config, model).get("stages")
    if st is None:
        return STAGES
    bad = [s for s in st if s not in STAGES]
    if bad:
        raise ConfigError(f"config: design of {model!r}: stages {bad} unknown (known: {', '.join(STAGES)})")
    return tuple(st)


def model_config(config: dict, model: str, layer: int | None = None) -> dict:
    """The config one model's jobs see: ``pk`` (and ``fanout``) resolved through the model's design (a shallow
    copy of ``config`` otherwise; the global config is not changed). With ``layer``: the
    within-layer null settings of the ``pk.nulls.by_layer`` entries naming that layer too."""
    sc = design_of(config, model)
    if not sc.get("pk") and not sc.get("fanout") and not (layer is not None and config["pk"]["nulls"].get("by_layer")):
        return config
    out = dict(config)
    out["pk"] = merge(config["pk"], sc.get("pk") or {})
    if sc.get("fanout"):  # the model's own fan-out ceiling
        out["fanout"] = merge(config.get("fanout") or {}, sc["fanout"])
    if layer is not None:
        for entry in out["pk"]["nulls"].get("by_layer") or []:
            if in_layers(entry["layers"], int(layer)):
                out["pk"]["nulls"] = merge(out["pk"]["nulls"], {k: v for k, v in entry.items() if k != "layers"})
    return out


def in_layers(spec, layer: int) -> bool:
    """Whether a layer selection (null, indices, "a-b" ranges) holds ``layer``."""
    if spec is None:
        return True
    for item in [spec] if isinstance(spec, (int, str)) else spec:
        m = _RANGE.match(str(item))
        if (m and int(m.group(1)) <= layer <= int(m.group(2))) or (not m and int(item) == layer):
            return True
    return False


def layer_list(spec, n_layers: int, where: str = "layers") -> list[int]:
    """null -> every layer; [3, "5-7"] -> [3, 5, 6, 7] (sorted, unique). A layer outside the
    model is an error naming the key."""
    if spec is None:
        return list(range(n_layers))
    if isinstance(spec, (int, str)):
        spec = [spec]
    out = set()
    for item in spec:
        if isinstance(item, bool):
            raise ConfigError(f"config: {where}: {item!r} is not a layer")
        if isinstance(item, int):
            lo = hi = item
        else:
            m = _RANGE.match(str(item))
            if not m:
                raise ConfigError(f"config: {where}: {item!r} is neither a layer index nor a range 'a-b'")
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise ConfigError(f"config: {where}: empty range {item!r}")
        if lo < 0 or hi >= n_layers:
            raise ConfigError(f"config: {where}: layer {hi if hi >= n_layers else lo} is outside the model "
                              f"(layers 0..{n_layers - 1})")
        out.update(range(lo, hi + 1))
    return sorted(out)


def _job(job):
    from headgeom.schedule.families import JOBS

    return JOBS[job] if isinstance(job, str) else job


def runs(job, config: dict, model: str) -> bool:
    """Whether the model has any job of this kind (a registry job or its name): its stage (if
    it has one) on and its ``when`` true of the model's ``pk`` block. ``config``: the global config. The
    activation stage's jobs run for the models of ``activation.models``
    (headgeom.schedule.families.activation_models), not through designs."""
    from headgeom.schedule.families import activation_models

    j = _job(job)
    if j.activations:
        return model in activation_models(config)
    if j.stage is not None and j.stage not in stages(config, model):
        return False
    return j.when is None or bool(j.when(model_config(config, model)["pk"]))


def layers(job, config: dict, model: str, n_layers: int) -> list[int]:
    """The layers of a per-layer job: every layer, or the job's layer selection under ``pk``
    (its ``layers``: dpath, and a per-layer check of the ``pk`` block that layer sees, with
    ``pk.nulls.by_layer`` applied; those entries' layer lists are checked first)."""
    j = _job(job)
    if j.layers is None:
        return list(range(n_layers))
    dpath, keep = j.layers
    pk = model_config(config, model)["pk"]
    spec = pk
    for key in dpath.split("/"):
        spec = (spec or {}).get(key)
    lay = layer_list(spec, n_layers, f"pk.{dpath.replace('/', '.')} of {model!r}")
    if keep is None:
        return lay
    for i, e in enumerate(pk["nulls"].get("by_layer") or []):
        layer_list(e["layers"], n_layers, f"pk.nulls.by_layer[{i}].layers of {model!r}")  # in range
    return [l for l in lay if keep(model_config(config, model, l)["pk"])]


def block_size(job, config: dict, model: str, fields: dict | None, layer: int | None = None) -> int:
    """Samples one job of the null ``job`` (a registry Job or its name) holds for one model (of ``layer``):
    schedule.fanout.block_size under the model's design. ``fields``: the model's shape (a fanned-out job's
    block follows from its parts)."""
    from headgeom.schedule import fanout

    return fanout.block_size(_job(job), fields, model_config(config, model, layer))


def blocks(job, config: dict, model: str, fields: dict | None, layer: int | None = None) -> range:
    """The null-sample blocks of a model's null ``job`` (a registry Job or its name; within-layer: of ``layer``);
    none for a job without blocks."""
    j = _job(job)
    if j.blocks is None:
        return range(0)
    from headgeom.methods.nulls import n_blocks

    nulls = model_config(config, model, layer)["pk"]["nulls"]
    return range(n_blocks(int(nulls[f"{j.blocks}_samples"]), block_size(j, config, model, fields, layer)))


def samples(job, config: dict, model: str, block: int, fields: dict | None, layer: int | None = None) -> list[int]:
    """The sample indices of one block (a null job's params)."""
    from headgeom.methods.nulls import sample_range

    j = _job(job)
    nulls = model_config(config, model, layer)["pk"]["nulls"]
    return list(sample_range(int(nulls[f"{j.blocks}_samples"]), int(block), block_size(j, config, model, fields, layer)))


def job_wildcards(job, config: dict, model: str, fields: dict) -> list[dict]:
    """Every job of kind ``job`` (a registry job or its name) for one model (wildcards without
    ``model``), in the order of layer, block, part. ``fields``: the model's shape (n_layers, ...)."""
    from headgeom.schedule.families import n_parts

    j = _job(job)
    if not runs(j, config, model):
        return []
    grain = j.families[0].grain
    mc = model_config(config, model)
    blk = blocks(j, config, model, fields)
    parts = range(n_parts(j.name, fields, mc))
    lay = layers(j, config, model, fields["n_layers"])
    return {
        "layer": lambda: [{"layer": l} for l in lay],
        "layer_block": lambda: [{"layer": l, "block": b} for l in lay for b in blocks(j, config, model, fields, l)],
        "block": lambda: [{"block": b} for b in blk],
        "block_part": lambda: [{"block": b, "part": p} for b in blk for p in parts],
        "part": lambda: [{"part": p} for p in parts],
    }[grain]()


def global_design(config: dict) -> dict:
    """The config without any per-model design (the global design for every model)."""
    models = {m: {k: v for k, v in (e or {}).items() if k != "design"}
              for m, e in (config.get("models") or {}).items()}
    return {**config, "designs": {}, "models": models}


def shard_paths(name: str, config: dict, model: str, fields: dict) -> list[str]:
    """Every shard of family ``name`` the model's design schedules."""
    from headgeom.schedule.families import family

    fam = family(name)
    return [fam.path.format(model=model, **wc) for wc in job_wildcards(fam.job, config, model, fields)]


def lookup(config: dict, model: str, dpath: str, layer: int | None = None):
    """A config value as the model's jobs (of ``layer``) see it (``pk/...`` through the design)."""
    return value_at(model_config(config, model, layer) if dpath.startswith("pk/") else config, dpath)


def stage_models(config: dict, models, stage: str) -> list[str]:
    """The models (in order) whose design runs ``stage``."""
    return [m for m in models if stage in stages(config, m)]


def describe(config: dict, model: str, fields: dict) -> dict:
    """What the design schedules for one model: jobs per kind, null kinds and samples, layers
    (of the jobs writing the within-layer pairs and the two null families)."""
    from headgeom.schedule.families import SHARD_FAMILIES, JOBS

    pairs, within, cross = (JOBS[SHARD_FAMILIES[f].job] for f in ("pk_within", "pk_null_within", "pk_null_cross"))
    pk = model_config(config, model)["pk"]
    out = {"stages": list(stages(config, model)),
           "jobs": {j: len(job_wildcards(j, config, model, fields)) for j in JOBS}}
    if "pk" in out["stages"]:
        n, w = pk["nulls"], runs(within, config, model)
        out["pk"] = {"kinds": list(pk["kinds"]), "cross_kinds": list(pk["cross_kinds"]),
                     "layers": layers(pairs, config, model, fields["n_layers"]) if runs(pairs, config, model) else [],
                     "null_types": list(n["types"]),
                     "within_kinds": list(n["within_kinds"]) if w else [],
                     "within_samples": int(n["within_samples"]) if w else 0,
                     "within_layers": layers(within, config, model, fields["n_layers"]) if w else [],
                     "cross_samples": int(n["cross_samples"]) if runs(cross, config, model) else 0}
    return out


def compact(layers) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8" ("none" when empty)."""
    layers = sorted(layers)
    if not layers:
        return "none"
    runs_, start = [], layers[0]
    for a, b in zip(layers, layers[1:] + [None]):
        if b != a + 1:
            runs_.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs_)


def summary_line(config: dict, model: str, fields: dict) -> str:
    """One line: what the model's design schedules (``headgeom plan``)."""
    d = describe(config, model, fields)
    parts = [f"stages {'+'.join(d['stages']) or 'none'}"]
    if "pk" in d:
        p = d["pk"]
        parts.append(f"pairs {''.join(p['kinds']) or '-'} at layers {compact(p['layers'])}; "
                     f"across {''.join(p['cross_kinds']) or '-'}")
        if p["within_samples"]:
            parts.append(f"within nulls {'/'.join(p['null_types'])} on {''.join(p['within_kinds'])} at layers "
                         f"{compact(p['within_layers'])}, n = {p['within_samples']}")
        else:
            parts.append("no within nulls")
        parts.append(f"cross nulls n = {p['cross_samples']}" if p["cross_samples"] else "no cross nulls")
        by = model_config(config, model)["pk"]["nulls"].get("by_layer") or []
        if by:
            parts.append(f"{len(by)} per-layer null setting(s) (pk.nulls.by_layer)")
    return "; ".join(parts)
