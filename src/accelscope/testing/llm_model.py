"""A small Llama-shaped model with random weights and a tokenizer trained here, saved as a
Hugging Face directory (safetensors): what ``transformers serve`` and the in-process target
load in tests and benchmarks, with nothing downloaded.

The tokenizer is a BPE trained with ``tokenizers`` on seeded English-like text, with a
Metaspace pre-tokenizer (no byte-level pieces), so every generated token decodes to printable
text and a streamed chunk never waits for the rest of a UTF-8 character. The generation config
names no end-of-sequence token, so a request generates exactly ``max_tokens`` tokens (random
weights would otherwise stop at a random point): a benchmark's output length is the workload's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["WORDS", "build_tiny_llama"]

_WORDS_TEXT = (
    "the a model serves tokens to users at scale while every request waits in a queue for "
    "its turn on the accelerator and the cache keeps keys and values of earlier tokens so "
    "decoding reads weights once per step for the whole batch of sequences in flight"
)
WORDS = tuple(_WORDS_TEXT.split())


def build_tiny_llama(
    directory: Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 400,
    max_positions: int = 2048,
    seed: int = 0,
) -> Path:
    """Write the model and its tokenizer to ``directory`` (created); return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(40)) for _ in range(2000)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    fast.save_pretrained(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=1,
        eos_token_id=None,
        pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    generation = {"bos_token_id": 1, "pad_token_id": 0, "do_sample": False}
    (directory / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return directory
