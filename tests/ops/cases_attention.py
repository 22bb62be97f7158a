"""Op-table cases: Attention and RotaryEmbedding.

Forward outputs are compared with onnx.reference; gradients (Q, K, V, a float attn_mask, the
cache and the rotary caches) with finite differences in float64. Sizes stay small because the
finite differences run the graph twice per input element. Cases whose extra outputs hold -inf
(mode 2 scores under a mask) check the forward only: an infinite output has no finite
difference.
"""
import numpy as np

from tests.ops.harness import Case, rand

B, H, S, T, D = 2, 2, 3, 4, 4


def _qkv(q_heads=H, kv_heads=H, seq=S, keys=T, head=D, v_head=D, seed=0):
    return [rand(B, q_heads, seq, head, seed=seed), rand(B, kv_heads, keys, head, seed=seed + 1),
            rand(B, kv_heads, keys, v_head, seed=seed + 2)]


def _qkv3(q_heads, kv_heads, seq=S, keys=T, head=D, v_head=D, seed=0):
    return [rand(B, seq, q_heads * head, seed=seed),
            rand(B, keys, kv_heads * head, seed=seed + 1),
            rand(B, keys, kv_heads * v_head, seed=seed + 2)]


def _bool_mask(*shape, seed=0):
    mask = np.random.default_rng(seed).uniform(size=shape) > 0.3
    mask[..., 0] = True  # every row attends something (a fully masked row has its own case)
    return mask


_fully_masked = np.ones((S, T), bool)
_fully_masked[1] = False  # query 1 attends nothing: zero probabilities, zero output

CASES = [
    Case("Attention", _qkv(), name="mha_4d"),
    Case("Attention", _qkv3(4, 2), attrs={"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1},
         name="gqa_3d_causal"),
    Case("Attention", _qkv3(2, 1, v_head=3), attrs={"q_num_heads": 2, "kv_num_heads": 1},
         name="mqa_3d_v_head_size"),
    Case("Attention", _qkv(q_heads=4, kv_heads=2) + [rand(S, T, seed=5)],
         attrs={"scale": 0.3}, name="gqa_float_mask_scaled"),
    Case("Attention", _qkv() + [rand(H, S, 3, seed=6)], name="float_mask_short_3d"),
    Case("Attention", _qkv() + [_bool_mask(B, 1, S, 3, seed=7)],
         name="bool_mask_short_padded"),
    Case("Attention", _qkv(keys=2) + [None, rand(B, H, 3, D, seed=8), rand(B, H, 3, D, seed=9)],
         attrs={"is_causal": 1}, outputs=3, name="past_present_causal"),
    Case("Attention", _qkv(q_heads=4, kv_heads=2, keys=2)
         + [rand(1, 4, S, 5, seed=10), rand(B, 2, 3, D, seed=11), rand(B, 2, 3, D, seed=12)],
         outputs=4, attrs={"qk_matmul_output_mode": 2}, name="past_gqa_mask_mode2"),
    Case("Attention", _qkv(), attrs={"softcap": 0.8, "qk_matmul_output_mode": 1}, outputs=4,
         name="softcap_mode1"),
    Case("Attention", _qkv() + [rand(S, T, seed=13)],
         attrs={"softcap": 0.5, "qk_matmul_output_mode": 0}, outputs=4, name="softcap_mode0"),
    Case("Attention", _qkv() + [_fully_masked], attrs={"qk_matmul_output_mode": 3}, outputs=4,
         name="fully_masked_row_mode3"),
    Case("Attention", _qkv(), attrs={"is_causal": 1, "qk_matmul_output_mode": 2}, outputs=4,
         grad=False, name="causal_mode2_neginf"),
    Case("Attention", _qkv(keys=5) + [None, None, None, np.asarray([3, 5], np.int64)],
         attrs={"is_causal": 1}, name="nonpad_causal"),
    Case("Attention", _qkv(keys=5) + [None, None, None, np.asarray([2, 4], np.int64)],
         name="nonpad_padding_only"),
    Case("Attention", _qkv(seq=4, keys=6), attrs={"left_window_size": 1, "right_window_size": 2},
         name="bidirectional_window"),
    Case("Attention", _qkv(keys=2) + [None, rand(B, H, 2, D, seed=14), rand(B, H, 2, D, seed=15)],
         attrs={"is_causal": 1, "left_window_size": 2}, name="causal_window_with_past"),
    Case("Attention", [a.astype(np.float16) for a in _qkv()], attrs={"softmax_precision": 1},
         rtol=2e-3, atol=2e-3, grad=False, name="float16_softmax_in_float32"),
]

# -- RotaryEmbedding ---------------------------------------------------------------------------

_ANGLES = np.outer(np.arange(6), 1.0 / 10000 ** (np.arange(4) / 4)).astype(np.float32)
_POSITIONS = np.asarray([[0, 2, 5], [1, 1, 3]], np.int64)

CASES += [
    Case("RotaryEmbedding", [rand(2, 2, 3, 8), np.cos(_ANGLES), np.sin(_ANGLES), _POSITIONS],
         name="positions_4d"),
    Case("RotaryEmbedding", [rand(2, 3, 16), np.cos(_ANGLES), np.sin(_ANGLES), _POSITIONS],
         attrs={"num_heads": 2, "interleaved": 1}, name="interleaved_3d"),
    Case("RotaryEmbedding", [rand(2, 3, 2, 12), rand(2, 2, 2, seed=1), rand(2, 2, 2, seed=2)],
         attrs={"rotary_embedding_dim": 4}, name="partial_no_positions_4d_transposed"),
    Case("RotaryEmbedding", [rand(2, 3, 12), rand(2, 3, 2, seed=3), rand(2, 3, 2, seed=4)],
         attrs={"num_heads": 2, "rotary_embedding_dim": 4, "interleaved": 1},
         name="partial_interleaved_no_positions_3d"),
]
