"""The tokenizer every client of a conformance run counts with: word level, each
whitespace-separated word one token, which is how the scripted server counts prompts and
answers. A peer that needs a Hugging Face tokenizer directory (vLLM's ``bench serve`` builds
its random prompts from one) gets this one, so a count that differs from the truth is the
client's reading of the stream, never two tokenizers disagreeing."""

from __future__ import annotations

from pathlib import Path

__all__ = ["VOCABULARY_WORDS", "write_word_tokenizer"]

VOCABULARY_WORDS = 500
"""Words in the vocabulary (``w0`` ... ``w499``): what a random-prompt generator samples from."""


def write_word_tokenizer(directory: Path) -> Path:
    """Write the word-level tokenizer (``tokenizer.json`` and its config) to ``directory``
    (created) and return it. Unknown words are one ``[UNK]`` token each, so every word counts
    one whatever it is."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[BOS]": 1, "[EOS]": 2}
    vocab |= {f"w{k}": k + 3 for k in range(VOCABULARY_WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with one space
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        model_max_length=4096,
    )
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(directory))
    return directory
