"""Loading a local Hugging Face causal LM for in-process serving: the directory's checks
before anything is imported, then the model, tokenizer and the facts the batchers need.

Only ``safetensors`` weights are read, with ``local_files_only`` and
``trust_remote_code=False``: a directory holding only ``pytorch_model.bin`` (a pickle, which
can run code when loaded) is refused.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from accelscope.errors import BadInputError, exception_line

__all__ = [
    "DTYPES",
    "Dtype",
    "LoadedModel",
    "check_model_dir",
    "load_model",
    "model_type_of",
    "parse_device",
    "parse_dtype",
]

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: tuple[Dtype, ...] = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES: dict[str, Dtype] = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
}
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "spiece.model",
)
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")

# transformers is imported only when a model is loaded, so its objects are typed by role here.
Model = Any
"""A ``transformers`` ``PreTrainedModel`` (causal LM)."""
Tokenizer = Any
"""A ``transformers`` tokenizer."""
GenerationConfig = Any
"""A ``transformers`` ``GenerationConfig`` (the checkpoint's, copied)."""


@dataclass(frozen=True, kw_only=True)
class LoadedModel:
    """What loading gives the batchers: the weights, the tokenizer and the facts read from
    them once (end-of-sequence ids, the padding id, the context in tokens)."""

    model: Model
    tokenizer: Tokenizer
    generation_config: GenerationConfig
    eos_ids: frozenset[int]
    pad_id: int
    context_tokens: int | None
    """``max_position_embeddings``; ``None`` when the config does not say."""
    parameters: int
    model_type: str


def parse_dtype(dtype: str | None) -> Dtype:
    """``auto`` (``None`` too), ``float32``, ``bfloat16``, ``float16`` or an alias (``fp32``,
    ``bf16``, ``fp16``, ``half``); anything else is one line of bad input."""
    text = str(dtype or "auto").strip().lower()
    text = _DTYPE_ALIASES.get(text, text)
    for known in DTYPES:
        if text == known:
            return known
    raise BadInputError(f"dtype {dtype!r}: give one of {', '.join(DTYPES)}")


def parse_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``, stripped; anything else is one line of bad input."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device.strip()):
        raise BadInputError(f"--device {device!r}: give cpu, cuda or cuda:N")
    return device.strip()


def check_model_dir(model_dir: Path) -> None:
    """One line of bad input for a directory that cannot be served, before loading."""
    if not model_dir.exists():
        raise BadInputError(f"{model_dir}: no such model directory")
    if not model_dir.is_dir():
        raise BadInputError(f"{model_dir}: not a directory; give a Hugging Face model directory")
    if not (model_dir / "config.json").is_file():
        raise BadInputError(
            f"{model_dir}: not a Hugging Face model directory (no config.json); "
            "save one with save_pretrained"
        )
    if not any(model_dir.glob("*.safetensors")):
        pickles = [name for name in _PICKLE_WEIGHTS if (model_dir / name).exists()]
        if pickles:
            raise BadInputError(
                f"{model_dir}: weights only in {pickles[0]} (a pickle, which can run code when "
                "loaded); in-process serving loads safetensors only: re-save the model with "
                "save_pretrained(safe_serialization=True)"
            )
        raise BadInputError(f"{model_dir}: no *.safetensors weights in the model directory")
    if not any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        raise BadInputError(
            f"{model_dir}: no tokenizer (no tokenizer.json or tokenizer_config.json); "
            "save the tokenizer into the model directory too"
        )


def model_type_of(model_dir: Path) -> str | None:
    """``model_type`` from ``config.json`` without loading anything; ``None`` when unreadable."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(config.get("model_type")) if isinstance(config, dict) else None


def _check_device(device: str, torch: Any) -> None:
    """One line of bad input for a CUDA device this machine does not have."""
    if device == "cpu":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if count == 0:
        raise BadInputError(f"--device {device}: no CUDA device here (torch sees none)")
    if index >= count:
        raise BadInputError(
            f"--device {device}: no such GPU (this machine has {count}: cuda:0..cuda:{count - 1})"
        )


def load_model(model_dir: Path, *, dtype: Dtype, device: str, threads: int | None) -> LoadedModel:
    """Check ``model_dir``, load its tokenizer and causal LM onto ``device`` in ``dtype``;
    ``threads`` sets ``torch.set_num_threads`` (process-wide) first. Any failure is one line of
    :class:`~accelscope.errors.BadInputError`."""
    check_model_dir(model_dir)
    try:
        import torch
        import transformers
    except ImportError:
        raise BadInputError(
            "in-process serving needs the transformers package: "
            "pip install 'accelscope[transformers]'"
        ) from None
    if threads is not None:
        torch.set_num_threads(threads)
    _check_device(device, torch)
    torch_dtype: Any = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            model_dir, local_files_only=True, trust_remote_code=False
        )
    except Exception as error:  # noqa: BLE001 - any loader failure is bad input, one line
        raise BadInputError(
            f"{model_dir}: cannot load the tokenizer: {exception_line(error, named=True)}"
        ) from None
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir,
            local_files_only=True,
            use_safetensors=True,
            trust_remote_code=False,
            dtype=torch_dtype,
        )
    except Exception as error:  # noqa: BLE001 - any loader failure is bad input, one line
        raise BadInputError(
            f"{model_dir}: cannot load a causal language model: {exception_line(error, named=True)}"
        ) from None
    model.train(False)
    if device != "cpu":
        mover: Any = model  # transformers types .to() for its own call forms only
        mover.to(device)
    generation_config = copy.deepcopy(model.generation_config)
    eos = generation_config.eos_token_id
    eos_list = [eos] if isinstance(eos, int) else list(eos or [])
    eos_ids = frozenset(int(e) for e in eos_list if e is not None and int(e) >= 0)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = next(iter(sorted(eos_ids)), None)
    if pad is None:
        pad = tokenizer.eos_token_id
    context = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        generation_config=generation_config,
        eos_ids=eos_ids,
        pad_id=int(pad) if pad is not None else 0,
        context_tokens=int(context) if isinstance(context, int) and context > 0 else None,
        parameters=int(sum(p.numel() for p in model.parameters())),
        model_type=str(model.config.model_type),
    )
