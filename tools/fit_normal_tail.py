"""Fits the polynomials kernels/cpu/fast_math.h uses for the normal distribution's tail.

For z >= 0 and t = 1 / (1 + z/2), which maps z in [0, inf) onto t in (0, 1],

    erfc(z) = t e^(-z^2) Q(t),    Q(t) = erfc(z) e^(z^2) / t.

Q is smooth on (0, 1]: Q(1) = 1 (z = 0) and, as z grows, erfc(z) e^(z^2) ~ 1 / (z sqrt(pi)) and
t ~ 2 / z, so Q tends to 1 / (2 sqrt(pi)) = 0.282. A polynomial in t therefore keeps its
relative error across the whole tail, where erfc itself falls to 1e-41. GELU's x Phi(x) needs
only Phi(-|x|) = erfc(|x| / sqrt 2) / 2, and e^(-z^2) = e^(-x^2/2) is the density's factor,
computed once for both.

fast_math.h clamps x to [-13.5, 13.5], so z <= 13.5 / sqrt 2 and t >= 0.1732; the fit covers
exactly that interval. Each polynomial is fitted for the smallest largest relative error (a
weighted least-squares fit whose weights are raised where the error is largest, Lawson's
iteration), then its coefficients are rounded to float32 and evaluated by Horner's rule in
float32, the way the C++ does; both errors are printed.

    /usr/bin/python3 tools/fit_normal_tail.py [--degrees 5 8]

Needs numpy (Debian's python3-numpy). tests/kernels/fast_math_test.cpp checks the C++ functions
against the C library's erfc over every float in the range, independently of this script.
"""
import argparse
import math

import numpy as np

Z_MAX = 13.5 / math.sqrt(2.0)
T_MIN = 1.0 / (1.0 + 0.5 * Z_MAX)


def q_exact(t):
    z = 2.0 * (1.0 / t - 1.0)
    return np.array([math.erfc(v) * math.exp(v * v) for v in z]) / t


def fit(degree, iterations=300, points=8001):
    # Chebyshev-spaced points crowd at the ends, where a minimax error peaks.
    t = 0.5 * (1.0 + T_MIN) + 0.5 * (1.0 - T_MIN) * np.cos(np.linspace(0.0, math.pi, points))
    q = q_exact(t)
    basis = np.vander(t, degree + 1)  # highest power first, as Horner's rule reads them
    weight = np.full(points, 1.0 / points)
    for _ in range(iterations):
        root = np.sqrt(weight)
        coefficients, *_ = np.linalg.lstsq(basis * (root / q)[:, None], root, rcond=None)
        error = np.abs(basis @ coefficients - q) / q
        weight = weight * error
        weight /= weight.sum()
    c32 = coefficients.astype(np.float32)
    t32 = t.astype(np.float32)
    horner = np.full_like(t32, c32[0])
    for c in c32[1:]:
        horner = (horner * t32 + c).astype(np.float32)
    error32 = np.abs(horner.astype(np.float64) - q) / q
    return c32, error.max(), error32.max()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degrees", type=int, nargs="+", default=[5, 8])
    args = parser.parse_args()
    print(f"Q(t) = erfc(z) e^(z^2) / t, t = 1 / (1 + z/2), t in [{T_MIN:.4f}, 1]")
    for degree in args.degrees:
        c32, error, error32 = fit(degree)
        print(f"degree {degree}: largest relative error {error:.2e} exact, {error32:.2e} in float32")
        print("  highest power first: " + ", ".join(f"{float(c):.9e}f" for c in c32))


if __name__ == "__main__":
    main()
