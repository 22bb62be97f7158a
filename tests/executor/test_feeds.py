"""check_feeds: how every front end takes inputs (one array, a list, a dict), checked against
the declared types."""
import numpy as np
import pytest

from portable.errors import BindError
from portable.executor.feeds import check_feeds
from portable.ir.graph import TensorType

TYPES = {"x": TensorType((None, 3), "float32"), "r": TensorType((), "float32")}


def test_scalars_stay_scalars_and_forms_agree():
    x, r = np.ones((2, 3), np.float32), np.float32(0.5)
    for given in ([x, r], {"r": r, "x": x}):
        feeds = check_feeds(given, TYPES)
        assert list(feeds) == ["x", "r"]
        assert feeds["r"].shape == () and feeds["x"].shape == (2, 3)
    assert check_feeds(x, {"x": TYPES["x"]})["x"].shape == (2, 3)


@pytest.mark.parametrize("given,match", [
    ({"x": np.ones((2, 4), np.float32), "r": np.float32(1)}, "'x' has shape"),
    ({"x": np.ones((2, 3), np.float64), "r": np.float32(1)}, "'x' has dtype"),
    ({"x": np.ones((2, 3), np.float32)}, "'r' was not given"),
    ({"x": np.ones((2, 3), np.float32), "r": np.float32(1), "z": 1}, "unknown input"),
    ([np.ones((2, 3), np.float32)], "got 1 inputs"),
])
def test_bad_feeds_name_the_input(given, match):
    with pytest.raises(BindError, match=match):
        check_feeds(given, TYPES)


def test_cast_converts_float_precision_only():
    feeds = check_feeds({"x": np.ones((1, 3)), "r": 0.5}, TYPES, cast=True)
    assert feeds["x"].dtype == np.float32 and feeds["r"].dtype == np.float32
    with pytest.raises(BindError, match="dtype"):
        check_feeds({"x": np.ones((1, 3), np.int64), "r": 0.5}, TYPES, cast=True)
