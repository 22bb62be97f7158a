"""A small pre-norm decoder block written with onnx.helper at opset 23 (LayerNormalization,
rotary Q and K, causal grouped-query Attention, a Gelu MLP, residuals) runs through portable's
ONNX backend and its on-device Predictor (CPU, and OpenCL where there is one) and matches
onnxruntime within 1e-4; a decode step with a key/value cache matches it too, present_key and
present_value included.
"""
import numpy as np
import pytest

from tests.exporters.helpers import helper, make_model, ort_run, tensor

from exporters.onnx import backend
from portable.predict import Predictor

BATCH, SEQ, EMBED, Q_HEADS, KV_HEADS, HEAD = 2, 5, 16, 4, 2, 4
HIDDEN, MAX_POSITIONS = 32, 16
OPSET = 23


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    angles = np.outer(np.arange(MAX_POSITIONS), 1.0 / 100 ** (np.arange(HEAD // 2) / (HEAD // 2)))
    return {
        "ln1_scale": 1 + w(EMBED, scale=0.1), "ln1_bias": w(EMBED, scale=0.1),
        "ln2_scale": 1 + w(EMBED, scale=0.1), "ln2_bias": w(EMBED, scale=0.1),
        "wq": w(EMBED, Q_HEADS * HEAD), "wk": w(EMBED, KV_HEADS * HEAD),
        "wv": w(EMBED, KV_HEADS * HEAD), "wo": w(Q_HEADS * HEAD, EMBED),
        "w1": w(EMBED, HIDDEN), "b1": w(HIDDEN, scale=0.1), "w2": w(HIDDEN, EMBED),
        "b2": w(EMBED, scale=0.1),
        "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
    }


def _decoder(with_cache: bool):
    """The block's nodes; with a cache, Attention also takes past_key/past_value and gives
    present_key/present_value (the decode step of a generation loop)."""
    n = helper.make_node
    attention_inputs = ["q_rot", "k_rot", "v"] + (["", "past_key", "past_value"]
                                                  if with_cache else [])
    attention_outputs = ["attended"] + (["present_key", "present_value"] if with_cache else [])
    return [
        n("LayerNormalization", ["x", "ln1_scale", "ln1_bias"], ["ln1"], axis=-1),
        n("MatMul", ["ln1", "wq"], ["q"]),
        n("MatMul", ["ln1", "wk"], ["k"]),
        n("MatMul", ["ln1", "wv"], ["v"]),
        n("RotaryEmbedding", ["q", "cos", "sin", "positions"], ["q_rot"], num_heads=Q_HEADS),
        n("RotaryEmbedding", ["k", "cos", "sin", "positions"], ["k_rot"], num_heads=KV_HEADS),
        n("Attention", attention_inputs, attention_outputs, is_causal=1, q_num_heads=Q_HEADS,
          kv_num_heads=KV_HEADS),
        n("MatMul", ["attended", "wo"], ["projected"]),
        n("Add", ["x", "projected"], ["h"]),
        n("LayerNormalization", ["h", "ln2_scale", "ln2_bias"], ["ln2"], axis=-1),
        n("MatMul", ["ln2", "w1"], ["up"]),
        n("Add", ["up", "b1"], ["up_biased"]),
        n("Gelu", ["up_biased"], ["activated"]),
        n("MatMul", ["activated", "w2"], ["down"]),
        n("Add", ["down", "b2"], ["mlp"]),
        n("Add", ["h", "mlp"], ["y"]),
    ], ["y"] + attention_outputs[1:]


def _model(with_cache: bool, feeds: dict):
    nodes, outputs = _decoder(with_cache)
    initializers = [tensor(name, value) for name, value in _weights().items()]
    return make_model(nodes, list(feeds.items()), outputs, OPSET, initializers)


def _feeds(seq: int, start: int, with_cache: bool, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((BATCH, seq, EMBED)).astype(np.float32),
             "positions": np.tile(np.arange(start, start + seq, dtype=np.int64), (BATCH, 1))}
    if with_cache:
        for name in ("past_key", "past_value"):
            feeds[name] = (rng.standard_normal((BATCH, KV_HEADS, start, HEAD)) * 0.5
                           ).astype(np.float32)
    return feeds


def _compare(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_cache", [False, True], ids=["prefill", "decode_with_cache"])
def test_decoder_block_matches_onnxruntime(with_cache):
    feeds = _feeds(1 if with_cache else SEQ, 3 if with_cache else 0, with_cache)
    model = _model(with_cache, feeds)
    expected = ort_run(model, feeds)
    _compare(list(backend.prepare(model).run(feeds)), expected)


def _device(name: str):
    """The device, or skip saying why it is missing (OpenCL needs pyopencl and a platform)."""
    if name == "cpu":
        return name
    pytest.importorskip("pyopencl", reason="pyopencl is not installed")
    import portable as pt
    from portable.errors import BackendError

    try:
        device = pt.opencl(0)
        device.backend
    except BackendError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    return device


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_decoder_block_through_the_predictor(tmp_path, device):
    feeds = _feeds(SEQ, 0, with_cache=False)
    model = _model(False, feeds)
    expected = ort_run(model, feeds)
    path = tmp_path / "decoder.onnx"
    path.write_bytes(model.SerializeToString())
    predictor = Predictor(path, device=_device(device), batch_size=BATCH)
    _compare(predictor.predict(feeds), expected)
