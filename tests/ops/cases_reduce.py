"""Op-table cases: reductions."""
import numpy as np

from tests.ops.harness import Case, rand


def i64(*values):
    return np.array(values, np.int64)


def _reduce_cases(op, **kw):
    """The configurations every Reduce* op shares: axes (negative too), keepdims, all axes,
    empty axes with and without noop_with_empty_axes, an int input."""
    return [
        Case(op, [rand(2, 3, 4), i64(1)], const=(1,), **kw),
        Case(op, [rand(2, 3, 4), i64(0, -1)], const=(1,), attrs={"keepdims": 0},
             name="nokeep", **kw),
        Case(op, [rand(2, 3)], name="all", **kw),
        Case(op, [rand(2, 3), i64()], const=(1,), attrs={"keepdims": 0}, name="empty_axes",
             **kw),
        Case(op, [rand(2, 3), i64()], const=(1,), attrs={"noop_with_empty_axes": 1},
             name="noop", **kw),
        Case(op, [np.arange(24, dtype=np.int64).reshape(2, 3, 4) % 7 - 3, i64(-2)], const=(1,),
             name="int", grad=False),
    ]


# Ties along axis 1: the extremum's gradient is shared between them.
TIES = np.array([[1.0, 3.0, 3.0], [2.0, -1.0, -1.0]], np.float32)


def _arg_cases(op):
    return [
        Case(op, [rand(3, 4)]),
        Case(op, [rand(2, 3, 4)], attrs={"axis": -1, "keepdims": 0}, name="nokeep"),
        Case(op, [TIES], attrs={"axis": 1}, name="first"),
        Case(op, [TIES], attrs={"axis": 1, "select_last_index": 1}, name="last"),
        Case(op, [TIES.astype(np.int32)], attrs={"axis": 1, "keepdims": 0,
                                                  "select_last_index": 1}, name="int"),
    ]


CASES = [
    *_reduce_cases("ReduceSum"),
    *_reduce_cases("ReduceMean"),
    *_reduce_cases("ReduceMax"),
    *_reduce_cases("ReduceMin"),
    Case("ReduceMax", [TIES, i64(1)], const=(1,), grad=False, name="ties"),
    Case("ReduceMax", [np.zeros((2, 0), np.float32), i64(1)], const=(1,), grad=False,
         name="empty"),
    Case("ReduceMin", [np.zeros((0, 3), np.int32), i64(0)], const=(1,),
         attrs={"keepdims": 0}, grad=False, name="empty"),
    *_arg_cases("ArgMax"),
    *_arg_cases("ArgMin"),
]
