"""The storage formats on OpenCL (bfloat16, float8, float4, the 4- and 2-bit integers) against
ml_dtypes and the NumPy backend's ONNX Cast (``portable.ops.quantize.convert``).

Loads: every code of each 8-bit type (all 256 bytes; the 16 or 4 of the narrow ones, all 65,536
bfloat16 patterns) converted to float32 (int32), bit for bit. Stores: the value of every code,
the midpoints between neighbouring codes and the floats just either side of them (where
rounding turns), values beyond the largest finite one, inf, NaN, zeros of both signs and a
random sample of float32 bit patterns, converted with and without ``saturate`` (and every
float8e8m0 ``round_mode``), bit for bit against the reference.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (NaN, inf: casts warn)

ml_dtypes = pytest.importorskip("ml_dtypes")

from portable.ops.quantize import convert as reference_convert  # noqa: E402

FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
          "float8_e8m0fnu", "float4_e2m1fn")
INTEGERS = ("int4", "uint4", "int2", "uint2")
_CODES = {"float4_e2m1fn": 16, "int4": 16, "uint4": 16, "int2": 4, "uint2": 4}


def _bits(a):
    return a.view(f"uint{8 * a.dtype.itemsize}")


def _all_codes(name):
    dtype = np.dtype(getattr(ml_dtypes, name))
    count = 65536 if dtype.itemsize == 2 else _CODES.get(name, 256)
    return np.arange(count, dtype=_bits(np.zeros(0, dtype)).dtype).view(dtype)


def _convert(backend, host, dtype, saturate=1, round_mode="up"):
    from backends.opencl.allocator import empty, from_numpy, to_numpy
    from backends.opencl.convert import convert

    runtime = backend.runtime
    x = from_numpy(runtime, host)
    y = empty(runtime, host.shape, dtype)
    convert(x, y, saturate, round_mode)
    return to_numpy(y)


def _edges(name):
    """float32 values where a store into ``name`` turns: each code's value, the midpoints
    between neighbours and their float32 neighbours, overflow, specials; and a sample."""
    values = _all_codes(name).astype(np.float32)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[1:].astype(np.float64) + finite[:-1]) / 2
    near = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    big = np.float64(finite.max()) * np.array([1.01, 1.1, 1.2, 1.3, 1.5, 2.0, 1e3])
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38]
    sample = np.random.default_rng(0).integers(0, 2**32, 20000, dtype=np.uint64)
    return np.concatenate([values, near.astype(np.float32), big.astype(np.float32),
                           -big.astype(np.float32), np.float32(special),
                           sample.astype(np.uint32).view(np.float32)]).astype(np.float32)


@pytest.mark.parametrize("name", FLOATS + INTEGERS)
def test_load_every_code(backend, name):
    codes = _all_codes(name)
    wide = np.float32 if name in FLOATS else np.int32
    got = _convert(backend, codes, wide)
    want = codes.astype(wide)
    if name in FLOATS:  # NaN payloads aside, bit for bit (the signs of zeros too)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), name
        assert np.array_equal(_bits(got)[~nan], _bits(want)[~nan]), name
    else:
        assert np.array_equal(got, want), name


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("saturate", [1, 0])
def test_store_from_float32(backend, name, saturate):
    source = _edges(name)
    dtype = np.dtype(getattr(ml_dtypes, name))
    modes = ("up", "down", "nearest") if name == "float8_e8m0fnu" else ("up",)
    for mode in modes:
        got = _convert(backend, source, dtype, saturate, mode)
        want = reference_convert(np, source, dtype, saturate, mode)
        wrong = np.flatnonzero(_bits(got) != _bits(want))
        assert wrong.size == 0, (f"{name} saturate={saturate} {mode}: {source[wrong[:5]]} -> "
                                 f"{_bits(got)[wrong[:5]]}, expected {_bits(want)[wrong[:5]]}")


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_store_from_float64_rounds_once(backend, fp64, name):
    # values between two float32s next to a rounding midpoint of the narrow type: a double ->
    # float -> narrow conversion would round twice, the device rounds to odd first
    dtype = np.dtype(getattr(ml_dtypes, name))
    finite = np.unique(_all_codes(name).astype(np.float64))
    finite = finite[np.isfinite(finite)]
    mids = (finite[1:] + finite[:-1]) / 2
    source = np.concatenate([mids * (1 + 2.0**-30), mids * (1 - 2.0**-30), mids])
    got = _convert(backend, source, dtype, saturate=0)
    want = source.astype(dtype)
    assert np.array_equal(_bits(got), _bits(want)), name


@pytest.mark.parametrize("name", INTEGERS)
def test_integer_stores(backend, name):
    dtype = np.dtype(getattr(ml_dtypes, name))
    ints = np.concatenate([np.arange(-300, 300), [2**31 - 1, -2**31]]).astype(np.int64)
    floats = np.concatenate([np.arange(-40, 40, 0.25), [np.inf, -np.inf, np.nan, 1e30]])
    for source in (ints, ints.astype(np.int32), floats.astype(np.float32), floats):
        got = _convert(backend, source, dtype)
        assert np.array_equal(_bits(got), _bits(source.astype(dtype))), (name, source.dtype)


@pytest.mark.parametrize("name", FLOATS + INTEGERS)
def test_between_formats(backend, name):
    # every code of one storage format into every other, as the NumPy backend's Cast does
    # (through float32 for the floats: its own float8 -> float8 clip would clip in the
    # source type, which cannot hold the other type's largest value)
    codes = _all_codes(name)
    wide = codes.astype(np.float32 if name in FLOATS else np.int32)
    for other in FLOATS + INTEGERS:
        dtype = np.dtype(getattr(ml_dtypes, other))
        if other == name:
            continue
        got = _convert(backend, codes, dtype)
        want = reference_convert(np, wide, dtype, 1, "up")
        assert np.array_equal(_bits(got), _bits(want)), (name, other)


def test_same_type_copy_keeps_bits(backend):
    codes = _all_codes("bfloat16")
    assert np.array_equal(_bits(_convert(backend, codes, codes.dtype)), _bits(codes))


def test_arithmetic_on_bfloat16_rounds_like_numpy(device):
    # (one op: computed in float32 and rounded once, as ml_dtypes' ufuncs do)
    import portable as pt

    rng = np.random.default_rng(3)
    a = rng.standard_normal(1000).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal(1000).astype(ml_dtypes.bfloat16)
    x, y = (pt.nd.array(v, device=device, dtype=v.dtype) for v in (a, b))
    for got, want in (((x * y).asnumpy(), a * b), (pt.nd.exp(x).asnumpy(), np.exp(a))):
        assert got.dtype == want.dtype
        assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("which", ["float8_qdq", "bfloat16_weights", "int4_weight_only"])
def test_low_precision_models_match_the_cpu(device, which):
    # the models of tests/exporters/test_low_precision_models.py (onnxruntime checks the CPU
    # there): on OpenCL their float8 activations, bfloat16 outputs and int4 weights live on
    # the device, and every output agrees with the CPU's to the rounding of its sums (the
    # device's GEMM and the CPU's BLAS add in different orders, and BLAS's order depends on
    # the kernel it picks for the CPU: OPENBLAS_CORETYPE), so within one unit in the last
    # place of the output type
    from exporters.onnx import backend
    from tests.exporters import test_low_precision_models as models

    model, x = {"float8_qdq": models._float8_qdq_model,
                "bfloat16_weights": lambda: models._bfloat16_model(True),
                "int4_weight_only": lambda: models._int4_weight_only_model(False)}[which]()
    want = backend.prepare(model, device="cpu").run({"x": x})
    got = backend.prepare(model, device="opencl").run({"x": x})
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, which
        ulp = float(ml_dtypes.finfo(w.dtype).eps)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=2 * ulp,
                                   atol=2 * ulp * float(np.abs(w.astype(np.float64)).max()),
                                   err_msg=which)
