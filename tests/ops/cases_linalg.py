"""Op-table cases: linear algebra."""
import numpy as np

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


def einsum(equation, *shapes, name, **kwargs):
    inputs = [rand(*shape, seed=k) for k, shape in enumerate(shapes)]
    return Case("Einsum", inputs, attrs={"equation": equation}, name=name, **kwargs)


CASES += [
    einsum("ij,jk->ik", (3, 4), (4, 2), name="matmul"),
    einsum("bij,bjk->bik", (2, 3, 2), (2, 2, 3), name="batched"),
    einsum("ij,jk", (2, 3), (3, 2), name="implicit"),
    einsum("ji", (2, 3), name="implicit_transpose"),
    einsum("ij->", (3, 4), name="sum_all"),
    einsum("ij->j", (3, 4), name="sum_axis"),
    einsum("i,j->ij", (3,), (4,), name="outer"),
    einsum("i,i", (5,), (5,), name="dot"),
    einsum("ij,jk,kl->il", (2, 3), (3, 2), (2, 3), name="three"),
    einsum("ijk,k->", (2, 2, 3), (3,), name="only_own_labels"),
    einsum("...ij,...jk->...ik", (2, 1, 2, 3), (3, 3, 2), name="ellipsis_broadcast"),
    einsum("b...,b->...", (2, 3, 2), (2,), name="ellipsis_middle"),
    einsum("...i,...i", (2, 3), (3,), name="ellipsis_implicit"),
    einsum("...i->i", (2, 3), name="ellipsis_summed"),
    einsum("ij,ij->ij", (3, 1), (1, 4), name="label_broadcast"),
    einsum("ii,j->j", (3, 3), (2,), name="trace_other"),
    einsum("ii->i", (3, 3), name="diagonal"),
    einsum("iij,j->ij", (2, 2, 3), (3,), name="diagonal_mixed"),
    einsum("iii", (2, 2, 2), name="diagonal_rank3"),
    einsum("Ab, bA -> A", (2, 3), (3, 2), name="spaces_upper"),
    Case("Einsum", [np.arange(6, dtype=np.int32).reshape(2, 3),
                    np.arange(3, dtype=np.int32)], attrs={"equation": "ij,j->i"},
         name="int32", grad=False),
]


def _k(value: int) -> np.ndarray:
    return np.array(value, np.int64)


CASES += [
    Case("Trilu", [rand(4, 5)], name="upper"),
    Case("Trilu", [rand(4, 5)], attrs={"upper": 0}, name="lower"),
    Case("Trilu", [rand(2, 3, 4, 5), _k(-1)], const=(1,), name="upper_below_diagonal"),
    Case("Trilu", [rand(3, 5, 4), _k(2)], attrs={"upper": 0}, const=(1,),
         name="lower_above_diagonal"),
    Case("Trilu", [rand(3, 4), _k(-7)], attrs={"upper": 0}, const=(1,), name="k_beyond"),
    Case("Trilu", [np.arange(12, dtype=np.int64).reshape(3, 4), _k(1)], const=(1,),
         name="int", grad=False),
    Case("Trilu", [rand(3, 4), _k(1)], name="k_not_constant"),
]


# -- Det and portable.Inverse: well-conditioned matrices (finite differences stay accurate) ----


def _square(*shape: int, seed: int = 0, pivot: bool = False) -> np.ndarray:
    """Diagonally dominant (so well-conditioned) matrices of ``shape`` (..., M, M); ``pivot``
    reverses their rows, so that elimination without row swaps would meet small pivots."""
    m = shape[-1]
    x = rand(*shape, seed=seed) + np.float32(m) * np.eye(m, dtype=np.float32)
    return np.ascontiguousarray(x[..., ::-1, :]) if pivot else x


def _inv(inputs, attrs):
    return [np.linalg.inv(inputs[0])]


CASES += [
    Case("Det", [_square(3, 3)], name="2d"),
    Case("Det", [_square(2, 3, 4, 4, seed=1)], name="batched", rtol=1e-4),
    Case("Det", [_square(5, 5, seed=2, pivot=True)], name="pivoting", rtol=1e-4),
    Case("Det", [_square(3, 1, 1, seed=3)], name="1x1"),
    Case("Det", [np.array([[0, 1, 0], [0, 0, 2], [3, 0, 0]], np.float32)], name="permutation",
         grad=False),
    Case("Det", [np.array([[1, 2], [2, 4]], np.float64)], name="singular", grad=False),
    Case("Det", [np.zeros((2, 0, 0), np.float32)], name="empty_matrices", grad=False),
    Case("Det", [np.zeros((0, 3, 3), np.float32)], name="empty_stack", grad=False),
    # np.linalg (so onnx.reference) has no float16: compare with the float32 determinant
    Case("Det", [_square(2, 3, 3, seed=4).astype(np.float16)], name="float16", grad=False,
         reference=lambda inputs, attrs: [np.linalg.det(inputs[0].astype(np.float32))
                                          .astype(np.float16)], rtol=1e-2, atol=1e-2),
    Case("portable.Inverse", [_square(3, 3)], reference=_inv, name="2d"),
    Case("portable.Inverse", [_square(2, 3, 4, 4, seed=1)], reference=_inv, name="batched",
         rtol=1e-4),
    Case("portable.Inverse", [_square(5, 5, seed=2, pivot=True)], reference=_inv,
         name="pivoting", rtol=1e-4),
    Case("portable.Inverse", [_square(2, 1, 1, seed=3)], reference=_inv, name="1x1"),
    Case("portable.Inverse", [np.zeros((0, 2, 2), np.float32)], reference=_inv,
         name="empty_stack", grad=False),
]


# -- portable.Syevd and portable.Gelqf: MXNet's eigen- and LQ decompositions ---------------------
# Eigenvalues well apart and matrices of full rank, so that finite differences are accurate and
# no eigenvector's largest entry (which fixes its sign) is near a tie.


def _symmetric(*shape: int, seed: int = 0) -> np.ndarray:
    """Symmetric matrices (..., M, M) with eigenvalues spread over [-M, M]."""
    x = rand(*shape, seed=seed).astype(np.float64)
    q, _ = np.linalg.qr(x)
    m = shape[-1]
    lam = np.linspace(-m, m, m) + 0.1 * rand(*shape[:-1], seed=seed + 1)
    a = q @ (lam[..., None] * np.swapaxes(q, -1, -2))
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(np.float32)


def _syevd(inputs, attrs):
    """NumPy's eigh (lower triangle), rows as eigenvectors, each signed as MXNet signs it."""
    a = inputs[0]
    w, v = np.linalg.eigh(a.astype(np.promote_types(a.dtype, np.float32)), UPLO="L")
    u = np.swapaxes(v, -1, -2)
    k = np.argmax(np.abs(u), axis=-1)[..., None]
    u = np.where(np.take_along_axis(u, k, axis=-1) < 0, -u, u)
    return [u.astype(a.dtype), w.astype(a.dtype)]


def _syevd_grad(inputs, attrs, heads, eps=1e-6):
    """MXNet's gradient of Syevd is the one over symmetric matrices: finite differences along
    A_ij and A_ji together (the forward reads only the lower triangle) give 2 dA_ij off the
    diagonal, dA_ii on it."""
    a = np.array(inputs[0], np.float64)
    n = a.shape[-1]

    def loss(x):
        return sum(float(np.sum(o * h)) for o, h in zip(_syevd([x], attrs), heads))

    grad = np.zeros_like(a)
    for index in np.ndindex(a.shape[:-2]):
        for i in range(n):
            for j in range(i + 1):
                step = np.zeros_like(a)
                step[index + (i, j)] = step[index + (j, i)] = eps
                slope = (loss(a + step) - loss(a - step)) / (2 * eps)
                grad[index + (i, j)] = grad[index + (j, i)] = slope if i == j else slope / 2
    return [grad]


def _gelqf(inputs, attrs):
    """A^T = Q' R (NumPy's QR, LAPACK geqrf): Q = Q'^T, L = R^T."""
    a = inputs[0]
    q, r = np.linalg.qr(np.swapaxes(a, -1, -2))
    return [np.swapaxes(q, -1, -2), np.swapaxes(r, -1, -2)]


def _lower_only(a: np.ndarray) -> np.ndarray:
    """A non-symmetric matrix: Syevd reads its lower triangle only."""
    return (a + np.triu(rand(*a.shape, seed=9), 1)).astype(a.dtype)


CASES += [
    Case("portable.Syevd", [_symmetric(3, 3)], outputs=2, reference=_syevd,
         grad_reference=_syevd_grad, name="2d", rtol=1e-4, atol=1e-5),
    Case("portable.Syevd", [_symmetric(2, 2, 4, 4, seed=1)], outputs=2, reference=_syevd,
         grad_reference=_syevd_grad, name="batched", rtol=1e-4, atol=1e-5),
    Case("portable.Syevd", [_symmetric(5, 5, seed=2).astype(np.float64)], outputs=2,
         reference=_syevd, grad_reference=_syevd_grad, name="float64"),
    Case("portable.Syevd", [_symmetric(2, 1, 1, seed=3)], outputs=2, reference=_syevd,
         grad_reference=_syevd_grad, name="1x1"),
    Case("portable.Syevd", [_lower_only(_symmetric(4, 4, seed=4))], outputs=2, reference=_syevd,
         name="lower_triangle_read", grad=False, rtol=1e-4, atol=1e-5),
    Case("portable.Syevd", [np.zeros((0, 3, 3), np.float32)], outputs=2, reference=_syevd,
         name="empty_stack", grad=False),
    Case("portable.Gelqf", [rand(2, 3)], outputs=2, reference=_gelqf, name="2d", rtol=1e-4,
         atol=1e-5),
    Case("portable.Gelqf", [rand(2, 3, 3, 5, seed=1)], outputs=2, reference=_gelqf,
         name="batched", rtol=1e-4, atol=1e-5),
    Case("portable.Gelqf", [_square(4, 4, seed=2)], outputs=2, reference=_gelqf, name="square",
         rtol=1e-4, atol=1e-5),
    Case("portable.Gelqf", [rand(1, 4, seed=3).astype(np.float64)], outputs=2,
         reference=_gelqf, name="one_row_float64"),
    Case("portable.Gelqf", [np.zeros((0, 2, 3), np.float32)], outputs=2, reference=_gelqf,
         name="empty_stack", grad=False),
]
