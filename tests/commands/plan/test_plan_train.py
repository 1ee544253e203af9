"""``accelscope plan train`` end to end (in process): memory per sharding, fit per datasheet,
time and $ with intervals, the deadline and budget choices, and bad input as one line, exit 2."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from accelscope.commands.plan.train import MemoryBreakdown
from accelscope.testing import CliRunner, assert_one_line_error

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "examples" / "plan" / "llama-3.1-8b-config.json"
FOUR = "NVIDIA H100 SXM 80GB,nvidia-h200,amd-mi300x,google-tpu-v6e"


def _documented_line(which: int = 0) -> list[str]:
    """docs/plan.md's ``$ accelscope plan train`` lines (the Llama-3.1-8B line, then the
    measured step's), split as a shell would."""
    text = (REPO / "docs" / "plan.md").read_text(encoding="utf-8")
    lines = [x for x in text.splitlines() if x.startswith("$ accelscope plan train ")]
    assert len(lines) == 2
    return shlex.split(lines[which])[2:]


def test_the_documented_llama_8b_line_runs_as_written(cli: CliRunner) -> None:
    """docs/plan.md's line as written, then with --json: memory per sharding, and time and $
    with an interval on at least four accelerator classes."""
    args = _documented_line()
    code, out, err = cli(*args)
    assert code == 0, err
    assert "memory per device" in out and "zero3" in out and "pooled" in out
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "train" and doc["sharding"] == "fsdp" and doc["dp"] == 8
    assert doc["params"] == 8_030_261_248  # the Hub's count for Llama-3.1-8B
    memory = {m["sharding"]: m for m in doc["memory"]}
    assert list(memory) == ["ddp", "zero1", "zero2", "zero3"]
    totals = [memory[s]["total_bytes"] for s in memory]
    assert totals == sorted(totals, reverse=True)  # each stage shards more
    published = [o for o in doc["options"] if o["basis"].startswith("MLPerf Training:")]
    assert len(published) >= 4
    for option in doc["options"]:
        assert option["time_low_s"] < option["time_s"] < option["time_high_s"]
        assert option["usd_low"] < option["usd"] < option["usd_high"]
        assert option["fits"] is (option["total_bytes"] <= option["memory_bytes"])
        assert (option["max_micro_batch"] >= 1) is option["fits"]


def test_a_deadline_picks_the_cheapest_and_a_budget_the_fastest(cli: CliRunner) -> None:
    code, out, err = cli(
        "plan", "train", CONFIG, "--accelerators", FOUR, "--deadline", "2h",
        "--budget-usd", "1000", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    options = {o["accelerator"]: o for o in doc["options"]}
    cheapest = options[doc["cheapest_in_deadline"]]
    for option in options.values():
        assert option["deadline_devices"] is not None
        # more devices than 8 where the slow end of 8 misses 2 h
        assert option["deadline_devices"] >= 8 * option["time_high_s"] / 7200 - 1
        assert cheapest["deadline_usd"] <= option["deadline_usd"]
    fastest = options[doc["fastest_in_budget"]]
    within = [o for o in options.values() if o["usd"] <= 1000]
    assert fastest["time_s"] == min(o["time_s"] for o in within)


def test_sharding_fp8_and_tensor_parallel_reach_the_memory_model(cli: CliRunner) -> None:
    code, out, err = cli(
        "plan", "train", CONFIG, "--sharding", "ddp", "--devices", "1", "--precision", "fp8",
        "--optimizer", "adam8bit", "--no-checkpointing", "--json",
        "--accelerators", "nvidia-a100,nvidia-h100",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert [m["sharding"] for m in doc["memory"]] == ["ddp"]  # no ZeRO over one device
    a100 = next(o for o in doc["options"] if o["family"] == "nvidia-a100")
    assert a100["fits"] is None and "no fp8 peak" in a100["why"]
    code, out, err = cli("plan", "train", CONFIG, "--tp", "2", "--devices", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["dp"] == 4


def test_a_memory_breakdown_refuses_parts_that_miss_the_total() -> None:
    parts = {
        "sharding": "ddp",
        "dp": 1,
        "weights_bytes": 1.0,
        "gradient_bytes": 1.0,
        "optimizer_bytes": 1.0,
        "activation_bytes": 1.0,
        "overhead_bytes": 1.0,
        "peak_phase": "backward",
    }
    MemoryBreakdown(**parts, total_bytes=5.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parts"):
        MemoryBreakdown(**parts, total_bytes=50.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        MemoryBreakdown(**{**parts, "gradient_bytes": -1.0}, total_bytes=3.0)  # type: ignore[arg-type]


BERT = {
    "architectures": ["BertForMaskedLM"],
    "model_type": "bert",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 30522,
}
VIT = {
    "architectures": ["ViTForImageClassification"],
    "model_type": "vit",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "image_size": 224,
}


MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
}


@pytest.mark.parametrize(
    ("config", "mentions"),
    [
        (BERT, ("'bert'", "not a decoder")),
        (VIT, ("'vit'", "not a decoder")),
        ({**BERT, "architectures": None}, ("'bert'", "no architectures", "not a decoder")),
        (MIXTRAL, ("'mixtral'", "no MoE")),
    ],
)
def test_a_config_that_is_not_a_dense_decoder_is_one_line(
    tmp_path: Path, cli: CliRunner, config: dict[str, object], mentions: tuple[str, ...]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, _, err = cli("plan", "train", path)
    assert_one_line_error(code, err, *mentions)


@pytest.mark.parametrize(
    ("args", "mention"),
    [
        (("--optimizer", "lion"), "--optimizer 'lion' unknown"),
        (("--sharding", "zero4"), "--sharding 'zero4' unknown"),
        (("--precision", "fp16"), "--precision 'fp16' unknown"),
        (("--micro-batch", "0"), "--micro-batch must be at least 1"),
        (("--tp", "3"), "--tp 3"),
        (("--devices", "1"), "--devices"),
        (("--tokens", "lots"), "--tokens"),
        (("--deadline", "soon"), "soon"),
        (("--accelerators", "nvidia-z9"), "no accelerator 'nvidia-z9'"),
        (("--measured-step", "2s"), "go together"),
        (("--measured-on", "NVIDIA L4"), "go together"),
        (("--measured-devices", "4"), "--measured-devices needs"),
        (("--measured-step", "2s", "--measured-on", "nvidia-z9"), "no accelerator 'nvidia-z9'"),
        (("--measured-step", "2s", "--measured-on", "nvidia-h100"), "names a family"),
        (("--measured-step", "1ms", "--measured-on", "NVIDIA L4"), "cannot beat the datasheet"),
        (
            ("--measured-step", "2s", "--measured-on", "NVIDIA L4", "--measured-devices", "0"),
            "--measured-devices 0",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    cli: CliRunner, args: tuple[str, ...], mention: str
) -> None:
    code, _, err = cli("plan", "train", CONFIG, *args)
    assert_one_line_error(code, err, mention)


def test_a_missing_or_broken_config_is_one_line_and_exit_2(tmp_path: Path, cli: CliRunner) -> None:
    code, _, err = cli("plan", "train", tmp_path / "absent.json")
    assert_one_line_error(code, err, "no such file")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    code, _, err = cli("plan", "train", broken)
    assert_one_line_error(code, err, "not valid JSON")


LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}


def test_a_deadline_adds_devices_until_the_sharded_step_fits(
    tmp_path: Path, cli: CliRunner
) -> None:
    """Llama-2-70B under FSDP does not fit 8 L40S; a lax deadline asks for the fewest that it
    fits on (each more device shards more), and under DDP no count ever fits."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_70B), encoding="utf-8")
    base = ("plan", "train", config, "--accelerators", "nvidia-l40s", "--json")
    code, out, err = cli(*base, "--deadline", "3650d")
    assert code == 0, err
    (option,) = json.loads(out)["options"]
    assert option["fits"] is False and option["deadline_devices"] > 8
    fewest = option["deadline_devices"]
    for devices, fits in ((fewest, True), (fewest - 1, False)):
        code, out, err = cli(*base, "--devices", str(devices))
        assert code == 0, err
        assert json.loads(out)["options"][0]["fits"] is fits, devices
    code, out, err = cli(*base, "--deadline", "3650d", "--sharding", "ddp")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["options"][0]["deadline_devices"] is None and doc["cheapest_in_deadline"] is None


def test_a_measured_step_narrows_its_family_and_says_so(cli: CliRunner) -> None:
    """The user's step of this configuration on 8 L4s (no MLPerf row: pooled, wide) narrows the
    L4's interval and names itself in the basis and the assumptions; the H100 keeps its rows."""
    base = ("plan", "train", CONFIG, "--accelerators", "NVIDIA L4,NVIDIA H100 SXM 80GB")
    code, out, err = cli(*base, "--json")
    assert code == 0, err
    before = {o["accelerator"]: o for o in json.loads(out)["options"]}
    code, out, err = cli(*base, "--measured-step", "24s", "--measured-on", "NVIDIA L4", "--json")
    assert code == 0, err
    doc = json.loads(out)
    after = {o["accelerator"]: o for o in doc["options"]}
    l4, l4_before = after["NVIDIA L4"], before["NVIDIA L4"]
    assert 0 < doc["measured_mfu"] < 1
    assert l4["basis"].endswith("+ your step of 24 s on 8 x NVIDIA L4")
    assert l4["time_high_s"] / l4["time_low_s"] < l4_before["time_high_s"] / l4_before["time_low_s"]
    assert any(a.startswith("your step of 24 s") for a in doc["assumptions"])
    assert "+ your step" not in after["NVIDIA H100 SXM 80GB"]["basis"]
    code, out, err = cli(*base, "--measured-step", "24s", "--measured-on", "NVIDIA L4")
    assert code == 0 and "your step of 24 s on 8 x NVIDIA L4" in out, err
    # docs/plan.md's measured-step line, as written: the A100 narrows to 11.9-21.9 h
    code, out, err = cli(*_documented_line(1))
    assert code == 0, err
    assert "16.1 h [11.9 h-21.9 h]" in out and "your step of 1.9 s on 8 x NVIDIA A100" in out


def test_save_stores_the_plan_and_runs_show_prints_it(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "runs.db"
    args = ("plan", "train", CONFIG, "--accelerators", "NVIDIA H100 SXM 80GB", "--store", store)
    code, out, err = cli(*args)
    assert code == 0, err
    assert not store.exists()  # an estimate is stored only when asked
    code, out, err = cli(*args, "--save")
    assert code == 0, err
    assert "stored run" in out
    code, shown, err = cli("runs", "show", "latest", "--store", store)
    assert code == 0, err
    assert "memory per device" in shown and "NVIDIA H100 SXM 80GB" in shown
