"""``nd.random`` by moments (tolerances from the sample size), seeding, ``nd.linalg`` and
``nd.contrib`` gradients against float64 finite differences, and gluon's NHWC convolution
against the channels-first answers recorded from MXNet 1.9.1 (``fixtures/gluon_layouts.json``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import portable as mx
from portable.errors import ShapeError

N = 200_000  # samples per moment check
SIGMAS = 6   # how many standard errors a moment may be off


def _check_moments(samples: np.ndarray, mean: float, var: float) -> None:
    x = samples.astype(np.float64).ravel()
    n = x.size
    assert abs(x.mean() - mean) <= SIGMAS * np.sqrt(var / n), (x.mean(), mean)
    # the sample variance's standard error, from the fourth central moment estimate
    fourth = np.mean((x - x.mean()) ** 4)
    assert abs(x.var() - var) <= SIGMAS * np.sqrt(max(fourth - var ** 2, 1e-12) / n), \
        (x.var(), var)


@pytest.mark.parametrize("draw, mean, var", [
    (lambda: mx.nd.random.uniform(-1, 3, shape=(N,)), 1.0, 16 / 12),
    (lambda: mx.nd.random.normal(2, 3, shape=(N,)), 2.0, 9.0),
    (lambda: mx.nd.random.randn(N, loc=-1, scale=0.5), -1.0, 0.25),
    (lambda: mx.nd.random.exponential(2, shape=(N,)), 2.0, 4.0),
    (lambda: mx.nd.random.gamma(3, 2, shape=(N,)), 6.0, 12.0),
    (lambda: mx.nd.random.poisson(4, shape=(N,)), 4.0, 4.0),
    (lambda: mx.nd.random.negative_binomial(3, 0.4, shape=(N,)), 3 * 0.6 / 0.4,
     3 * 0.6 / 0.16),
    (lambda: mx.nd.random.generalized_negative_binomial(2, 0.5, shape=(N,)), 2.0, 2 + 0.5 * 4),
    (lambda: mx.nd.random.randint(0, 10, shape=(N,)), 4.5, (100 - 1) / 12),
    (lambda: mx.nd.random_exponential(lam=4, shape=(N,)), 0.25, 1 / 16),
], ids=["uniform", "normal", "randn", "exponential", "gamma", "poisson", "negative_binomial",
        "generalized_negative_binomial", "randint", "legacy_exponential_rate"])
def test_moments(draw, mean, var):
    mx.random.seed(3)
    _check_moments(draw().asnumpy(), mean, var)


def test_array_parameters_give_one_block_per_element():
    mx.random.seed(4)
    loc, scale = mx.nd.array([-5.0, 0.0, 5.0]), mx.nd.array([1.0, 2.0, 0.5])
    out = mx.nd.random.normal(loc, scale, shape=(N // 4,)).asnumpy()
    assert out.shape == (3, N // 4) and out.dtype == np.float32
    for row, m, s in zip(out, [-5, 0, 5], [1, 2, 0.5]):
        _check_moments(row, m, s * s)


def test_multinomial_frequencies_and_log_prob():
    mx.random.seed(5)
    probs = np.array([0.1, 0.6, 0.3])
    samples, log_prob = mx.nd.random.multinomial(mx.nd.array(probs), shape=(N,), get_prob=True)
    counts = np.bincount(samples.asnumpy(), minlength=3) / N
    assert np.all(np.abs(counts - probs) <= SIGMAS * np.sqrt(probs * (1 - probs) / N))
    np.testing.assert_allclose(log_prob.asnumpy(), np.log(probs)[samples.asnumpy()], rtol=1e-6)


def test_same_seed_same_numbers_and_other_seed_other_numbers():
    def draw(seed):
        mx.random.seed(seed)
        return [mx.nd.random.uniform(shape=(4,)).asnumpy(),
                mx.nd.random.normal(mx.nd.zeros((2,)), mx.nd.ones((2,)), shape=3).asnumpy(),
                mx.nd.random.shuffle(mx.nd.arange(10)).asnumpy()]

    first, again, other = draw(11), draw(11), draw(12)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


def test_out_argument_is_written():
    out = mx.nd.zeros((3, 2))
    result = mx.nd.random.uniform(5, 6, out=out)
    assert result is out and np.all((out.asnumpy() >= 5) & (out.asnumpy() < 6))


# -- gradients against finite differences (float64) --------------------------------------------


def _finite_differences(f, x: np.ndarray, head: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        grad[index] = np.sum(head * (f(up) - f(down))) / (2 * eps)
    return grad


def _spd(rng: np.random.Generator, n: int, batch: int = 2) -> np.ndarray:
    m = rng.normal(size=(batch, n, n))
    return m @ m.transpose(0, 2, 1) + n * np.eye(n)


LINALG_CASES = {
    "gemm": (lambda a: mx.nd.linalg.gemm(a, a, a, transpose_b=True, alpha=0.5, beta=2), "any"),
    "gemm2": (lambda a: mx.nd.linalg.gemm2(a, a, transpose_a=True), "any"),
    "syrk": (lambda a: mx.nd.linalg.syrk(a, alpha=1.5), "any"),
    "trmm": (lambda a: mx.nd.linalg.trmm(a, a, rightside=True, lower=False), "any"),
    "trsm": (lambda a: mx.nd.linalg.trsm(a, a * 2, transpose=True), "spd"),
    "trsm_rightside": (lambda a: mx.nd.linalg.trsm(a, a, rightside=True, lower=False), "spd"),
    "potrf": (lambda a: mx.nd.linalg.potrf(a), "spd"),
    "potri": (lambda a: mx.nd.linalg.potri(mx.nd.linalg.potrf(a)), "spd"),
    "sumlogdiag": (lambda a: mx.nd.linalg.sumlogdiag(a), "spd"),
    "extractdiag": (lambda a: mx.nd.linalg.extractdiag(a, offset=1), "any"),
    "extracttrian": (lambda a: mx.nd.linalg.extracttrian(a, lower=False), "any"),
    "maketrian": (lambda a: mx.nd.linalg.maketrian(mx.nd.linalg.extracttrian(a), offset=-1),
                  "any"),
    "makediag": (lambda a: mx.nd.linalg.makediag(mx.nd.linalg.extractdiag(a)), "any"),
    "inverse": (lambda a: mx.nd.linalg.inverse(a), "well"),
    "det": (lambda a: mx.nd.linalg.det(a), "well"),
    "slogdet": (lambda a: mx.nd.linalg.slogdet(a)[1], "well"),
    "slogdet_negative": (lambda a: mx.nd.linalg.slogdet(a * -1)[1], "well"),
    # syevd on SPD matrices (distinct eigenvalues; the signs of U's rows are fixed by MXNet's
    # rule, locally constant away from ties), gelqf on full-rank wide matrices
    "syevd_vectors": (lambda a: mx.nd.linalg.syevd(a)[0], "spd"),
    "syevd_values": (lambda a: mx.nd.linalg.syevd(a)[1], "spd"),
    "syevd_square": (lambda a: _eigen_square(*mx.nd.linalg.syevd(a)), "spd"),
    "gelqf_q": (lambda a: mx.nd.linalg.gelqf(a)[0], "wide"),
    "gelqf_l": (lambda a: mx.nd.linalg.gelqf(a)[1], "wide"),
    "gelqf_both": (lambda a: mx.nd.linalg.gemm2(mx.nd.linalg.gelqf(a)[1],
                                                mx.nd.linalg.gelqf(a)[0] ** 2), "wide"),
}


def _eigen_square(u, lam):
    """U^T diag(L^2) U (= A @ A): a function of both outputs that no sign choice changes."""
    return mx.nd.linalg.gemm2(u, mx.nd.broadcast_mul(u, (lam * lam).expand_dims(-1)),
                              transpose_a=True)


def _linalg_input(kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "spd":
        return _spd(rng, 3)
    if kind == "wide":  # full row rank
        return rng.normal(size=(2, 3, 5))
    x = rng.normal(size=(2, 3, 3))
    # "well": well-conditioned (diagonally dominant), so finite differences stay accurate
    return x + 4 * np.eye(3) if kind == "well" else x


@pytest.mark.parametrize("name", sorted(LINALG_CASES))
def test_linalg_gradient_matches_finite_differences(name):
    fn, kind = LINALG_CASES[name]
    rng = np.random.default_rng(0)
    x = _linalg_input(kind, rng)

    def forward(value: np.ndarray) -> np.ndarray:
        return fn(mx.nd.array(value, dtype=np.float64)).asnumpy()

    head = rng.uniform(0.5, 1.5, size=forward(x).shape)
    a = mx.nd.array(x, dtype=np.float64)
    a.attach_grad()
    with mx.autograd.record():
        y = fn(a)
    y.backward(mx.nd.array(head, dtype=np.float64))
    if kind == "spd":  # perturb symmetrically: only symmetric inputs are in the domain
        def sym(value):
            return forward((value + value.transpose(0, 2, 1)) / 2)
        expected = _finite_differences(sym, x, head)
        got = a.grad.asnumpy()
        got = (got + got.transpose(0, 2, 1)) / 2
    else:
        expected, got = _finite_differences(forward, x, head), a.grad.asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


NP_LINALG_CASES = {
    "inv": lambda a: mx.np.linalg.inv(a),
    "det": lambda a: mx.np.linalg.det(a),
    "slogdet": lambda a: mx.np.linalg.slogdet(a)[1],
    "det_of_inverse": lambda a: mx.np.linalg.det(mx.np.linalg.inv(a) * 2),
}


@pytest.mark.parametrize("name", sorted(NP_LINALG_CASES))
def test_np_linalg_gradient_matches_finite_differences(name):
    fn = NP_LINALG_CASES[name]
    rng = np.random.default_rng(3)
    x = _linalg_input("well", rng)

    def forward(value: np.ndarray) -> np.ndarray:
        return fn(mx.np.array(value, dtype=np.float64)).asnumpy()

    head = rng.uniform(0.5, 1.5, size=forward(x).shape)
    a = mx.np.array(x, dtype=np.float64)
    a.attach_grad()
    with mx.autograd.record():
        y = fn(a)
    y.backward(mx.np.array(head, dtype=np.float64))
    np.testing.assert_allclose(a.grad.asnumpy(), _finite_differences(forward, x, head),
                               rtol=1e-5, atol=1e-6)


def test_np_eigh_is_syevd_transposed_and_differentiable():
    rng = np.random.default_rng(6)
    x = _spd(rng, 3)
    upper_only = np.triu(x) + np.tril(rng.normal(size=x.shape), -1)  # lower: noise
    w, v = mx.np.linalg.eigh(mx.np.array(upper_only, dtype=np.float64), UPLO="U")
    u, lam = mx.nd.linalg.syevd(mx.nd.array(x, dtype=np.float64))
    np.testing.assert_allclose(w.asnumpy(), lam.asnumpy(), rtol=1e-12)
    np.testing.assert_allclose(v.asnumpy(), u.asnumpy().transpose(0, 2, 1), atol=1e-12)
    np.testing.assert_allclose(mx.np.linalg.eigvalsh(mx.np.array(x)).asnumpy(),
                               np.linalg.eigvalsh(x), rtol=1e-5)

    head = rng.uniform(0.5, 1.5, size=(2, 3))
    a = mx.np.array(x, dtype=np.float64)
    a.attach_grad()
    with mx.autograd.record():
        y = mx.np.linalg.eigvalsh(a)
    y.backward(mx.np.array(head, dtype=np.float64))

    def sym(value):
        return np.linalg.eigvalsh((value + value.transpose(0, 2, 1)) / 2)
    np.testing.assert_allclose(a.grad.asnumpy(), _finite_differences(sym, x, head),
                               rtol=1e-5, atol=1e-6)


def test_inverse_and_det_agree_with_numpy():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 4, 4))
    a = mx.nd.array(x, dtype=np.float64)
    np.testing.assert_allclose(mx.nd.linalg.inverse(a).asnumpy(), np.linalg.inv(x), rtol=1e-9)
    np.testing.assert_allclose(mx.nd.linalg.det(a).asnumpy(), np.linalg.det(x), rtol=1e-9)
    sign, logabsdet = mx.nd.linalg.slogdet(a)
    want_sign, want_log = np.linalg.slogdet(x)
    np.testing.assert_array_equal(sign.asnumpy(), want_sign)
    np.testing.assert_allclose(logabsdet.asnumpy(), want_log, rtol=1e-9)
    with pytest.raises(ShapeError, match="square"):
        mx.nd.linalg.det(mx.nd.ones((2, 3)))


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_syevd_and_gelqf_reconstruct_their_input(dtype, tol):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4, 4))
    x = (x + np.swapaxes(x, -1, -2)).astype(dtype)
    u, lam = (o.asnumpy() for o in mx.nd.linalg.syevd(mx.nd.array(x, dtype=dtype)))
    assert u.dtype == lam.dtype == dtype and u.shape == x.shape and lam.shape == x.shape[:-1]
    eye = np.eye(4)
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ (lam[..., None] * u), x, atol=10 * tol)
    np.testing.assert_allclose(u @ np.swapaxes(u, -1, -2), np.broadcast_to(eye, x.shape),
                               atol=10 * tol)
    assert (np.diff(lam, axis=-1) >= 0).all()
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(x), atol=10 * tol)
    top = np.take_along_axis(u, np.argmax(np.abs(u), axis=-1)[..., None], axis=-1)
    assert (top > 0).all()  # MXNet's sign: each row's largest-magnitude entry positive

    w = rng.normal(size=(2, 3, 5)).astype(dtype)
    q, low = (o.asnumpy() for o in mx.nd.linalg.gelqf(mx.nd.array(w, dtype=dtype)))
    assert q.shape == w.shape and low.shape == (2, 3, 3) and q.dtype == low.dtype == dtype
    np.testing.assert_allclose(low @ q, w, atol=10 * tol)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(3), (2, 3, 3)),
                               atol=10 * tol)
    assert not np.triu(low, 1).any()


def test_syevd_and_gelqf_refuse_bad_shapes():
    with pytest.raises(ShapeError, match="square"):
        mx.nd.linalg.syevd(mx.nd.ones((2, 3)))
    with pytest.raises(ShapeError, match=r"m <= n.*\(3, 2\)"):
        mx.nd.linalg.gelqf(mx.nd.ones((3, 2)))


def test_potrf_and_trsm_solve_a_system_like_numpy():
    rng = np.random.default_rng(1)
    a, b = _spd(rng, 4), rng.normal(size=(2, 4, 2))
    lower = mx.nd.linalg.potrf(mx.nd.array(a, dtype=np.float64))
    np.testing.assert_allclose(lower.asnumpy(), np.linalg.cholesky(a), rtol=1e-10)
    y = mx.nd.linalg.trsm(lower, mx.nd.array(b, dtype=np.float64))
    x = mx.nd.linalg.trsm(lower, y, transpose=True)
    np.testing.assert_allclose(x.asnumpy(), np.linalg.solve(a, b), rtol=1e-9)


def test_foreach_and_while_loop_are_differentiable():
    rng = np.random.default_rng(2)
    data = rng.normal(size=(4, 3))

    def scan(value: np.ndarray) -> np.ndarray:
        x = mx.nd.array(value, dtype=np.float64)
        outs, state = mx.nd.contrib.foreach(lambda d, s: (d * s, s + d * d), x,
                                            mx.nd.ones((3,), dtype=np.float64))
        loop, _ = mx.nd.contrib.while_loop(lambda i, s: i < 2, lambda i, s: (s * i, (i + 1, s)),
                                           (mx.nd.array([0.0], dtype=np.float64), state),
                                           max_iterations=3)
        return outs.sum().asnumpy() + loop.sum().asnumpy()

    x = mx.nd.array(data, dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        outs, state = mx.nd.contrib.foreach(lambda d, s: (d * s, s + d * d), x,
                                            mx.nd.ones((3,), dtype=np.float64))
        loop, _ = mx.nd.contrib.while_loop(lambda i, s: i < 2, lambda i, s: (s * i, (i + 1, s)),
                                           (mx.nd.array([0.0], dtype=np.float64), state),
                                           max_iterations=3)
        total = outs.sum() + loop.sum()
    total.backward()
    expected = _finite_differences(scan, data, np.ones(1))
    np.testing.assert_allclose(x.grad.asnumpy(), expected, rtol=1e-5, atol=1e-6)


# -- NHWC convolution against MXNet's recorded channels-first answers --------------------------

LAYOUTS = json.loads((Path(__file__).parent / "fixtures" / "gluon_layouts.json").read_text())
NHWC = {"conv2d_nhwc": (4, (2, 3), {}), "conv2d_nhwc_stride_pad": (2, 3, {"strides": 2,
                                                                       "padding": 1}),
        "conv2d_nhwc_dilated": (2, 2, {"dilation": (1, 2)})}


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("name", sorted(NHWC))
def test_nhwc_convolution_matches_mxnet(name, hybridize):
    shape, weight, expected = LAYOUTS["answers"][name]["items"]
    channels, kernel, kwargs = NHWC[name]
    net = mx.gluon.nn.Conv2D(channels, kernel, layout="NHWC", in_channels=3, use_bias=False,
                             **kwargs)
    net.initialize()
    assert list(net.weight.shape) == [item["value"] for item in shape["items"]]
    net.weight.set_data(mx.nd.array(np.asarray(weight["values"], np.float32)))
    if hybridize:
        net.hybridize()
    x = mx.nd.array(np.arange(2 * 5 * 6 * 3).reshape(2, 5, 6, 3) % 7 - 3)
    got = net(x).asnumpy()
    assert list(got.shape) == expected["shape"]
    np.testing.assert_allclose(got, np.asarray(expected["values"]), rtol=1e-5, atol=1e-5)
