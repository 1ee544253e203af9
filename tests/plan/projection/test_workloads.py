"""plan/projection/workloads.py: a sample's work is counted, not remembered."""

from __future__ import annotations

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.projection.workloads import BENCHMARKS, _encoder_ops, benchmark


def test_resnet50s_work_is_what_the_operator_counter_counts() -> None:
    torch = pytest.importorskip("torch")
    from accelscope.models.inputs import make_batch
    from accelscope.models.loading import load_model
    from accelscope.roofline.counting import count_ops

    model = load_model("resnet50")
    batch = make_batch(model.inputs, 1, 0)
    assert model.module is not None
    module = model.module.eval()
    with torch.no_grad():
        records, _ = count_ops(lambda: module(**batch))
    counted = sum(r.flops for r in records)
    assert BENCHMARKS["resnet50"].ops_per_sample == pytest.approx(counted, rel=0.005)


def test_the_encoder_formula_matches_a_counted_encoder() -> None:
    torch = pytest.importorskip("torch")
    from accelscope.roofline.counting import count_ops

    layers, hidden, ffn, seq, heads = 2, 64, 256, 32, 4
    layer = torch.nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    # with autograd on, torch takes the unfused path (eval + no_grad runs one fused kernel)
    records, _ = count_ops(lambda: encoder(torch.randn(1, seq, hidden)))
    matmul = sum(r.flops for r in records if r.category in ("matmul", "attention"))
    assert _encoder_ops(layers, hidden, ffn, seq) == pytest.approx(matmul, rel=0.02)


def test_an_unknown_benchmark_is_bad_input() -> None:
    assert benchmark("llama2-70b-99.9").name == "llama2-70b"
    with pytest.raises(BadInputError, match="unknown published benchmark 'dlrm'"):
        benchmark("dlrm")
