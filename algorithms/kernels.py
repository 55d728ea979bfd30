"""The small compiled pieces several algorithms share, each written once.

- `utf8_char`: the code point at a position of UTF-8 bytes (Arrow's string buffers);
- `same`: whether two runs of items (bytes, code points) are equal;
- `fnv1a64`: FNV-1a, 64 bits, of a run of bytes;
- `poly_hash`: the polynomial hash of a run of code points (base POLY_BASE);
- `fmix64`: MurmurHash3's finaliser, which spreads every bit of a hash over all 64.

A kernel calls another by its global name (algorithms/jit.py), so a module imports these
by name: `from .kernels import same`. The ones called in hot loops are inlined into their
callers by numba (inline="always"), as the copies they replace were.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

POLY_BASE = np.uint64(0x100000001B3)


@njit(cache=True, inline="always")
def utf8_char(data, p):
    """(code point, length in bytes) of the UTF-8 character at data[p] (valid UTF-8)."""
    b0 = np.int64(data[p])
    if b0 < 0x80:
        return b0, 1
    if b0 < 0xE0:
        return ((b0 & 0x1F) << 6) | (np.int64(data[p + 1]) & 0x3F), 2
    if b0 < 0xF0:
        return (((b0 & 0x0F) << 12) | ((np.int64(data[p + 1]) & 0x3F) << 6)
                | (np.int64(data[p + 2]) & 0x3F)), 3
    return (((b0 & 0x07) << 18) | ((np.int64(data[p + 1]) & 0x3F) << 12)
            | ((np.int64(data[p + 2]) & 0x3F) << 6) | (np.int64(data[p + 3]) & 0x3F)), 4


@njit(cache=True, inline="always")
def same(x, a0, a1, y, b0, b1):
    """Whether x[a0:a1] and y[b0:b1] hold the same items (x and y may be one array)."""
    if a1 - a0 != b1 - b0:
        return False
    for q in range(a1 - a0):
        if x[a0 + q] != y[b0 + q]:
            return False
    return True


@njit(cache=True)
def fnv1a64(buf, start, stop):
    """FNV-1a, 64 bits, of the bytes buf[start:stop]."""
    h = np.uint64(0xCBF29CE484222325)
    for i in range(start, stop):
        h = (h ^ np.uint64(buf[i])) * np.uint64(0x100000001B3)
    return h


@njit(cache=True, inline="always")
def poly_hash(cps, a, b):
    """sum of cps[i] * POLY_BASE ** (b - 1 - i) for a <= i < b, mod 2**64: the hash of a
    string that can also be had from prefix hashes (quality_signals_fast's n-grams)."""
    h = np.uint64(0)
    for i in range(a, b):
        h = h * POLY_BASE + np.uint64(cps[i])
    return h


@njit(cache=True, inline="always")
def fmix64(h):
    """MurmurHash3's finaliser: spreads every input bit over all 64 output bits (the
    Python version: algorithms/minhash.py's fmix64)."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h
