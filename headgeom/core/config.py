"""Config validation with one clear line per problem (the key path, then what is wrong)."""

from __future__ import annotations

from headgeom.core.errors import ConfigError


def check_config(config: dict, schema_path) -> None:
    """Stop on a schema violation with one line naming the key."""
    import jsonschema
    import yaml

    with open(schema_path) as fh:
        errors = list(jsonschema.Draft202012Validator(yaml.safe_load(fh)).iter_errors(config))
    if errors:
        e = jsonschema.exceptions.best_match(errors)
        key = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(f"config: {key}: {e.message}{more}")
