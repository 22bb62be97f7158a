"""Gradient compression codecs against NumPy closed forms (no MPI needed)."""
from __future__ import annotations

import numpy as np
import pytest

from portable.errors import PortableError
from portable.kvstore.compression import (FP16Compressor, TwoBitCompressor,
                                          create_compressor)


def test_two_bit_sends_plus_minus_threshold_and_keeps_the_rest():
    codec = TwoBitCompressor(0.5)
    rng = np.random.default_rng(0)
    residual = np.zeros(1001, np.float32)
    for _ in range(4):
        g = rng.normal(size=1001).astype(np.float32)
        payload = np.empty(codec.payload_nbytes(g.size), np.uint8)
        codec.encode(g, payload, "k", g.size, 0)
        decoded = np.zeros(g.size, np.float32)
        codec.decode_add(payload, decoded)
        acc = residual + g
        want = 0.5 * ((acc >= 0.5).astype(np.float32) - (acc <= -0.5))
        np.testing.assert_array_equal(decoded, want)
        residual = acc - want
        np.testing.assert_allclose(codec.residual("k", g.size), residual, atol=1e-6)
    assert payload.size == 251  # 2 bits per value


def test_two_bit_slices_share_the_tensor_residual_and_none_keeps_none():
    codec = TwoBitCompressor(1.0)
    g = np.array([0.6, 0.6, -0.6, 2.0], np.float32)
    for start in (0, 2):
        codec.encode(g[start:start + 2], np.empty(1, np.uint8), "t", 4, start)
    np.testing.assert_allclose(codec.residual("t", 4), [0.6, 0.6, -0.6, 1.0])
    out = np.empty(1, np.uint8)
    codec.encode(np.full(2, 5.0, np.float32), out, None, 2, 0)
    decoded = np.zeros(2, np.float32)
    codec.decode_add(out, decoded)
    assert decoded.tolist() == [1.0, 1.0]


def test_fp16_round_trip_is_the_float16_rounding():
    codec = FP16Compressor()
    g = np.random.default_rng(1).normal(size=17).astype(np.float32)
    payload = np.empty(codec.payload_nbytes(17), np.uint8)
    codec.encode(g, payload, None, 17, 0)
    out = np.ones(17, np.float32)
    codec.decode_add(payload, out)
    np.testing.assert_array_equal(out, 1 + g.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("params, message", [
    ({"type": "3bit"}, "unknown gradient compression type"),
    ({"threshold": 1}, "must be a dict with a 'type'"),
    ({"type": "2bit", "threshold": -1}, "threshold must be positive"),
    ({"type": "2bit", "tresh": 1}, "unknown parameters"),
])
def test_bad_compression_parameters_are_refused(params, message):
    with pytest.raises(PortableError, match=message):
        create_compressor(params)


def test_none_means_no_compression():
    assert create_compressor(None) is None and create_compressor({"type": "none"}) is None
    assert create_compressor({"type": "2bit"}).config() == {"type": "2bit", "threshold": 0.5}
