#!/usr/bin/env python3
"""Exploration behind tq4p (docs/FIDELITY.md, "Pairs"), numpy only, a few minutes:
  1. k-means (Lloyd) vector quantizers of the standard normal in 2, 3 and 4 dimensions at 2-4 bits
     per coordinate, MSE per coordinate against the scalar Lloyd-Max figure at the same bits;
  2. the scalar codebook re-trained for the least-squares row scale on unit rows at d = 64 (the
     "gain-shape" optimum) against the Lloyd-Max one;
  3. the committed tq4p points (quant/pair_codebook_points.inc) on unit rows at d = 64 with the
     least-squares scale against the scalar 4-bit codebook (tools/tq_scale_experiment.py's ls-iter).
Usage: python3 tools/pair_quantizer_experiment.py
"""
import pathlib
import re

import numpy as np

LLOYD_MAX = {4: 0.009497, 3: 0.03454, 2: 0.1175}  # N(0, 1), Max 1960
HALF = {4: [0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6180, 2.0690, 2.7326], 3: [0.2451, 0.7560, 1.3439, 2.1520],
        2: [0.4528, 1.5104]}
rng = np.random.Generator(np.random.PCG64(1))


def nearest(points, centers, chunk=1 << 15):
    c2 = (centers ** 2).sum(1)
    return np.concatenate([(c2[None] - 2 * points[s:s + chunk] @ centers.T).argmin(1)
                           for s in range(0, len(points), chunk)])


def kmeans(dim, bits, iterations=40):
    k = 2 ** (dim * bits)
    x = rng.standard_normal((max(60 * k, 100000), dim))
    grid = np.stack(np.meshgrid(*[np.concatenate([-np.array(HALF[bits][::-1]), HALF[bits]])] * dim), -1).reshape(-1, dim)
    c = grid.copy()  # start from the scalar quantizer's product grid
    for _ in range(iterations):
        idx = nearest(x, c)
        counts = np.bincount(idx, minlength=k)
        sums = np.zeros_like(c)
        np.add.at(sums, idx, x)
        c[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    t = rng.standard_normal((100000, dim))
    return float(((t - c[nearest(t, c)]) ** 2).sum(1).mean() / dim)


def unit_rows(n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ls_error_scalar(x, cb, rounds=3):
    bounds = (cb[1:] + cb[:-1]) / 2
    a = np.ones(len(x))
    for _ in range(rounds + 1):
        q = cb[np.searchsorted(bounds, x / a[:, None])]
        a = (x * q).sum(1) / (q * q).sum(1)
    return float(((x - a[:, None] * q) ** 2).sum(1).mean()), q, a


def main():
    print("1. vector quantizers of N(0, I): MSE per coordinate, against scalar Lloyd-Max")
    for dim, bits in [(2, 4), (2, 3), (2, 2), (3, 3), (4, 2)]:
        m = kmeans(dim, bits)
        print(f"   {dim}-D, {bits} bits a coordinate: {m:.5f} against {LLOYD_MAX[bits]:.5f} ({1 - m / LLOYD_MAX[bits]:.0%} lower)")
    d = 64
    x = unit_rows(20000, d)
    print("2. scalar codebook re-trained for the least-squares scale, unit rows at d = 64")
    for bits in (4, 3, 2):
        cb = np.concatenate([-np.array(HALF[bits][::-1]), HALF[bits]]) / np.sqrt(d)
        before, _, _ = ls_error_scalar(x, cb)
        for _ in range(20):
            bounds = (cb[1:] + cb[:-1]) / 2
            _, q, a = ls_error_scalar(x, cb)
            idx = np.searchsorted(bounds, x / a[:, None])
            num = np.bincount(idx.ravel(), weights=(a[:, None] * x).ravel(), minlength=len(cb))
            den = np.bincount(idx.ravel(), weights=np.repeat(a ** 2, d), minlength=len(cb))
            cb = np.sort(num / den)
            cb = (cb - cb[::-1]) / 2
        after, _, _ = ls_error_scalar(x, cb)
        print(f"   {bits} bits: {after:.5f} against {before:.5f}")
    print("3. tq4p points against the scalar 4-bit codebook, unit rows at d = 64, least-squares scale")
    inc = pathlib.Path(__file__).resolve().parent.parent / "quant" / "pair_codebook_points.inc"
    pts = np.array([float(v) for v in re.findall(r"(-?[0-9.e+-]+)f,", inc.read_text())]).reshape(-1, 2) / np.sqrt(d)
    p = np.stack([x[:, :d // 2], x[:, d // 2:]], -1)
    a = np.ones(len(x))
    for _ in range(4):
        q = pts[nearest((p / a[:, None, None]).reshape(-1, 2), pts)].reshape(p.shape)
        a = (p * q).sum((1, 2)) / (q * q).sum((1, 2))
    pairs = float(((p - a[:, None, None] * q) ** 2).sum((1, 2)).mean())
    scalar, _, _ = ls_error_scalar(x, np.concatenate([-np.array(HALF[4][::-1]), HALF[4]]) / np.sqrt(d))
    print(f"   pairs {pairs:.5f}, scalar {scalar:.5f}")


if __name__ == "__main__":
    main()
