"""The config: the one loader (``load_config``: config/config.yaml, the config files and the
``--config`` values merged over it, typed as YAML types them), used by the workflow (its load step,
headgeom.commands.check.workflow_check), the ``headgeom`` command, headgeom.api and bench; and its
validation against the schema with one clear line per problem (the key path, then what is wrong).
The whole check of a config (the schema, then the registries and the inputs) is
headgeom.commands.check.check."""

from __future__ import annotations

import copy
from pathlib import Path

from headgeom.core.errors import ConfigError

#: the repository this package is installed from: config/config.yaml (the defaults every config is
#: merged over) and workflow/schemas/config.schema.yaml
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path("workflow") / "schemas" / "config.schema.yaml"
DEFAULTS = Path("config") / "config.yaml"


def _name(x) -> str:
    """A config key as an error line shows it: as written, or quoted with escapes where it holds
    a line break or another unprintable character (the error stays one line)."""
    s = str(x)
    return s if s.isprintable() else repr(s)


def value_at(config: dict, dpath: str):
    """The config value at ``dpath`` (``"tables/strong_threshold"``: keys joined by ``/``, the form
    registries name config values in)."""
    node = config
    for key in dpath.split("/"):
        node = node[key]
    return node


def unknown_model_keys(config: dict, schema: dict) -> None:
    """A model entry's key the schema does not know (a typo such as ``soruce:``) stops with one
    line naming it and the nearest known key, before the schema's own message (which would
    complain about whatever the misspelt key left missing, e.g. 'repo_id')."""
    import difflib

    known = (((schema.get("properties") or {}).get("models") or {}).get("additionalProperties") or {}).get("properties")
    models = config.get("models") if isinstance(config, dict) else None
    if not isinstance(known, dict) or not isinstance(models, dict):
        return
    for name, entry in models.items():
        if not isinstance(entry, dict):
            continue
        for key in entry:
            if key not in known:
                near = difflib.get_close_matches(str(key), list(known), n=1)
                hint = f" (did you mean '{near[0]}'?)" if near else f" (known: {', '.join(known)})"
                raise ConfigError(f"config: models.{_name(name)}: unknown key {str(key)!r}{hint}")


# config keys that were renamed: old -> new. The old key is not read: a config that writes it stops
# with one line naming the new key (``renamed_keys``), in the loader and in the check.
RENAMED_KEYS = {"scopes": "designs", "models.<m>.scope": "models.<m>.design"}


def renamed_keys(config: dict) -> list[str]:
    """One line per renamed key (RENAMED_KEYS) the config writes, naming the key to write instead."""
    if not isinstance(config, dict):
        return []
    models = config.get("models") if isinstance(config.get("models"), dict) else {}
    used = [("scopes", {}) if "scopes" in config else None] + [
        ("models.<m>.scope", {"<m>": _name(m)}) for m, e in models.items() if isinstance(e, dict) and "scope" in e]
    out = []
    for old, names in filter(None, used):
        fill = lambda key: key.replace("<m>", names.get("<m>", "<m>"))  # noqa: E731
        out.append(f"config: {fill(old)}: renamed to '{fill(RENAMED_KEYS[old])}' (the same entries under the new key)")
    return out


def schema_problems(config: dict, schema_path) -> list[str]:
    """One line per schema violation, each naming its key, the most telling first (jsonschema's
    best match); [] when the config is valid. A renamed key (``renamed_keys``) or a model entry's
    unknown key (``unknown_model_keys``) stops first with lines of its own."""
    import jsonschema
    import yaml

    renamed = renamed_keys(config)
    if renamed:
        return renamed
    with open(schema_path) as fh:
        schema = yaml.safe_load(fh)
    unknown_model_keys(config, schema)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if not errors:
        return []
    first = jsonschema.exceptions.best_match(errors)
    lines: list[str] = []
    for e in [first, *(x for x in errors if x is not first)]:
        key = ".".join(_name(p) for p in e.absolute_path) or "(top level)"
        line = f"config: {key}: {e.message}{_yaml_hint(e)}"
        if line not in lines:
            lines.append(line)
    return lines


def check_config(config: dict, schema_path=None) -> None:
    """Stop on a schema violation with one line naming the key (``schema_path``: default this
    package's schema)."""
    schema_path = schema_path or ROOT / SCHEMA
    lines = schema_problems(config, schema_path)
    if lines:
        more = f" (and {len(lines) - 1} more problem(s))" if len(lines) > 1 else ""
        raise ConfigError(lines[0] + more)


# --------------------------------------------------------------------------- config files

_MERGE_TAG = "tag:yaml.org,2002:merge"


def duplicate_keys(text: str) -> list[tuple[str, int, int]]:
    """(key path, line of its first writing, line of the repeat) of every key that a mapping of the
    YAML (or JSON) ``text`` names twice, in document order: YAML loaders keep the last value
    silently. Keys merged in with ``<<`` are meant to be overridden and are not counted. A text
    that does not parse gives [] (the loader names that itself)."""
    import yaml

    out: list[tuple[str, int, int]] = []

    def walk(node, path: str, active: set) -> None:
        if id(node) in active:  # an alias of an enclosing node (a recursive document)
            return
        active = active | {id(node)}
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple, int] = {}
            for k, v in node.value:
                if k.tag == _MERGE_TAG:
                    continue
                if isinstance(k, yaml.ScalarNode):
                    ident, line = (k.tag, k.value), k.start_mark.line + 1
                    name = f"{path}.{_name(k.value)}" if path else _name(k.value)
                    if ident in seen:
                        out.append((name, seen[ident], line))
                    else:
                        seen[ident] = line
                    walk(v, name, active)
                else:
                    walk(v, path, active)
        elif isinstance(node, yaml.SequenceNode):
            for i, x in enumerate(node.value):
                walk(x, f"{path}[{i}]", active)

    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return []
    for doc in docs:
        if doc is not None:
            walk(doc, "", set())
    return out


def duplicate_key_lines(path) -> list[str]:
    """One line per key the config file at ``path`` names twice in one mapping (``duplicate_keys``),
    naming the key and both lines; [] for a file that cannot be read (its reader names that)."""
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        return []
    return [f"config: {path}: key '{key}' is written twice (lines {a} and {b}); a YAML loader would keep "
            f"the value of line {b} silently: keep one" for key, a, b in duplicate_keys(text)]


def load_config_file(path) -> dict:
    """A config file as ``yaml.safe_load`` reads it (an empty file: {}), or ConfigError when it
    names a key twice in one mapping (``duplicate_key_lines``, each line in the message)."""
    import yaml

    lines = duplicate_key_lines(path)
    if lines:
        raise ConfigError("; ".join(lines))
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path}: {e.strerror if isinstance(e, OSError) else e}") from None


def _yaml_hint(e) -> str:
    """Why a number arrived as a string: YAML 1.1 (PyYAML) reads ``1e-6`` (no dot in the
    mantissa) as text, ``1.0e-6`` as a number."""
    inst = e.instance
    wanted = e.validator_value if e.validator == "type" else None
    wanted = wanted if isinstance(wanted, list) else [wanted]
    if not isinstance(inst, str) or not {"number", "integer"} & set(wanted):
        return ""
    try:
        float(inst)
    except ValueError:
        return ""
    fixed = inst
    if "e" in inst.lower() and "." not in inst.lower().split("e")[0]:
        mant, exp = inst.lower().split("e", 1)
        fixed = f"{mant}.0e{exp}"
    return f" (YAML reads {inst} as text, not a number: write {fixed})"


# --------------------------------------------------------------------------- --config values

_FLOW = ("{", "[")


def _scalar(s: str):
    """A ``--config`` string leaf as YAML would type it (Snakemake types a top-level value with
    int, float and True/False, but leaves every value inside a nested {...} / [...] a string)."""
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if s in ("null", "Null", "NULL", "~"):
        return None
    try:
        return int(s)
    except ValueError:
        pass
    if any(c.isdigit() for c in s):
        try:
            return float(s)
        except ValueError:
            pass
    return s


def _typed(v):
    if isinstance(v, str):
        return _scalar(v)
    if isinstance(v, (list, tuple)):
        return [_typed(x) for x in v]
    if isinstance(v, dict) or hasattr(v, "items"):
        return {k: _typed(x) for k, x in v.items()}
    return v


def typed_cli_config(config: dict, cli: dict) -> None:
    """Give the ``--config`` values in ``config`` the types YAML gives them: nested values
    (``--config 'pk={nulls: {within_samples: 4}}'``, ``active_models=[a,b]``) arrive from
    Snakemake as strings throughout ('4', 'false'); numbers, true/false and null become numbers,
    booleans and None at every depth, as in a config file. A value that starts like a YAML
    mapping or list but does not parse is a ConfigError saying how to write it."""
    for key, raw in (cli or {}).items():
        if isinstance(raw, str) and raw.strip().startswith(_FLOW):
            raise ConfigError(
                f"config: --config {key}={raw}: not valid YAML; write a nested value as YAML flow syntax with "
                f"balanced brackets and quote the whole argument for the shell, e.g. "
                f"--config 'pk={{nulls: {{types: [rotation]}}}}' 'active_models=[minilm-l6]'")
        _set(config, key, raw)


def _set(config: dict, key, raw) -> None:
    """config[key] takes the typed value of raw where config holds raw's value (merged dicts:
    only the keys raw names are touched)."""
    if (isinstance(raw, dict) or hasattr(raw, "items")) and isinstance(config.get(key), dict):
        for k, v in raw.items():
            _set(config[key], k, v)
    else:
        config[key] = _typed(raw)


# --------------------------------------------------------------------------- the loader


def workflow_root(directory) -> Path:
    """Where the workflow run in ``directory`` reads its config/config.yaml and its schema: the
    directory itself when it holds config/config.yaml (a copy of the workflow, whose Snakefile
    reads the config beside it), else this package's (``ROOT``)."""
    d = Path(directory).resolve()
    return d if (d / DEFAULTS).is_file() else ROOT


def schema_path(root=None) -> Path:
    """``root``'s workflow/schemas/config.schema.yaml, or this package's where it has none."""
    own = Path(root or ROOT) / SCHEMA
    return own if own.is_file() else ROOT / SCHEMA


def merge(base, edit):
    """``edit`` merged over ``base``: dicts key by key, lists and scalars replace (copies), as
    Snakemake merges config files."""
    if not isinstance(base, dict) or not isinstance(edit, dict):
        return copy.deepcopy(edit)
    out = dict(base)
    for k, v in edit.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_config(configfiles=(), overrides: dict | None = None, *, cli=(), root=None, checked: bool = False) -> dict:
    """The config a ``snakemake --configfile F ... --config k=v ...`` run sees, the one loader:
    ``root``/config/config.yaml (default: this package's; ``workflow_root``), each config file
    merged over it (a file naming a key twice in one mapping is a ConfigError naming the key and
    both lines, ``load_config_file``, where Snakemake keeps the last), then ``overrides`` (a dict,
    merged as given), then ``cli``: the ``--config`` values (``KEY=VALUE`` strings, parsed as
    Snakemake parses them, or the dict Snakemake parsed), typed as a config file types them
    (``typed_cli_config``). A renamed key is a ConfigError naming the new one (``renamed_keys``);
    ``checked``: the schema too (``check_config``, ``root``'s schema)."""
    root = Path(root or ROOT)
    cfg = load_config_file(root / DEFAULTS)
    for f in configfiles:
        cfg = merge(cfg, load_config_file(f))
    cfg = merge(cfg, overrides or {})
    if cli:
        if not hasattr(cli, "items"):
            from snakemake.cli import parse_config

            cli = parse_config(list(cli))
        cfg = merge(cfg, dict(cli.items()))
        typed_cli_config(cfg, cli)
    renamed = renamed_keys(cfg)
    if renamed:
        raise ConfigError("; ".join(renamed))
    if checked:
        check_config(cfg, schema_path(root))
    return cfg


def shared_lineage_members(config: dict) -> list[str]:
    """One line per model that two ``paper1.lineages`` name (a checkpoint is in at most one)."""
    owner: dict[str, str] = {}
    out = []
    for name, members in ((config.get("paper1") or {}).get("lineages") or {}).items():
        for m in members or []:
            if m in owner:
                out.append(f"config: paper1.lineages: model {m!r} is in both {owner[m]!r} and {name!r}")
            else:
                owner[m] = name
    return out
