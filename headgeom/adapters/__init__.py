"""Registry of architecture adapters. ``adapter_for(config, fmt)`` picks one or raises
UnknownArchitectureError naming every supported architecture."""

from __future__ import annotations

from headgeom.core.errors import UnknownArchitectureError
from .base import Adapter, ArchFields
from .bert import BertAdapter
from .family import FamilyAdapter, family_adapters
from .gguf import GGUFGemma3Adapter, GGUFLlamaAdapter
from .gpt2 import GPT2Adapter
from .gpt_neox import GPTNeoXAdapter
from .granite import GraniteAdapter
from .llama import Gemma3Adapter, LlamaAdapter
from .olmo import Olmo2Adapter, OlmoAdapter
from .qwen import Qwen2Adapter, Qwen3Adapter, Qwen3MoeAdapter
from .smollm3 import SmolLM3Adapter

ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        BertAdapter(),
        LlamaAdapter(),
        Gemma3Adapter(),
        GGUFLlamaAdapter(),
        GGUFGemma3Adapter(),
        GPT2Adapter(),
        GPTNeoXAdapter(),
        SmolLM3Adapter(),
        Qwen2Adapter(),
        Qwen3Adapter(),
        Qwen3MoeAdapter(),
        OlmoAdapter(),
        Olmo2Adapter(),
        GraniteAdapter(),
    )
}
# every other family of headgeom.architectures, through its description alone
ADAPTERS.update({a.name: a for a in family_adapters(skip=set(ADAPTERS))})


def register(adapter: Adapter) -> Adapter:
    ADAPTERS[adapter.name] = adapter
    return adapter


def supported(fmt: str | None = None) -> list[str]:
    return sorted(
        f"{t} ({a.fmt})" for a in ADAPTERS.values() for t in a.model_types if fmt in (None, a.fmt)
    )


def adapter_for(config: dict, fmt: str = "safetensors", architecture: str | None = None) -> Adapter:
    """The adapter of a checkpoint's config; ``architecture`` (a model's ``architecture:`` key)
    forces one by family/adapter name, and must be known and of the checkpoint's format."""
    if architecture is not None:
        a = ADAPTERS.get(architecture) or ADAPTERS.get(f"gguf-{architecture}")
        if a is None or a.fmt != fmt:
            raise UnknownArchitectureError(
                f"architecture {architecture!r} ({fmt}) is not a known family; supported: {', '.join(supported(fmt))}")
        return a
    if fmt == "gguf":
        arch = config.get("general.architecture")
    else:
        arch = config.get("model_type")
        from headgeom.architectures import REFUSED

        if arch in REFUSED:
            raise UnknownArchitectureError(
                f"architecture {arch!r} is not supported: {REFUSED[arch]}; supported: {', '.join(supported())}")
    for a in ADAPTERS.values():
        if a.fmt == fmt and arch in a.model_types:
            return a
    if fmt == "safetensors" and arch:  # a llama-layout family transformers knows: derived from its modules
        from headgeom.architectures import derive

        try:
            return FamilyAdapter(derive(config))
        except UnknownArchitectureError as e:
            raise UnknownArchitectureError(f"{e}; supported: {', '.join(supported())}") from None
    raise UnknownArchitectureError(
        f"unknown architecture {arch!r} ({fmt}); supported: {', '.join(supported())}"
    )


def by_name(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise UnknownArchitectureError(
            f"unknown adapter {name!r}; supported: {', '.join(sorted(ADAPTERS))}"
        ) from None


__all__ = ["ADAPTERS", "Adapter", "ArchFields", "FamilyAdapter", "adapter_for", "by_name", "register", "supported"]
