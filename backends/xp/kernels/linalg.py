"""NumPy kernels: linear algebra."""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.errors import OpError

kernels, kernel = kernel_table()


@kernel("MatMul")
def matmul(ctx, inputs, outputs, attrs):
    ctx.xp.matmul(inputs[0], inputs[1], out=outputs[0])


@kernel("Gemm")
def gemm(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    a = inputs[0].T if attrs["transA"] else inputs[0]
    b = inputs[1].T if attrs["transB"] else inputs[1]
    xp.matmul(a, b, out=outputs[0])
    gemm_scale_and_add(inputs, outputs[0], attrs)


def gemm_scale_and_add(inputs, y, attrs) -> None:
    """What Gemm does after A @ B (in ``y``): times alpha, plus beta times C (when given)."""
    if attrs["alpha"] != 1.0:
        y *= y.dtype.type(attrs["alpha"])
    c = inputs[2] if len(inputs) > 2 else None
    if c is not None:
        y += c if attrs["beta"] == 1.0 else c * c.dtype.type(attrs["beta"])


@kernel("Einsum")
def einsum(ctx, inputs, outputs, attrs):
    # optimize=True picks a contraction order (and sums ellipsis axes an explicit output
    # omits), as onnx.reference does
    # (NumPy's einsum refuses ml_dtypes' bfloat16: it sums in float32, rounded once at the end)
    inputs = [x.astype("float32") if x.dtype.kind == "V" else x for x in inputs]
    outputs[0][...] = ctx.xp.einsum(attrs["equation"].replace(" ", ""), *inputs, optimize=True)


@kernel("Trilu")
def trilu(ctx, inputs, outputs, attrs):
    k = int(ctx.backend.to_numpy(inputs[1])) if len(inputs) > 1 and inputs[1] is not None else 0
    keep = (ctx.xp.triu if attrs["upper"] else ctx.xp.tril)
    outputs[0][...] = keep(inputs[0], k)


def _lapack_input(xp, x):
    # LAPACK has no float16: compute in float32 and round the result back on the store
    return x.astype(xp.float32) if x.dtype == xp.float16 else x


@kernel("Det")
def det(ctx, inputs, outputs, attrs):
    outputs[0][...] = ctx.xp.linalg.det(_lapack_input(ctx.xp, inputs[0]))


@kernel("portable.Inverse")
def inverse(ctx, inputs, outputs, attrs):
    xp = ctx.xp
    try:
        outputs[0][...] = xp.linalg.inv(_lapack_input(xp, inputs[0]))
    except np.linalg.LinAlgError as exc:  # MXNet refuses a singular matrix as well
        raise OpError(f"portable.Inverse: a matrix of the stack of shape {inputs[0].shape} is "
                      f"singular ({exc})") from None


def _swap_last(xp, x):
    return xp.swapaxes(x, -1, -2)


@kernel("portable.Syevd")
def syevd(ctx, inputs, outputs, attrs):
    """eigh on the lower triangle; each eigenvector (a row of U) then gets MXNet's sign: its
    largest-magnitude entry positive, the first one on ties (la_op-inl.h SyevdEigenVecSigns)."""
    xp = ctx.xp
    a = inputs[0]
    if not a.size:
        return
    try:
        w, v = xp.linalg.eigh(_lapack_input(xp, a), UPLO="L")
    except np.linalg.LinAlgError as exc:
        raise OpError(f"portable.Syevd: the eigendecomposition of a matrix of the stack of shape "
                      f"{a.shape} did not converge ({exc})") from None
    u = _swap_last(xp, v)
    pivot = xp.take_along_axis(u, xp.argmax(xp.abs(u), axis=-1)[..., None], axis=-1)
    outputs[0][...] = xp.where(pivot < 0, -u, u)
    outputs[1][...] = w


@kernel("portable.Gelqf")
def gelqf(ctx, inputs, outputs, attrs):
    """A = L Q from the QR factorisation of A^T (A^T = Q' R: Q = Q'^T, L = R^T): LAPACK's
    geqrf on A^T runs the same Householder reflections as gelqf on A, so the signs agree."""
    xp = ctx.xp
    a = inputs[0]
    if not a.size:
        return
    q, r = xp.linalg.qr(_swap_last(xp, _lapack_input(xp, a)))
    outputs[0][...] = _swap_last(xp, q)
    outputs[1][...] = _swap_last(xp, r)
