"""Op-table cases: reductions."""
import numpy as np

from tests.ops.harness import Case, rand
from tests.ops.harness import rand as harness_rand


def i64(*values):
    return np.array(values, np.int64)


def _reduce_cases(op, ints=True, positive=False, **kw):
    """The configurations every Reduce* op shares: axes (negative too), keepdims, all axes,
    empty axes with and without noop_with_empty_axes, an int input (unless float-only);
    ``positive``: inputs in (0.5, 1.5) (a log of the sum)."""
    if positive:
        def rand(*shape, seed=0):
            return harness_rand(*shape, seed=seed, low=0.5, high=1.5)
    else:
        rand = harness_rand
    cases = [
        Case(op, [rand(2, 3, 4), i64(1)], const=(1,), **kw),
        Case(op, [rand(2, 3, 4), i64(0, -1)], const=(1,), attrs={"keepdims": 0},
             name="nokeep", **kw),
        Case(op, [rand(2, 3)], name="all", **kw),
        Case(op, [rand(2, 3), i64()], const=(1,), attrs={"keepdims": 0}, name="empty_axes",
             **kw),
        Case(op, [rand(2, 3), i64()], const=(1,), attrs={"noop_with_empty_axes": 1},
             name="noop", **kw),
    ]
    if ints:
        cases.append(Case(op, [np.arange(24, dtype=np.int64).reshape(2, 3, 4) % 7 - 3, i64(-2)],
                          const=(1,), name="int", grad=False))
    return cases


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
    *_reduce_cases("ReduceSumSquare"),
    *_reduce_cases("ReduceL1"),
    *_reduce_cases("ReduceProd"),
    *_reduce_cases("ReduceL2", ints=False),
    *_reduce_cases("ReduceLogSumExp", ints=False),
    *_reduce_cases("ReduceLogSum", ints=False, positive=True),
    # one zero in row 0 (its gradient is the product of the others), two in row 1 (all 0)
    Case("ReduceProd", [np.array([[0.5, 0.0, -2.0, 1.5], [0.0, 3.0, 0.0, 0.7]], np.float32),
                        i64(1)], const=(1,), name="zeros"),
    Case("ReduceLogSumExp", [rand(2, 5) * 60, i64(1)], const=(1,), name="large",
         rtol=1e-5, atol=1e-4),
]


_TIES = np.array([[3, 1, 3, 2, 3], [0, 0, 0, 0, 0], [5, 4, 3, 2, 1]], np.int64)

CASES += [
    Case("TopK", [rand(3, 5), i64(2)], const=(1,), outputs=2),
    Case("TopK", [rand(4, 3), i64(3)], const=(1,), attrs={"axis": 0, "largest": 0},
         outputs=2, name="smallest_axis0"),
    Case("TopK", [rand(2, 6, 3), i64(6)], const=(1,), attrs={"axis": 1}, outputs=2,
         name="middle_axis_all"),
    Case("TopK", [_TIES, i64(3)], const=(1,), outputs=2, grad=False, name="ties_largest"),
    Case("TopK", [_TIES, i64(4)], const=(1,), attrs={"largest": 0}, outputs=2, grad=False,
         name="ties_smallest"),
    Case("TopK", [np.array([-2 ** 31, 5, -1, 7, 2 ** 31 - 1], np.int32), i64(3)], const=(1,),
         outputs=2, grad=False, name="int32_extremes"),
    Case("TopK", [np.array([[200, 3, 255, 0]], np.uint8), i64(2)], const=(1,), outputs=2,
         grad=False, name="uint8"),
    Case("TopK", [rand(3, 4), i64(0)], const=(1,), outputs=2, grad=False, name="k0"),
]

CASES += [
    Case("CumSum", [rand(3, 4), np.array(1, np.int64)], const=(1,)),
    Case("CumSum", [rand(2, 3, 4), np.array(-2, np.int32)], const=(1,),
         attrs={"exclusive": 1}, name="exclusive"),
    Case("CumSum", [rand(2, 3, 4), np.array(0, np.int64)], const=(1,), attrs={"reverse": 1},
         name="reverse"),
    Case("CumSum", [rand(5, 2), np.array(0, np.int64)], const=(1,),
         attrs={"reverse": 1, "exclusive": 1}, name="reverse_exclusive"),
    Case("CumSum", [np.arange(12, dtype=np.int32).reshape(3, 4), np.array(1, np.int64)],
         const=(1,), attrs={"exclusive": 1}, name="int", grad=False),
]

CASES += [
    Case("CumProd", [rand(3, 4, low=0.5, high=1.5), np.array(1, np.int64)], const=(1,)),
    Case("CumProd", [rand(2, 3, 4), np.array(-1, np.int32)], const=(1,),
         attrs={"exclusive": 1, "reverse": 1}, name="exclusive_reverse"),
    Case("CumProd", [np.array([[2, -3, 0, 4], [1, 5, 2, 2]], np.int64), np.array(1, np.int64)],
         const=(1,), attrs={"exclusive": 1}, name="int"),
]
