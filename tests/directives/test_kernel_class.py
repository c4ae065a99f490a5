"""The front end tells factorisation kernels ("lapack"), matrix-product kernels ("blas", and "gram"
for products of an array with its own transpose), FFT kernels ("fft", and "rfft" when every
transform is a real one), random-number kernels ("random"), transcendental kernels
("transcendental") and scans ("scan") from the rest ("other") by reading their bodies, and every task of a kernel carries its class in the graph (``compute_class``)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from streammap.directives import parse_program
from streammap.directives.kernel_class import compute_class


def _class_of(body: str) -> str:
    return compute_class(ast.parse(textwrap.dedent(body)).body[0])


@pytest.mark.parametrize("body", [
    "def k(a, b):\n    return a @ b",
    "def k(a, b):\n    a = a.copy()\n    a @= b\n    return a",
    "def k(a, b):\n    xp = xp_of(a)\n    return xp.matmul(a, b)",
    "def k(a, b):\n    return a.dot(b)",
    "def k(a, b):\n    return np.linalg.multi_dot([a, b, a])",
    "def k(a, b):\n    return np.einsum('ij,jk->ik', a, b)",
    "def k(a, b):\n    return np.tensordot(a, b, axes=1)",
    "def k(a):\n    if a.ndim > 5:\n        return a @ a\n    return a",       # a branch that may not run
])
def test_a_body_that_calls_a_matrix_product_is_blas(body):
    assert _class_of(body) == "blas"


@pytest.mark.parametrize("body", [
    "def k(a):\n    return np.linalg.cholesky(a)",
    "def k(l, a):\n    return xp_of(a).linalg.solve(l, a.T).T",
    "def k(a):\n    return scipy.linalg.lu_factor(a)",
    "def k(a):\n    return linalg.norm(a)",                              # the whole namespace, but products
    "def k(l, b):\n    return solve_triangular(l, b, lower=True)",       # imported by name
])
def test_a_body_that_calls_a_factorisation_or_solver_is_lapack(body):
    assert _class_of(body) == "lapack"


def test_a_factorisation_outweighs_a_matrix_product_in_one_body():
    assert _class_of("def k(a, b):\n    return np.linalg.cholesky(a @ a.T + b)") == "lapack"


@pytest.mark.parametrize("body", [
    "def k(x):\n    xp = xp_of(x)\n    return xp.fft.ifft(xp.fft.fft(x) * 2)",
    "def k(x):\n    return scipy.fft.fftn(x)",
    "def k(y):\n    return np.fft.irfft(np.fft.fft(y)[: y.size // 2 + 1])",     # one complex transform is enough
    "def k(n):\n    return np.fft.fftfreq(n)",                           # a helper alone: the namespace decides
])
def test_a_body_that_calls_a_complex_fft_and_no_matrix_product_is_fft(body):
    assert _class_of(body) == "fft"


@pytest.mark.parametrize("body", [
    "def k(y):\n    spectrum = np.fft.rfft(y)\n    return np.fft.irfft(spectrum * 0.5)",
    "def k(x):\n    return rfft(x).real",                              # imported by name
    "def k(y):\n    f = xp.fft.rfftfreq(y.size)\n    return xp.fft.irfft(xp.fft.rfft(y) * (f < 0.1), n=y.size)",
    "def k(img):\n    return np.fft.irfft2(np.fft.rfft2(img))",
])
def test_a_body_whose_every_fft_is_a_real_transform_is_rfft(body):
    """Helpers of the ``fft`` namespace (``rfftfreq``, ``fftshift``) do not make a real filter complex."""
    assert _class_of(body) == "rfft"


def test_a_matrix_product_outweighs_an_fft_in_one_body():
    assert _class_of("def k(a, b):\n    return np.fft.fft(a @ b)") == "blas"


@pytest.mark.parametrize("body", [
    "def k(x):\n    return x.sum(axis=1) / x.max()",
    "def k(x, w):\n    return x * w",                                   # elementwise product, not @
    "def k(x):\n    return x ** 2 + x ** -1",                           # integer powers are products
    "def k(x):\n    e = np.exp(x - x.max())\n    return e / np.log1p(e).sum()",   # vectorised exp/log
    "def k(x, t):\n    return np.where(np.abs(x) > t, x * 0.5 + 0.5, x)",     # compare and select
])
def test_arithmetic_reductions_and_vectorised_functions_are_other(body):
    assert _class_of(body) == "other"


@pytest.mark.parametrize("body", [
    "def k(n):\n    t = np.arange(n)\n    return np.sin(t) + np.random.default_rng(0).normal(size=n)",
    "def k(rng, x):\n    return x ** 0.5 + rng.normal(size=x.shape)",            # a fractional power and noise
])
def test_a_body_that_draws_random_numbers_and_calls_a_transcendental_function_is_mixed(body):
    assert _class_of(body) == "mixed"


def test_a_product_outweighs_a_mix_of_random_numbers_and_transcendental_functions():
    assert _class_of("def k(a, rng):\n    return np.sin(a @ a) + rng.normal(size=a.shape)") == "blas"


@pytest.mark.parametrize("body", [
    "def k(b):\n    return np.random.default_rng(b).standard_normal((64, 64))",
    "def k(rng, n):\n    return rng.uniform(-1.0, 1.0, size=n) * 2.0",     # a generator passed in
    "def k(n):\n    return cp.random.rand(n)",
    "def k(x):\n    return x + xp_of(x).random.standard_normal(x.shape)",
])
def test_a_body_that_draws_random_numbers_is_random(body):
    assert _class_of(body) == "random"


@pytest.mark.parametrize("body", [
    "def k(n):\n    return np.sin(np.arange(n)) ** 2 + np.exp(-np.arange(n))",
    "def k(d):\n    return RHO ** np.abs(d)",                          # a scalar to an array power
    "def k(x):\n    return x ** 0.5",
    "def k(x, p):\n    return x ** p",                                   # an exponent unknown here
    "def k(x):\n    return xp_of(x).power(x, 3)",
    "def k(x):\n    return np.tanh(x) * np.arctan2(x, 1.0)",
])
def test_a_body_that_calls_a_transcendental_function_is_transcendental(body):
    assert _class_of(body) == "transcendental"


@pytest.mark.parametrize("body", [
    "def k(y):\n    c = np.cumsum(np.concatenate([np.zeros(1), y]))\n    return (c[8:] - c[:-8]) / 8",   # a moving average
    "def k(x):\n    return x.cumprod(axis=0)",                          # a method
    "def k(x):\n    return np.maximum.accumulate(x, axis=1) - x",       # a ufunc's accumulate
    "def k(x):\n    return np.nancumsum(x) * 0.5",
])
def test_a_body_that_calls_a_scan_is_scan(body):
    assert _class_of(body) == "scan"


@pytest.mark.parametrize("body, expected", [
    ("def k(x):\n    return np.cumsum(np.sin(x))", "transcendental"),
    ("def k(y):\n    return np.cumsum(np.fft.irfft(np.fft.rfft(y)))", "rfft"),
    ("def k(a, b):\n    return np.cumsum(a @ b, axis=0)", "blas"),
])
def test_a_scan_decides_only_among_bodies_without_a_slower_kind_of_work(body, expected):
    assert _class_of(body) == expected


@pytest.mark.parametrize("body", [
    "def k(a, l):\n    return a - l @ l.T",
    "def k(x):\n    return x.T @ x",
    "def k(x):\n    return np.dot(x, x.T)",
    "def k(x):\n    return x.dot(x.transpose())",
    "def k(z):\n    return z @ z.conj().T",
])
def test_a_product_of_an_array_with_its_own_transpose_is_gram(body):
    assert _class_of(body) == "gram"


@pytest.mark.parametrize("body", [
    "def k(a, l, m):\n    return a - l @ m.T",                           # two arrays
    "def k(x):\n    return x @ x",                                       # not transposed
    "def k(x, y):\n    return x @ x.T + x @ y",                          # one product is not a Gram product
])
def test_other_products_stay_blas(body):
    assert _class_of(body) == "blas"


def test_products_and_ffts_outweigh_random_numbers_and_transcendental_functions():
    assert _class_of("def k(x):\n    return np.fft.fft(np.sin(x))") == "fft"
    assert _class_of("def k(w, b):\n    return np.random.default_rng(b).normal(size=w.shape) @ w") == "blas"


def test_every_task_of_a_program_carries_its_kernels_class(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent("""\
        import numpy as np

        # @stream kernel(flops=100)
        def noise(i):
            return np.random.default_rng(i).standard_normal((8, 8))

        # @stream kernel(flops=1024)
        def product(a, b):
            return np.matmul(a, b)

        # @stream graph
        def main():
            xs = [noise(i) for i in range(2)]
            return product(xs[0], xs[1])
        """))
    g = parse_program(path)
    assert {a["kernel"]: a["compute_class"] for _, a in g.nodes(data=True)} == \
        {"noise": "random", "product": "blas"}
