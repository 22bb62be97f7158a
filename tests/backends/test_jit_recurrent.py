"""The compiled LSTM and GRU forward loops (backends/numpy/jit/recurrent.py): random
configurations against onnx.reference and against the xp kernel they replace; configurations
they do not take (clip, other activations, input_forget, uneven sequence_lens) give the xp
kernel's answer exactly."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from backends.xp.kernels import kernels as xp_kernels
from portable.backend import KernelContext, array_types
from portable.ops import registry

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")

GATES = {"LSTM": 4, "GRU": 3}
STATES = {"LSTM": 2, "GRU": 1}
DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _attrs(op: str, **given) -> dict:
    return {key: given.get(key, spec.default) for key, spec in registry.get(op).attrs.items()}


def _config(op: str, seed: int):
    """(inputs, attrs, wanted outputs) of one random configuration; absent inputs are None."""
    rng = np.random.default_rng(seed)
    dtype = (np.float32, np.float64)[seed % 2]
    direction = ("forward", "reverse", "bidirectional")[rng.integers(3)]
    layout = int(rng.integers(2))
    steps, batch, size, hidden = (int(rng.integers(1, n + 1)) for n in (7, 3, 6, 9))
    d, g = DIRS[direction], GATES[op]

    def rand(*shape):
        return rng.uniform(-1.5, 1.5, shape).astype(dtype)

    x = rand(steps, batch, size) if layout == 0 else rand(batch, steps, size)
    state = (d, batch, hidden) if layout == 0 else (batch, d, hidden)
    inputs = [x, rand(d, g * hidden, size), rand(d, g * hidden, hidden),
              rand(d, 2 * g * hidden) if rng.random() < 0.7 else None,
              np.full(batch, steps, np.int32) if rng.random() < 0.2 else None]
    inputs += [rand(*state) if rng.random() < 0.6 else None for _ in range(STATES[op])]
    attrs = {"direction": direction, "layout": layout, "hidden_size": hidden}
    if op == "LSTM":
        inputs.append(rand(d, 3 * hidden) if rng.random() < 0.5 else None)
    else:
        attrs["linear_before_reset"] = int(rng.integers(2))
    if rng.random() < 0.2:  # the defaults spelled out
        attrs["activations"] = (["Sigmoid", "Tanh", "Tanh"] if op == "LSTM"
                                else ["Sigmoid", "Tanh"]) * d
    wanted = [True] * (1 + STATES[op])
    if rng.random() < 0.3:
        wanted = [bool(w) for w in rng.integers(2, size=len(wanted))]
        wanted[int(rng.integers(len(wanted)))] = True
    return inputs, attrs, wanted


def _output_shapes(op, inputs, attrs):
    x, layout, d = inputs[0], attrs["layout"], DIRS[attrs["direction"]]
    hidden = inputs[2].shape[2]
    steps, batch = x.shape[:2] if layout == 0 else x.shape[1::-1]
    y = (steps, d, batch, hidden) if layout == 0 else (batch, steps, d, hidden)
    state = (d, batch, hidden) if layout == 0 else (batch, d, hidden)
    return [y] + [state] * STATES[op]


def _outputs(op, inputs, attrs, wanted):
    """Output buffers (stale values that must not leak) where wanted, None elsewhere."""
    return [np.full(s, -7, inputs[0].dtype) if w else None
            for s, w in zip(_output_shapes(op, inputs, attrs), wanted)]


def _compiled(op, inputs, outputs, attrs) -> bool:
    """Run the compiled loop alone (no fallback); whether it took the call."""
    kernel = importlib.import_module(f"backends.numpy.jit.{jit.OVERRIDES[op][0]}").kernels[op]
    attrs = _attrs(op, **attrs)
    state = kernel.compiled_prepare(array_types(inputs), array_types(outputs), attrs)
    return state is not None and bool(kernel.compiled_run(state, _ctx(), inputs, outputs, attrs))


def _onnx_reference(op, inputs, attrs, wanted):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"out{j}" for j in range(len(wanted))], **attrs)
    results = ReferenceEvaluator(node).run(None, {n: v for n, v in zip(names, inputs) if n})
    return [r if w else None for r, w in zip(results, wanted)]


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("seed", range(48))
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_random_configurations(op, seed):
    inputs, attrs, wanted = _config(op, seed)
    before = [None if a is None else a.copy() for a in inputs]
    got = _outputs(op, inputs, attrs, wanted)
    assert _compiled(op, inputs, got, attrs), f"{op} fell back for {attrs}"
    for a, b in zip(inputs, before):  # the states are updated in copies, never the inputs
        if a is not None:
            np.testing.assert_array_equal(a, b)
    # the backend's table entry (prepared, then run) gives the same outputs
    table = _outputs(op, inputs, attrs, wanted)
    jit.kernels[op](_ctx(), inputs, table, _attrs(op, **attrs))
    for t, g in zip(table, got):
        if g is not None:
            np.testing.assert_array_equal(t, g)

    xp_out = _outputs(op, inputs, attrs, wanted)
    xp_kernels[op](_ctx(), inputs, xp_out, _attrs(op, **attrs))
    reference = _onnx_reference(op, inputs, attrs, wanted)
    tol = _tol(inputs[0].dtype)
    for g, x, r in zip(got, xp_out, reference):
        if g is None:
            continue
        np.testing.assert_allclose(g, r, **tol)
        np.testing.assert_allclose(g, x, **tol)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_strided_y_output(op):
    """A Y that is a strided view is written through scratch and still holds the result."""
    inputs, attrs, _ = _config(op, 3)
    shapes = _output_shapes(op, inputs, attrs)
    big = np.full((2,) + shapes[0], -7, inputs[0].dtype)
    strided = big[1, ..., ::-1]  # reversed hidden axis: not C-contiguous
    assert _compiled(op, inputs, [strided], attrs)
    want = [np.empty(shapes[0], inputs[0].dtype)]
    xp_kernels[op](_ctx(), inputs, want, _attrs(op, **attrs))
    np.testing.assert_allclose(strided, want[0], **_tol(inputs[0].dtype))
    assert np.all(big[0] == -7)


def _fallback_cases():
    cases = []
    for op in ("LSTM", "GRU"):
        defaults = ["Sigmoid", "Tanh", "Tanh"] if op == "LSTM" else ["Sigmoid", "Tanh"]
        cases += [(op, "clip", {"clip": 0.5}, None),
                  (op, "activation", {"activations": ["HardSigmoid"] + defaults[1:]}, None),
                  (op, "uneven_lens", {}, "uneven")]
    cases.append(("LSTM", "input_forget", {"input_forget": 1}, None))
    return cases


@pytest.mark.parametrize("op,name,extra,lens", _fallback_cases(),
                         ids=[f"{c[0]}-{c[1]}" for c in _fallback_cases()])
def test_fallback_is_the_xp_kernel(op, name, extra, lens):
    inputs, attrs, wanted = _config(op, 5)
    attrs = {**attrs, **extra}
    if "activations" in extra:
        attrs["activations"] = extra["activations"] * DIRS[attrs["direction"]]
    if lens == "uneven":
        steps, batch = inputs[0].shape[:2] if attrs["layout"] == 0 else inputs[0].shape[1::-1]
        inputs[4] = np.arange(batch, dtype=np.int32) % (steps + 1)
        inputs[4][0] = max(steps - 1, 0)
    full = [True] * len(wanted)
    assert not _compiled(op, inputs, _outputs(op, inputs, attrs, full), attrs)
    got = _outputs(op, inputs, attrs, full)
    jit.kernels[op](_ctx(), inputs, got, _attrs(op, **attrs))
    want = _outputs(op, inputs, attrs, full)
    xp_kernels[op](_ctx(), inputs, want, _attrs(op, **attrs))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_large_steps_are_the_xp_kernel(op):
    """Past MAX_STEP_ELEMENTS (batch * hidden; float64 has a limit) the xp kernel runs,
    unchanged."""
    from backends.numpy.jit.recurrent import MAX_STEP_ELEMENTS

    rng = np.random.default_rng(1)
    steps, batch, size = 3, 4, 5
    hidden = MAX_STEP_ELEMENTS[np.dtype(np.float64)] // batch + 1
    g = GATES[op]
    inputs = [rng.standard_normal(s)
              for s in ((steps, batch, size), (1, g * hidden, size), (1, g * hidden, hidden))]
    attrs = {"hidden_size": hidden, "direction": "forward", "layout": 0}
    full = [True] * (1 + STATES[op])
    assert not _compiled(op, inputs, _outputs(op, inputs, attrs, full), attrs)
    got, want = _outputs(op, inputs, attrs, full), _outputs(op, inputs, attrs, full)
    jit.kernels[op](_ctx(), inputs, got, _attrs(op, **attrs))
    xp_kernels[op](_ctx(), inputs, want, _attrs(op, **attrs))
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)


def _sized_config(op: str, seed: int, steps: int, batch: int, size: int, hidden: int):
    """A float32 configuration of the given sizes, otherwise as random as ``_config``'s."""
    inputs, attrs, wanted = _config(op, 2 * seed)  # even seeds: float32
    rng = np.random.default_rng(seed)
    d, g, layout = DIRS[attrs["direction"]], GATES[op], attrs["layout"]

    def rand(*shape):
        return rng.uniform(-1.5, 1.5, shape).astype(np.float32)

    x = rand(steps, batch, size) if layout == 0 else rand(batch, steps, size)
    state = (d, batch, hidden) if layout == 0 else (batch, d, hidden)
    sized = [x, rand(d, g * hidden, size) * 0.3, rand(d, g * hidden, hidden) * 0.3,
             None if inputs[3] is None else rand(d, 2 * g * hidden),
             None if inputs[4] is None else np.full(batch, steps, np.int32)]
    sized += [None if a is None else rand(*state) for a in inputs[5:5 + STATES[op]]]
    if op == "LSTM":
        sized.append(None if inputs[-1] is None else rand(d, 3 * hidden))
    return sized, {**attrs, "hidden_size": hidden}, wanted


# (steps, batch, input, hidden): the exported models' sizes (T * B >= 32 rows and at most 64
# inputs: the projection by NumPy's BLAS), batches that leave a partial 4-row block in the
# step product, hidden sizes whose gate count leaves partial 4- and 8-column blocks, and one
# input wide enough for the compiled projection
SIZES = [(16, 1, 32, 64), (16, 8, 64, 64), (5, 7, 12, 9), (3, 6, 70, 5), (11, 5, 3, 17),
         (2, 1, 130, 13)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sizes", SIZES, ids=["x".join(map(str, s)) for s in SIZES])
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_model_sizes_against_reference(op, sizes, seed):
    """Larger float32 steps than the random configurations: the BLAS projection, partial row
    and column blocks of the step product, and the float32 tanh over many steps, against
    onnx.reference (and the xp kernel)."""
    from backends.numpy.jit import recurrent

    inputs, attrs, wanted = _sized_config(op, seed, *sizes)
    state = recurrent.kernels[op].compiled_prepare(
        array_types(inputs), array_types(_outputs(op, inputs, attrs, wanted)), _attrs(op, **attrs))
    steps, batch, size, _ = sizes
    assert state.blas == (steps * batch >= recurrent.PROJECTION_BLAS_ROWS
                          and size <= recurrent.PROJECTION_BLAS_INNER)
    got = _outputs(op, inputs, attrs, wanted)
    assert _compiled(op, inputs, got, attrs)
    xp_out = _outputs(op, inputs, attrs, wanted)
    xp_kernels[op](_ctx(), inputs, xp_out, _attrs(op, **attrs))
    for g, x, r in zip(got, xp_out, _onnx_reference(op, inputs, attrs, wanted)):
        if g is not None:
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=2e-6)
            np.testing.assert_allclose(g, x, rtol=1e-4, atol=2e-6)


def test_float32_tanh_error():
    """The loops' float32 tanh is within 4e-7 of the exact value everywhere (absolute and
    relative), odd, saturates to +-1 and keeps NaN."""
    import numba

    from backends.numpy.jit.recurrent_math import tanh

    @numba.njit
    def tanh_all(a, out):
        for k in range(a.shape[0]):
            out[k] = tanh(a[k])

    x = np.concatenate([np.linspace(-12, 12, 200_001, dtype=np.float32),
                        np.geomspace(1e-30, 10, 20_001).astype(np.float32),
                        np.array([88.0, 1e30, np.inf, 0.0, -0.0], np.float32)])
    x = np.concatenate([x, -x])
    got = np.empty_like(x)
    tanh_all(x, got)
    exact = np.tanh(x.astype(np.float64))
    assert got.dtype == np.float32
    assert np.max(np.abs(got - exact)) < 4e-7
    assert np.max(np.abs(got - exact) / np.maximum(np.abs(exact), 1e-37)) < 4e-7
    assert np.all(np.abs(got) <= 1)
    np.testing.assert_array_equal(got[x.size // 2:], -got[:x.size // 2])
    out = np.empty(1, np.float32)
    tanh_all(np.array([np.nan], np.float32), out)
    assert np.isnan(out[0])
