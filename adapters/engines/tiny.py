"""A tiny random Llama with SmolLM2's real tokenizer, built in seconds: the model of the tests.

It has the real vocabulary, special tokens and tool-aware chat template, so every token-level code
path (rendering, masks, decoding, logprobs, batching) runs exactly as with SmolLM2-135M; only the
weights are random. It never calls a tool on its own; tests script the model's turns for that.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from envhub.adapters.chat_format import ChatMLFormat
from envhub.adapters.engines.models import (
    _write_marker,
    atomic_dir,
    cache_root,
    is_prepared,
    prepare_tokenizer,
)


def tiny_model_dir(layers: int = 2, hidden: int = 64, seed: int = 0, init_std: float = 0.3, tied: bool = True) -> Path:
    std = "" if init_std == 0.3 else f"-std{init_std:g}"
    return cache_root() / "models" / f"tiny-smollm2-l{layers}-h{hidden}-s{seed}{std}{'' if tied else '-untied'}"


def build_tiny_model(out_dir: str | Path | None = None, *, layers: int = 2, hidden: int = 64, seed: int = 0,
                     max_position_embeddings: int = 2048, init_std: float = 0.3, tied: bool = True,
                     force: bool = False) -> Path:
    """Build (or reuse) a random ``LlamaForCausalLM`` with the SmolLM2 tokenizer; returns its dir.

    The weights are drawn with a wider initialization than a real model's (std 0.3) so that the
    next-token distribution is peaked: greedy decoding then has clear winners, which keeps
    batched-versus-unbatched comparisons free of float-rounding ties. A small ``init_std`` (0.02,
    a real model's) gives a near-uniform distribution instead: a model to train from scratch.
    ``tied=False`` gives the output head its own weight (one a LoRA adapter may target).
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    final = Path(out_dir) if out_dir is not None else tiny_model_dir(layers, hidden, seed, init_std, tied)
    if is_prepared(final) and not force:
        return final
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_tokenizer("smollm2-135m")))
    end_id = tokenizer.convert_tokens_to_ids(ChatMLFormat.end_token)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5, tie_word_embeddings=tied, initializer_range=init_std,
        bos_token_id=tokenizer.convert_tokens_to_ids(ChatMLFormat.start_token), eos_token_id=end_id,
        pad_token_id=end_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    if force and final.exists():
        shutil.rmtree(final)
    with atomic_dir(final) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _write_marker(tmp, {"name": final.name, "kind": "tiny-random", "layers": layers, "hidden": hidden,
                            "seed": seed})
    return final
