"""LLM memory from config shapes: the Llama-3.1-8B worked example, GQA, windows, MLA, MoE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import estimate_memory, shape_from_config
from accelscope.testing import CliRunner, assert_one_line_error

LLAMA_8B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}
GIB = 1 << 30


def test_llama_3_1_8b_needs_131072_bytes_of_kv_per_token_at_bf16() -> None:
    shape = shape_from_config(LLAMA_8B)
    estimate = estimate_memory(
        shape, context=8192, batch=1, precision="bf16", catalog=load_catalog()
    )
    assert estimate.kv_bytes_per_token == 131_072 == 2 * 32 * 8 * 128 * 2
    assert estimate.kv_bytes_per_sequence == GIB  # 1 GiB per 8 K tokens
    assert sum(estimate.params.values()) == 8_030_261_248  # the published 8.03 B
    assert estimate.weights_bytes == pytest.approx(2 * 8_030_261_248)
    fp8 = estimate_memory(shape, context=8192, batch=1, precision="fp8", catalog=load_catalog())
    assert fp8.kv_bytes_per_token == 65_536


def test_fit_and_concurrency_on_catalog_gpus(tmp_path: Path, cli: CliRunner) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_8B), encoding="utf-8")
    code, out, err = cli(
        "plan",
        "memory",
        config,
        "--context",
        "32k",
        "--batch",
        "4",
        "--precision",
        "bf16",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kv_bytes"] == 4 * 4 * GIB and doc["context_tokens"] == 32768
    fits = {f["instance"]: f for f in doc["fits"]}
    assert fits["g4dn.xlarge"]["gpus_needed"] is None  # a 16 GB card cannot hold it
    assert fits["g4dn.xlarge"]["max_sequences"] == 0
    assert fits["g6e.xlarge"]["gpus_needed"] == 1 and fits["g6e.xlarge"]["max_sequences"] >= 4
    assert fits["p5.48xlarge"]["max_sequences"] > fits["p4d.24xlarge"]["max_sequences"]
    code, out, _ = cli("plan", "memory", config, "--context", "32k")
    assert code == 0 and "131,072 B/token" in out and "estimate" in out


def test_sliding_window_caps_the_cache() -> None:
    mistral = {**LLAMA_8B, "model_type": "mistral", "sliding_window": 4096}
    shape = shape_from_config(mistral)
    assert shape.kv_values_per_sequence(32768) == shape.kv_values_per_token() * 4096
    gemma = {
        **LLAMA_8B,
        "model_type": "gemma2",
        "sliding_window": 4096,
        "layer_types": ["sliding_attention", "full_attention"] * 16,
    }
    shape = shape_from_config(gemma)
    per_layer = 2 * 8 * 128
    assert shape.kv_values_per_sequence(32768) == per_layer * (16 * 32768 + 16 * 4096)
    off = shape_from_config({**mistral, "use_sliding_window": False})
    assert off.kv_values_per_sequence(32768) == off.kv_values_per_token() * 32768


def test_mla_and_moe_shapes() -> None:
    deepseek = {  # DeepSeek-V2-Lite-shaped
        "model_type": "deepseek_v2",
        "hidden_size": 2048,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "vocab_size": 102400,
        "tie_word_embeddings": False,
    }
    shape = shape_from_config(deepseek)
    assert shape.mla and shape.kv_values_per_token() == 27 * (512 + 64)
    total = sum(shape.params().values())
    assert 15.0e9 < total < 16.5e9  # DeepSeek-V2-Lite has 15.7 B parameters
    mixtral = {
        **LLAMA_8B,
        "model_type": "mixtral",
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
    }
    assert 46e9 < sum(shape_from_config(mixtral).params().values()) < 47.5e9  # 46.7 B
    tied = shape_from_config({k: v for k, v in LLAMA_8B.items() if k != "tie_word_embeddings"})
    assert tied.tied_embeddings and tied.params()["lm_head"] == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "not a JSON object"),
        (
            json.dumps({k: v for k, v in LLAMA_8B.items() if k != "hidden_size"}),
            "config.json: field 'hidden_size': missing",
        ),
        (json.dumps({**LLAMA_8B, "vocab_size": "many"}), "field 'vocab_size': must be an integer"),
        (json.dumps({**LLAMA_8B, "n_routed_experts": True}), "field 'n_routed_experts'"),
        (json.dumps({**LLAMA_8B, "num_key_value_heads": 5}), "not a multiple"),
        (json.dumps({**LLAMA_8B, "num_hidden_layers": -1}), "positive integer"),
    ],
)
def test_bad_configs_are_one_line(
    content: str, expected: str, tmp_path: Path, cli: CliRunner
) -> None:
    path = tmp_path / "config.json"
    path.write_text(content, encoding="utf-8")
    code, _, err = cli("plan", "memory", path, "--context", "8k")
    assert_one_line_error(code, err, expected)


def test_bad_flags() -> None:
    shape = shape_from_config(LLAMA_8B)
    with pytest.raises(BadInputError, match="precision 'fp12'"):
        estimate_memory(shape, context=8, batch=1, precision="fp12", catalog=load_catalog())
