"""The shared kernels stay clean over the array namespace, so CuPy can run them.

Every op-table case (``tests/ops/cases_*.py``) runs through ``strict_xp.StrictBackend``: the
CUDA backend's kernel table (shared kernels + ``backends/cupy/overrides``) over a NumPy
namespace that refuses what CuPy lacks (see ``strict_xp``). Each case must either

- run clean, with outputs identical to the NumPy backend's; or
- be refused only for element types listed in ``overrides.UNSUPPORTED_DTYPES``; or
- belong to an op in ``overrides.REFUSED`` (and then fail).

Stale entries fail too: every ``OVERRIDDEN`` or ``REFUSED`` op's shared kernel must still fail
the strict namespace in at least one case, and every unsupported dtype must be met.
"""
from __future__ import annotations

import numpy as np
import pytest

import portable.random
from backends.cupy.overrides import OVERRIDDEN, REFUSED, UNSUPPORTED_DTYPES
from portable import device as device_registry
from portable.device import Device
from tests.backends import strict_xp
from tests.ops.harness import assert_output_matches, run_ours
from tests.ops.test_op_table import CASES


@pytest.fixture(scope="module")
def strict_devices():
    """("cuda table", "shared table") devices over the strict namespace, registered for this
    module only."""
    device_registry.BACKEND_MODULES["strict"] = ("tests.backends.strict_xp", "")
    try:
        yield Device("strict", 0), Device("strict", 1)
    finally:
        for index in (0, 1):
            device_registry._backends.pop(Device("strict", index), None)
        del device_registry.BACKEND_MODULES["strict"]


def run_strict(case, device):
    """(outputs or None, the exception or None, the refusals recorded)."""
    strict_xp.RECORDER.reset()
    portable.random.seed(0)
    try:
        outs, error = run_ours(case, device=device), None
    except Exception as exc:  # judged by the caller
        outs, error = None, exc
    return outs, error, [str(v) for v in strict_xp.RECORDER.violations]


def run_numpy(case):
    portable.random.seed(0)
    return run_ours(case)


def dtype_refusals(violations):
    """The dtypes named when every refusal is one of an element type, else None."""
    names = set()
    for text in violations:
        if not text.startswith("dtype "):
            return None
        names.add(text.split()[1])
    return names


def string_plan_refused(error):
    return error is not None and "string tensor" in str(error)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_runs_clean_over_the_strict_namespace(case, strict_devices):
    cuda_table, _ = strict_devices
    outs, error, violations = run_strict(case, cuda_table)
    if case.op in REFUSED:
        assert error is not None, f"{case.id}: REFUSED on CUDA ({REFUSED[case.op]}) but it ran"
        return
    refused = dtype_refusals(violations)
    if string_plan_refused(error) and not violations:
        refused = {"string"}
    if refused:
        assert refused <= set(UNSUPPORTED_DTYPES), \
            f"{case.id}: refused for {sorted(refused)}, not in overrides.UNSUPPORTED_DTYPES"
        return
    assert not violations, (f"{case.id}: the kernel uses NumPy-only features; write it over "
                            f"ctx.xp, or list {case.op} in backends/cupy/overrides.py: "
                            + "; ".join(dict.fromkeys(violations)))
    assert error is None, f"{case.id}: failed over the strict namespace: {error!r}"
    want = run_numpy(case)
    assert len(outs) == len(want)
    for j, (g, w) in enumerate(zip(outs, want)):
        # (the case's tolerances: a kernel may take another BLAS path on other strides)
        assert_output_matches(g, w, case, j)


def test_listed_ops_still_need_their_entry(strict_devices):
    """An op is OVERRIDDEN or REFUSED only while its shared kernel fails the strict namespace
    in some case (every case runs again here, over the shared table alone)."""
    _, shared_table = strict_devices
    listed = set(OVERRIDDEN) | set(REFUSED)
    unknown = listed - {c.op for c in CASES}
    assert not unknown, f"listed in overrides.py but no op-table case: {sorted(unknown)}"
    failing = set()
    dtypes_met = set()
    for case in CASES:
        outs, error, violations = run_strict(case, shared_table)
        if violations or error is not None:
            failing.add(case.op)
        dtypes_met |= dtype_refusals(violations) or set()
        if string_plan_refused(error):
            dtypes_met.add("string")
    stale = sorted(listed - failing)
    assert not stale, f"the shared kernels of {stale} run clean now: drop them from overrides.py"
    # (the dtype list is derived from portable.dtypes.LOW_PRECISION plus strings, not written
    # by hand: some of its types have no op-table case, so only its use is checked)
    assert "string" in dtypes_met and len(dtypes_met) > 1, dtypes_met
    assert dtypes_met <= set(UNSUPPORTED_DTYPES)


# -- the strict namespace itself refuses what it must ------------------------------------------
@pytest.fixture
def xp():
    strict_xp.RECORDER.reset()
    return strict_xp.StrictNamespace()


@pytest.mark.parametrize("use, feature", [
    (lambda xp, a: np.add.at(a, [0], 1), "np.add.at"),
    (lambda xp, a: xp.multiply.at(a, [0], 2), "xp.multiply.at"),
    (lambda xp, a: np.exp(a), "np.exp"),
    (lambda xp, a: np.sum(a), "np.sum"),
    (lambda xp, a: np.asarray(a), "implicit conversion"),
    (lambda xp, a: xp.errstate(all="ignore"), "xp.errstate"),
    (lambda xp, a: xp.insert(a, 0, 1), "xp.insert"),
    (lambda xp, a: xp.empty(3, dtype=object), "dtype string"),
    (lambda xp, a: a.astype(str), "dtype string"),
    (lambda xp, a: a.tolist(), ".tolist()"),
    (lambda xp, a: a.item(0), ".item()"),
    (lambda xp, a: [v for v in a], "iterating"),
    (lambda xp, a: a + np.ones(100), "host numpy array"),
    (lambda xp, a: xp.matmul(np.ones((100, 100)), a.reshape(100, 1)), "host numpy array"),
    (lambda xp, a: xp.lib.npyio, "xp.lib.npyio"),
    (lambda xp, a: a.resize(10), "ndarray.resize"),
])
def test_the_namespace_refuses_numpy_only_features(xp, use, feature):
    a = xp.arange(100, dtype=np.float32)
    # (NumPy swallows some refusals: np.asarray falls back to the sequence protocol when
    # __array__ raises; the record is what counts)
    try:
        use(xp, a)
    except strict_xp.NumpyOnlyFeature:
        pass
    assert any(feature in str(v) for v in strict_xp.RECORDER.violations), \
        strict_xp.RECORDER.violations


def test_the_namespace_allows_what_cupy_has(xp):
    a = xp.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.float32(2) * a + 1                     # a NumPy scalar on the left, as CuPy allows
    xp.add.at(b, (xp.asarray(np.array([0, 0])), 0), 1.0)  # add.at exists in CuPy
    view = xp.lib.stride_tricks.as_strided(a, shape=(2, 2), strides=a.strides)
    small = xp.asarray(np.array([3, 1])).tolist()
    assert np.asarray(strict_xp.unwrap(b, "test")).tolist() == [[3, 3, 5], [7, 9, 11]]
    assert strict_xp.unwrap(view, "test").shape == (2, 2) and small == [3, 1]
    assert float(xp.sum(a)) == 15.0 and not strict_xp.RECORDER.violations


def test_a_caught_refusal_is_still_recorded(xp):
    """A kernel that swallows the exception and falls back is seen all the same."""
    a = xp.ones(100)
    try:
        np.exp(a)
    except TypeError:
        pass
    assert strict_xp.RECORDER.violations


def test_snapshots_match_the_installed_cupy():
    """NUMPY_ONLY and friends were taken from CuPy 14.2; check them against the CuPy here."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install "
                                              "'portable[cuda]'); the snapshots stand")
    missing = {n for n in dir(np) if not n.startswith("_") and not hasattr(cupy, n)}
    assert strict_xp.NUMPY_ONLY <= missing | {n for n in strict_xp.NUMPY_ONLY
                                              if not hasattr(np, n)}, \
        f"CuPy has these now: {sorted(strict_xp.NUMPY_ONLY - missing)}"
    newly = sorted(missing - strict_xp.NUMPY_ONLY)
    assert not newly, f"numpy names CuPy lacks, not in strict_xp.NUMPY_ONLY: {newly}"
    for path, names in strict_xp.SUBMODULES.items():
        np_mod, cp_mod = np, cupy
        for part in path.split("."):
            np_mod, cp_mod = getattr(np_mod, part), getattr(cp_mod, part)
        lacking = {n for n in dir(np_mod) if not n.startswith("_") and not hasattr(cp_mod, n)}
        assert lacking == set(names), f"xp.{path}: {sorted(lacking ^ set(names))}"
