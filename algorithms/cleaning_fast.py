"""clean.py's four cheap signals for a whole batch of documents, in one compiled pass.

clean.py defines each signal as a short Python function over a str (dup_line_share,
longest_char_run, alnum_share, len); those stay the readable definitions and the tests'
reference. A task measures them here instead, straight from the batch's Arrow UTF-8
buffers, without making a Python string per document:

    chars, dup, run, alnum = cheap_signals(batch.column("text"))

and gets exactly the same numbers: the same code points (decoded from UTF-8), the same
str.isalnum() and str.isspace() (tables built from Python's own answers for every code
point), the same lines (split on "\\n", stripped, blank ones left out) compared byte for
byte (equal UTF-8 means equal strings), the same float divisions.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from .jit import njit

from pipeline.arrays import combine, to_numpy

from .unicode_cache import cached_table

_TABLES: tuple[np.ndarray, np.ndarray] | None = None


def tables() -> tuple[np.ndarray, np.ndarray]:
    """(isalnum, isspace) for every code point, from Python itself; once per process,
    cached on disk (algorithms.unicode_cache)."""
    global _TABLES
    if _TABLES is None:
        def build(method):
            return lambda: np.fromiter((getattr(chr(i), method)() for i in range(0x110000)),
                                       np.bool_, count=0x110000)
        _TABLES = (cached_table("isalnum", build("isalnum")),
                   cached_table("isspace", build("isspace")))
    return _TABLES


@njit(cache=True, inline="always")
def _decode(data, p):
    """(code point, bytes) of the UTF-8 sequence at data[p] (valid UTF-8 assumed)."""
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
def _line_hash(data, a, b):
    h = np.uint64(0xCBF29CE484222325)
    for q in range(a, b):
        h = (h ^ np.uint64(data[q])) * np.uint64(0x100000001B3)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, inline="always")
def _same_bytes(data, a0, a1, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for q in range(a1 - a0):
        if data[a0 + q] != data[b0 + q]:
            return False
    return True


@njit(cache=True)
def _distinct_lines(data, hs, starts, ends, n):
    """How many different byte strings among the n lines (hash, start, end)."""
    order = np.argsort(hs[:n], kind="mergesort")
    distinct = 0
    reps = np.empty(n, np.int64)
    g = 0
    while g < n:
        e = g + 1
        while e < n and hs[order[e]] == hs[order[g]]:
            e += 1
        nrep = 0          # a hash group: count its different strings exactly
        for k in range(g, e):
            i = order[k]
            new = True
            for r in range(nrep):
                j = reps[r]
                if _same_bytes(data, starts[i], ends[i], starts[j], ends[j]):
                    new = False
                    break
            if new:
                reps[nrep] = i
                nrep += 1
        distinct += nrep
        g = e
    return distinct


@njit(cache=True)
def _scan(data, offsets, valid, alnum_t, space_t, chars, dup, run, alnum):
    n = offsets.shape[0] - 1
    cap = 16
    hs = np.empty(cap, np.uint64)
    starts = np.empty(cap, np.int64)
    ends = np.empty(cap, np.int64)
    for d in range(n):
        s, e = offsets[d], offsets[d + 1]
        if not valid[d]:
            s = e  # a null text counts as empty
        # code points: count, alnum, longest run of one code point
        cnt = 0
        al = 0
        best = 0
        cur = 0
        prev = -1
        p = s
        while p < e:
            cp, w = _decode(data, p)
            cnt += 1
            if alnum_t[cp]:
                al += 1
            if cp == prev:
                cur += 1
            else:
                cur = 1
                prev = cp
            if cur > best:
                best = cur
            p += w
        chars[d] = cnt
        run[d] = best
        alnum[d] = al / cnt if cnt > 0 else 0.0
        # lines: split on "\n", strip whitespace at both ends, blank ones out
        nl = 0
        ls = s
        while ls <= e:
            le = ls
            while le < e and data[le] != 10:
                le += 1
            a = ls
            while a < le:
                cp, w = _decode(data, a)
                if not space_t[cp]:
                    break
                a += w
            b = le
            while b > a:
                q = b - 1
                while (data[q] & 0xC0) == 0x80:
                    q -= 1
                cp, w = _decode(data, q)
                if not space_t[cp]:
                    break
                b = q
            if b > a:
                if nl == cap:
                    cap *= 2
                    hs2 = np.empty(cap, np.uint64)
                    st2 = np.empty(cap, np.int64)
                    en2 = np.empty(cap, np.int64)
                    hs2[:nl] = hs[:nl]
                    st2[:nl] = starts[:nl]
                    en2[:nl] = ends[:nl]
                    hs, starts, ends = hs2, st2, en2
                hs[nl] = _line_hash(data, a, b)
                starts[nl] = a
                ends[nl] = b
                nl += 1
            ls = le + 1
        if nl == 0:
            dup[d] = 0.0
        else:
            dup[d] = 1.0 - _distinct_lines(data, hs, starts, ends, nl) / nl


def cheap_signals(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray, np.ndarray]:
    """(chars, dup_line_share, longest_run, alnum_share) of every text of a string column
    (a null text counts as empty), equal to clean.py's functions on each str."""
    col = combine(col)
    if pa.types.is_large_string(col.type):
        col = col.cast(pa.string())
    n = len(col)
    chars = np.zeros(n, np.int64)
    run = np.zeros(n, np.int64)
    dup = np.zeros(n, np.float64)
    alnum = np.zeros(n, np.float64)
    if n == 0:
        return chars, dup, run, alnum
    bufs = col.buffers()
    offsets = np.frombuffer(bufs[1], np.int32)[col.offset:col.offset + n + 1].astype(np.int64)
    data = (np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None
            else np.zeros(0, np.uint8))
    valid = to_numpy(col.is_valid())
    alnum_t, space_t = tables()
    _scan(data, offsets, valid, alnum_t, space_t, chars, dup, run, alnum)
    return chars, dup, run, alnum
