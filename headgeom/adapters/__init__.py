"""Registry of architecture adapters. ``adapter_for(config, fmt)`` picks one or raises
UnknownArchitectureError naming every supported architecture.

Every adapter is read from ``headgeom.architectures``: one ``ArchitectureAdapter`` per architecture of
``ARCHITECTURES`` (safetensors; named as the architecture, the name tensor-store manifests record) and one
``GGUFAdapter`` per architecture of ``GGUF_ARCHS`` (named ``gguf-<general.architecture>``)."""

from __future__ import annotations

from headgeom.core.errors import UnknownArchitectureError
from .base import Adapter, ArchFields
from .architecture import ArchitectureAdapter, architecture_adapters
from .gguf import GGUFAdapter, gguf_adapters

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (*architecture_adapters(skip=set()), *gguf_adapters())}


def register(adapter: Adapter) -> Adapter:
    ADAPTERS[adapter.name] = adapter
    return adapter


def supported(fmt: str | None = None) -> list[str]:
    return sorted(
        f"{t} ({a.fmt})" for a in ADAPTERS.values() for t in a.model_types if fmt in (None, a.fmt)
    )


def _forced(architecture: str, fmt: str) -> Adapter | None:
    """The adapter an ``architecture:`` key names for a checkpoint of format ``fmt``: an adapter
    name, an architecture name or model_type (for GGUF: the GGUF adapter of that architecture)."""
    for name in (architecture, f"gguf-{architecture}"):
        a = ADAPTERS.get(name)
        if a is not None and a.fmt == fmt:
            return a
    if fmt == "gguf":
        from headgeom.architectures import BY_MODEL_TYPE

        fam = BY_MODEL_TYPE.get(architecture, architecture)
        return next((a for a in ADAPTERS.values() if a.fmt == fmt and a.architecture.name == fam), None)
    return None


def adapter_for(config: dict, fmt: str = "safetensors", architecture: str | None = None) -> Adapter:
    """The adapter of a checkpoint's config; ``architecture`` (a model's ``architecture:`` key)
    forces one by architecture/adapter name, and must be known and of the checkpoint's format."""
    if architecture is not None:
        a = _forced(architecture, fmt)
        if a is None:
            raise UnknownArchitectureError(
                f"architecture: {architecture!r} ({fmt}) is not a known architecture; supported: {', '.join(supported(fmt))}")
        return _verified(a, config)
    from headgeom.architectures import GGUF_REFUSED, REFUSED

    if fmt == "gguf":
        arch = config.get("general.architecture")
        refused = GGUF_REFUSED
    else:
        arch = config.get("model_type")
        refused = REFUSED
    if arch in refused:
        raise UnknownArchitectureError(
            f"{'GGUF ' if fmt == 'gguf' else ''}architecture {arch!r} is not supported: {refused[arch]}; "
            f"supported: {', '.join(supported(fmt))}")
    for a in ADAPTERS.values():
        if a.fmt == fmt and arch in a.model_types:
            return _verified(a, config)
    if fmt == "safetensors" and arch:  # a llama-layout architecture transformers knows: derived from its modules
        from .oracle import derived_architecture

        try:
            return ArchitectureAdapter(derived_architecture(config))
        except UnknownArchitectureError as e:
            raise UnknownArchitectureError(f"{e}; supported: {', '.join(supported())}") from None
    raise UnknownArchitectureError(
        f"unknown architecture {arch!r} ({fmt}); supported: {', '.join(supported())}"
    )


def _verified(a: Adapter, config: dict) -> Adapter:
    """``a``, once its architecture, resolved for ``config``, reproduces transformers' own attention
    module (headgeom.adapters.oracle; cached). GGUF adapters are checked by their tests instead."""
    if a.fmt == "safetensors":
        from headgeom.architectures import config_view

        from .oracle import verify

        verify(a.architecture.resolve(config_view(config)), config)
    return a


def by_name(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise UnknownArchitectureError(
            f"unknown adapter {name!r}; supported: {', '.join(sorted(ADAPTERS))}"
        ) from None


__all__ = ["ADAPTERS", "Adapter", "ArchFields", "ArchitectureAdapter", "GGUFAdapter", "adapter_for", "by_name", "register",
           "supported"]
