"""MXNet 1.x calls whose answers portable must give unchanged: each case is a snippet run with
``mx`` bound to the real MXNet (by ``record_mxnet.py``, in its own virtual environment) or to
portable (by the tests), setting ``out``. The recorded answers are the fixture the tests read;
neither side's code is written twice.

``out`` is what ``answers.describe`` records: an array, a Symbol (its arguments and the output
shapes and dtypes inferred for ``x`` of shape (2, 3), float32), a list or dict of them, or a
plain value. More sets live in ``cases_<area>.py`` files beside this one.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

SETUP = ("a = mx.nd.array([[1, 5, 3], [4, 2, 6]])\n"
         "i = mx.nd.array([[1, 5, 3]], dtype='int32')\n"
         "s = mx.sym.var('x', shape=(2, 3))\n")

# The answers that used to differ silently (no error, another value, dtype or shape).
SILENT = {
    # comparisons give 0/1 in the inputs' dtype, not bool
    "equal": "out = a == a",
    "greater_scalar": "out = a > 2",
    "less_scalar_left": "out = 2 < a",
    "not_equal": "out = a != 5",
    "greater_equal": "out = a >= 4",
    "less_equal": "out = a <= 4",
    "equal_int32": "out = i == 1",
    "accuracy_by_comparison": ("pred = mx.nd.array([1, 2, 3]); label = mx.nd.array([1, 0, 3])\n"
                               "out = (pred == label).mean()"),
    # argmax/argmin: the flattened index without an axis; float32, the axis dropped
    "argmax_flat": "out = a.argmax()",
    "argmin_flat": "out = a.argmin()",
    "argmax_axis1": "out = mx.nd.argmax(a, axis=1)",
    "argmax_axis0_method": "out = a.argmax(axis=0)",
    "argmax_keepdims": "out = mx.nd.argmax(a, axis=1, keepdims=True)",
    # split by num_outputs: a list of that many arrays
    "split_three": "out = mx.nd.split(a, num_outputs=3, axis=1)",
    "split_squeeze": "out = mx.nd.split(a, num_outputs=2, axis=0, squeeze_axis=True)",
    "split_one": "out = mx.nd.split(a, num_outputs=1, axis=1)",
    # reductions to one value and full indexing keep one axis: shape (1,)
    "index_scalar": "out = a[1, 2]",
    "index_row": "out = a[1]",
    "sum_all": "out = a.sum()",
    "mean_all": "out = a.mean()",
    "max_all": "out = a.max()",
    "norm": "out = a.norm()",
    "sum_axis": "out = a.sum(axis=1)",
    # NumPy data become float32 unless dtype= says otherwise
    "array_from_float64": "import numpy as np\nout = mx.nd.array(np.array([1.5, 2.5]))",
    "array_from_int64": "import numpy as np\nout = mx.nd.array(np.array([1, 2]))",
    "array_from_list": "out = mx.nd.array([1, 2])",
    "array_dtype_kept": "import numpy as np\nout = mx.nd.array(np.array([1.5]), dtype=np.float64)",
    "array_from_ndarray": "out = mx.nd.array(mx.nd.array([1], dtype='float16'))",
    # symbol functions take their input as data= (no new free input is made)
    "sym_relu_data": "out = mx.sym.relu(data=s)",
    "sym_softmax_data": "out = mx.sym.softmax(data=s)",
    "sym_cast_data": "out = mx.sym.cast(data=s, dtype='float16')",
    "sym_reshape_data": "out = mx.sym.reshape(data=s, shape=(3, -1))",
}

# MXNet's keyword names and defaults where the ONNX op's differ (these raised an error).
KEYWORDS = {
    "concat_default_dim": "out = mx.nd.concat(a, a)",
    "concat_dim": "out = mx.nd.concat(a, a, dim=0)",
    "transpose_axes": "out = mx.nd.transpose(a, axes=(1, 0))",
    "clip_a_min_a_max": "out = mx.nd.clip(a, a_min=2, a_max=5)",
    "tile_reps": "out = mx.nd.tile(a, reps=(2, 1))",
    "slice_begin_end": "out = mx.nd.slice(a, begin=(0, 1), end=(2, 3))",
    "relu_data": "out = mx.nd.relu(data=a - 3)",
    "cast_dtype": "out = mx.nd.cast(a, dtype='int32')",
    "sym_concat_dim": "out = mx.sym.concat(s, s, dim=0)",
    "sym_transpose_axes": "out = mx.sym.transpose(s, axes=(1, 0))",
    "sym_clip": "out = mx.sym.clip(s, a_min=0, a_max=1)",
}

# MXNet functions with no ONNX op of their own (these were missing).
FUNCTIONS = {
    "expand_dims": "out = mx.nd.expand_dims(a, axis=1)",
    "expand_dims_method": "out = a.expand_dims(axis=0)",
    "take_rows": "out = mx.nd.take(a, mx.nd.array([1, 0, 1]))",
    "take_clipped": "out = mx.nd.take(a, mx.nd.array([5, -2]), axis=1)",
    "take_wrap": "out = mx.nd.take(a, mx.nd.array([4]), axis=1, mode='wrap')",
    "pick": "out = mx.nd.pick(a, mx.nd.array([1, 2]), axis=1)",
    "pick_keepdims": "out = mx.nd.pick(a, mx.nd.array([0, 1, 0]), axis=0, keepdims=True)",
    "slice_axis": "out = mx.nd.slice_axis(a, axis=1, begin=0, end=2)",
    "slice_axis_none": "out = a.slice_axis(axis=1, begin=1, end=None)",
    "broadcast_to": "out = mx.nd.broadcast_to(mx.nd.array([[1, 2, 3]]), shape=(2, 3))",
    "broadcast_to_zero": "out = mx.nd.broadcast_to(mx.nd.array([[1], [2]]), shape=(0, 4))",
    "one_hot": "out = mx.nd.one_hot(mx.nd.array([0, 2]), 3)",
    "one_hot_values": "out = mx.nd.one_hot(mx.nd.array([1]), 4, on_value=5, off_value=-1)",
    "batch_dot": ("import numpy as np\n"
                  "x = mx.nd.array(np.arange(12).reshape(2, 2, 3))\n"
                  "y = mx.nd.array(np.arange(12).reshape(2, 3, 2))\n"
                  "out = mx.nd.batch_dot(x, y)"),
    "batch_dot_transpose_b": ("import numpy as np\n"
                              "x = mx.nd.array(np.arange(12).reshape(2, 2, 3))\n"
                              "out = mx.nd.batch_dot(x, x, transpose_b=True)"),
    "topk_indices": "out = mx.nd.topk(a, k=2)",
    "topk_value": "out = mx.nd.topk(a, k=1, axis=0, ret_typ='value')",
    "topk_both_ascend": "out = mx.nd.topk(a, k=2, ret_typ='both', is_ascend=True)",
    "topk_mask": "out = mx.nd.topk(a, k=2, ret_typ='mask')",
    "activation_relu": "out = mx.nd.Activation(a - 3, act_type='relu')",
    "activation_softrelu": "out = mx.nd.Activation(a - 3, act_type='softrelu')",
    "activation_softsign": "out = mx.nd.Activation(a - 3, act_type='softsign')",
}

# fixture name -> its cases; each set runs after SETUPS[its name]
SETS = {"silent_differences": SILENT, "keywords": KEYWORDS, "functions": FUNCTIONS}
SETUPS = dict.fromkeys(SETS, SETUP)


def _gather_case_modules() -> None:
    """Add the sets of every ``cases_<area>.py`` beside this file: each defines ``SETS`` (and
    ``SETUP`` if its cases need another one than the shared one above)."""
    for path in sorted(Path(__file__).parent.glob("cases_*.py")):
        spec = importlib.util.spec_from_file_location(f"mxnet_fidelity_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, cases in module.SETS.items():
            if name in SETS:
                raise ValueError(f"{path.name}: the case set {name!r} is defined twice")
            SETS[name] = cases
            SETUPS[name] = getattr(module, "SETUP", SETUP)


_gather_case_modules()
