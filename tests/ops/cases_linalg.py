"""Op-table cases: linear algebra."""
from tests.ops.harness import Case, rand

CASES = [
    Case("MatMul", [rand(3, 4), rand(4, 5, seed=1)]),
    Case("MatMul", [rand(2, 1, 3, 4), rand(3, 4, 2, seed=1)], name="batched"),
    Case("MatMul", [rand(4), rand(4, 5, seed=1)], name="vec_mat"),
    Case("MatMul", [rand(3, 4), rand(4, seed=1)], name="mat_vec"),
    Case("MatMul", [rand(4), rand(4, seed=1)], name="dot"),
    Case("Gemm", [rand(3, 4), rand(4, 5, seed=1), rand(5, seed=2)]),
    Case("Gemm", [rand(4, 3), rand(5, 4, seed=1), rand(3, 5, seed=2)],
         attrs={"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, name="trans"),
    Case("Gemm", [rand(3, 4), rand(5, 4, seed=1)], attrs={"transB": 1}, name="noC"),
]
