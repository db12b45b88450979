"""Registry of architecture adapters. ``adapter_for(config, fmt)`` picks one or raises
UnknownArchitectureError naming every supported architecture."""

from __future__ import annotations

from headgeom.core.errors import UnknownArchitectureError
from .base import Adapter, ArchFields
from .bert import BertAdapter
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


def register(adapter: Adapter) -> Adapter:
    ADAPTERS[adapter.name] = adapter
    return adapter


def supported(fmt: str | None = None) -> list[str]:
    return sorted(
        f"{t} ({a.fmt})" for a in ADAPTERS.values() for t in a.model_types if fmt in (None, a.fmt)
    )


def adapter_for(config: dict, fmt: str = "safetensors") -> Adapter:
    if fmt == "gguf":
        arch = config.get("general.architecture")
    else:
        arch = config.get("model_type")
    for a in ADAPTERS.values():
        if a.fmt == fmt and arch in a.model_types:
            return a
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


__all__ = ["ADAPTERS", "Adapter", "ArchFields", "adapter_for", "by_name", "register", "supported"]
