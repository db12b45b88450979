"""A synthetic Llama checkpoint that transformers itself saves and runs (with a character-level
tokenizer), for the activation stage's tests: 2 layers, GQA 4 query / 2 KV heads, an exactly
closed full-rank head planted in layer 0, head 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

TEXT = ("The parish register records that the poet was baptized in April. " * 40).strip()
ALPHA = 1.5


def _char_tokenizer(path: Path):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(TEXT + "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,"))
    vocab = {"<unk>": 0, "<s>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="<unk>")
    fast.save_pretrained(path)
    return len(vocab)


def write_synthetic_llama(path: Path) -> None:
    """A 2-layer Llama (GQA 4 q / 2 kv heads) saved by transformers itself, with an exactly
    closed full-rank head planted in layer 0, head 0 (T^2 = ALPHA T)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = _char_tokenizer(path)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5,
                      bos_token_id=1, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        att = m.model.layers[0].self_attn
        V = att.v_proj.weight[:8].double().numpy().T  # group 0's V (d_model x d_head)
        O = V @ np.linalg.inv(V.T @ V) * ALPHA
        att.o_proj.weight[:, :8] = torch.as_tensor(O, dtype=torch.float32)
        for layer in m.model.layers:
            layer.input_layernorm.weight.copy_(1 + 0.1 * torch.randn(32))
    m.save_pretrained(path, safe_serialization=True)
