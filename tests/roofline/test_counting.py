"""FLOP and byte counts of single operators, checked against arithmetic written out by hand.

Every op runs under ``inference_mode`` (as the roofline does), on float32 unless stated, so
4 bytes per element. Bytes are read (distinct input storages) + written (outputs).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from accelscope.roofline.counting import OpRecord, count_ops
from accelscope.roofline.flops import categorize, flops_of


def _run(fn: object) -> list[OpRecord]:
    with torch.inference_mode():
        records, _ = count_ops(fn)  # type: ignore[arg-type]
    return records


def _only(records: list[OpRecord], name: str) -> OpRecord:
    found = [r for r in records if r.name == name]
    assert len(found) == 1, [r.name for r in records]
    return found[0]


def test_conv2d_flops_and_bytes() -> None:
    x = torch.randn(2, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3)
    b = torch.randn(4)
    op = _only(_run(lambda: F.conv2d(x, w, b, padding=1)), "aten::conv2d")
    # output 2x4x8x8 = 512 elements; each: 3 in-channels x 3x3 taps = 27 MACs = 54 FLOPs
    # plus 1 bias add: 512 x 54 + 512 = 28_160
    assert op.flops == 512 * 54 + 512 == 28_160
    # read x 2*3*8*8=384, w 4*3*3*3=108, b 4 -> 496 elements; write 512 -> (496+512)*4
    assert (op.read_bytes, op.written_bytes) == (496 * 4, 512 * 4)
    assert (op.category, op.dtype) == ("conv", "fp32")


def test_grouped_and_depthwise_conv_count_only_their_groups() -> None:
    x = torch.randn(1, 8, 6, 6)
    grouped = _only(_run(lambda: F.conv2d(x, torch.randn(8, 2, 3, 3), groups=4)), "aten::conv2d")
    # output 1x8x4x4 = 128; each sees 8/4 = 2 channels x 9 taps = 18 MACs -> 128 x 36
    assert grouped.flops == 128 * 36 == 4608
    depthwise = _only(_run(lambda: F.conv2d(x, torch.randn(8, 1, 3, 3), groups=8)), "aten::conv2d")
    assert depthwise.flops == 128 * 9 * 2 == 2304


def test_linear_flops_and_bytes() -> None:
    x, w, b = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8)
    op = _only(_run(lambda: F.linear(x, w, b)), "aten::linear")
    # 4x8 outputs x 16 MACs x 2 = 1024, + 32 bias adds
    assert op.flops == 2 * 4 * 8 * 16 + 4 * 8 == 1056
    # read 64 + 128 + 8 = 200 floats, write 32 floats
    assert (op.read_bytes, op.written_bytes) == (200 * 4, 32 * 4)


def test_plain_matmul_family() -> None:
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 2)
    op = _only(_run(lambda: torch.bmm(a, b)), "aten::bmm")
    assert op.flops == 2 * 3 * 5 * 2 * 7 == 420
    bias = torch.randn(5, 2)
    addmm = _only(_run(lambda: torch.addmm(bias, a[0], b[0])), "aten::addmm")
    assert addmm.flops == 2 * 5 * 2 * 7 + 5 * 2 == 150


# attention: batch 2, heads 3, L = 4 queries, S = 5 keys, E = 8 (head dim), Ev = 8
B, H, L, S, E = 2, 3, 4, 5, 8
SCORES = B * H * L * S  # 120
# two matmuls 2*SCORES*E each, then per score: scale 1 + softmax 5
ATTENTION_FLOPS = 2 * SCORES * E + 2 * SCORES * E + SCORES * (1 + 5)


def test_sdpa_counts_both_matmuls_scale_and_softmax() -> None:
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, H, S, E)
    op = _only(
        _run(lambda: F.scaled_dot_product_attention(q, k, v)), "aten::scaled_dot_product_attention"
    )
    assert op.flops == ATTENTION_FLOPS == 4560
    # read q 192 + k 240 + v 240 floats, write the output B*H*L*E = 192 floats
    assert (op.read_bytes, op.written_bytes) == ((192 + 240 + 240) * 4, 192 * 4)
    assert op.category == "attention"
    masked = _only(
        _run(
            lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=False, attn_mask=torch.zeros(L, S)
            )
        ),
        "aten::scaled_dot_product_attention",
    )
    assert masked.flops == ATTENTION_FLOPS + SCORES  # one mask add per score


def test_explicit_attention_adds_up_to_the_same_flops() -> None:
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, H, S, E)

    def explicit() -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(E)
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    records = _run(explicit)
    by_name = {r.name: r for r in records if r.flops}
    matmuls = [r for r in records if r.name == "aten::matmul"]
    assert [m.flops for m in matmuls] == [2 * SCORES * E, 2 * SCORES * E]
    assert by_name["aten::div"].flops == SCORES  # scale: 1 per score
    assert by_name["aten::softmax"].flops == 5 * SCORES
    assert sum(r.flops or 0 for r in records) == ATTENTION_FLOPS
    transpose = _only(records, "aten::transpose")
    assert (transpose.category, transpose.bytes, transpose.flops) == ("view", 0, 0.0)


def test_layer_norm() -> None:
    x = torch.randn(2, 3, 4)
    op = _only(
        _run(lambda: F.layer_norm(x, (4,), torch.ones(4), torch.zeros(4))), "aten::layer_norm"
    )
    # 24 elements x (5 normalisation + 1 weight + 1 bias) = 168
    assert op.flops == 24 * 7 == 168
    # read x 24 + weight 4 + bias 4 floats, write 24 floats
    assert (op.read_bytes, op.written_bytes) == (32 * 4, 24 * 4)
    bare = _only(_run(lambda: F.layer_norm(x, (4,))), "aten::layer_norm")
    assert bare.flops == 24 * 5


def test_softmax_and_elementwise() -> None:
    x = torch.randn(6, 10)
    soft = _only(_run(lambda: torch.softmax(x, dim=-1)), "aten::softmax")
    assert soft.flops == 60 * 5 == 300
    assert (soft.read_bytes, soft.written_bytes) == (240, 240)
    y = torch.randn(6, 10)
    add = _only(_run(lambda: x + y), "aten::add")
    assert add.flops == 60  # 1 FLOP per output element
    assert (add.read_bytes, add.written_bytes) == (480, 240)
    gelu = _only(_run(lambda: F.gelu(x)), "aten::gelu")
    assert gelu.flops == 60  # activations: 1 per element too, by convention


def test_bf16_bytes_use_two_bytes_per_element() -> None:
    x, y = torch.randn(6, 10).bfloat16(), torch.randn(6, 10).bfloat16()
    add = _only(_run(lambda: x * y), "aten::mul")
    assert (add.dtype, add.read_bytes, add.written_bytes) == ("bf16", 240, 120)


def test_in_place_reads_and_writes_its_operand() -> None:
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    op = _only(_run(lambda: x.add_(y)), "aten::add_")
    # reads x and y (20 floats each), writes x (20 floats)
    assert (op.read_bytes, op.written_bytes, op.flops) == (160, 80, 20.0)


def test_broadcast_operand_counts_the_memory_it_spans() -> None:
    x, bias = torch.randn(8, 16), torch.randn(16)
    op = _only(_run(lambda: x + bias.expand(8, 16)), "aten::add")
    # the expanded bias spans 16 floats, not 128
    assert op.read_bytes == (128 + 16) * 4


def test_two_views_of_one_buffer_count_it_once() -> None:
    qkv = torch.randn(4, 3, 8)
    op = _only(_run(lambda: qkv[:, 0] + qkv[:, 0]), "aten::add")
    assert op.read_bytes == 4 * 8 * 4  # the same slice twice: read once


def test_pooling_and_reductions() -> None:
    x = torch.randn(1, 2, 4, 4)
    pool = _only(_run(lambda: F.max_pool2d(x, 2)), "aten::max_pool2d")
    assert pool.flops == 1 * 2 * 2 * 2 * 4  # 8 outputs x 2x2 window
    mean = _only(_run(lambda: x.mean()), "aten::mean")
    assert mean.flops == 32  # 1 per input element


def test_unknown_ops_are_listed_not_zero() -> None:
    assert categorize("aten::fft_fft") == "uncounted"
    assert flops_of("aten::fft_fft", {}, None) is None
    x = torch.randn(16)
    op = _only(_run(lambda: torch.fft.fft(x)), "aten::fft_fft")
    assert op.flops is None and op.category == "uncounted"


@pytest.mark.parametrize(
    ("name", "base"),
    [("aten::add_", "elementwise"), ("aten::relu_", "elementwise"), ("aten::copy_", "movement")],
)
def test_in_place_names_share_their_rule(name: str, base: str) -> None:
    assert categorize(name) == base
