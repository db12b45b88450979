"""Config validation with one clear line per problem (the key path, then what is wrong)."""

from __future__ import annotations

from headgeom.core.errors import ConfigError


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
                raise ConfigError(f"config: models.{name}: unknown key '{key}'{hint}")


def check_config(config: dict, schema_path) -> None:
    """Stop on a schema violation with one line naming the key."""
    import jsonschema
    import yaml

    with open(schema_path) as fh:
        schema = yaml.safe_load(fh)
    unknown_model_keys(config, schema)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if errors:
        e = jsonschema.exceptions.best_match(errors)
        key = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(f"config: {key}: {e.message}{more}")
