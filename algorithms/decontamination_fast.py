"""algorithms/decontamination.py's matched_ngrams for a whole batch, compiled.

    from algorithms.decontamination_fast import matched_ngrams
    counts = matched_ngrams(batch.column("text"), index)    # np.int64, one a document

gives, for every document of a string column (a null text counts as empty), exactly
decontamination.matched_ngrams(text, index):

- normalise() is the readable one's, with the accents dropped through one translate
  table (and skipped for ASCII text), all of it str methods in C;
- the normalised texts are cut into words by algorithms/words_fast.py (words.py's words);
- each word's FNV-1a hash, then the n-gram polynomial rolled along the document, one
  multiply and add a position (decontamination.ngram_hash gives the same 64 bits);
- each n-gram hash is looked up in a bitmap of 2**25 bits first (almost every n-gram of a
  training document misses there, after one memory access), then in the sorted hashes.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from . import decontamination as D
from .jit import njit
from .kernels import utf8_char
from .words_fast import tables, word_spans

BITS = 25   # the bitmap's size: 2**25 bits, 4 MB


@lru_cache(None)
def _marks() -> dict[int, None]:
    """Every combining mark (Mn) -> deleted, for str.translate."""
    return {c: None for c in range(0x110000) if unicodedata.category(chr(c)) == "Mn"}


def normalise(text: str) -> str:
    """decontamination.normalise, the same string (tests/test_decontamination.py)."""
    text = D.NUMBERS.sub("0", text.lower()).translate(D.PUNCT_TO_SPACE)
    text = " ".join(text.split())
    if not text.isascii():
        text = unicodedata.normalize("NFD", text).translate(_marks())
    return text.strip()


def bitmap(hashes: np.ndarray) -> np.ndarray:
    """The bitmap of the index: bit (h >> (64 - BITS)) set for each of its hashes."""
    bits = np.zeros(1 << (BITS - 3), np.uint8)
    top = (hashes >> np.uint64(64 - BITS)).astype(np.int64)
    np.bitwise_or.at(bits, top >> 3, (1 << (top & 7)).astype(np.uint8))
    return bits


_LOADED: dict[str, tuple[D.Index, np.ndarray]] = {}


def loaded(folder: str) -> tuple[D.Index, np.ndarray]:
    """The index kept in `folder` (index.npz), and its bitmap: read once per process."""
    if folder not in _LOADED:
        index = D.load_index(Path(folder) / "index.npz")
        _LOADED[folder] = (index, bitmap(index.hashes))
    return _LOADED[folder]


def matched_ngrams(col: pa.Array | pa.ChunkedArray, index: D.Index,
                   bits: np.ndarray | None = None) -> np.ndarray:
    """For every text of a string column: how many of its n-grams are in the index (bits:
    bitmap(index.hashes), made once by a caller that measures many batches)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    texts = pa.array([normalise(t) if t is not None else "" for t in col.to_pylist()],
                     pa.string())
    n_docs = len(texts)
    out = np.zeros(n_docs, np.int64)
    if n_docs == 0 or len(index.hashes) == 0:
        return out
    bufs = texts.buffers()
    offsets = np.frombuffer(bufs[1], np.int32)[:n_docs + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    maxlen = int(np.diff(offsets).max())
    F, T = tables()
    _count(data, offsets, F, T, index.n, index.hashes,
           bitmap(index.hashes) if bits is None else bits, out, maxlen)
    return out


@njit(cache=True)
def _count(data, offsets, F, T, n, hashes, bits, out, maxlen):
    cap = maxlen + 2
    cps = np.empty(cap, np.int32)
    ts, te, sufs = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    cand, tmp_s, tmp_e = (np.empty(cap * 12, np.int64), np.empty(cap, np.int64),
                          np.empty(cap, np.int64))
    th = np.empty(cap, np.uint64)
    base = np.uint64(D.BASE)
    top = np.uint64(1)                       # BASE ** (n - 1)
    for _ in range(n - 1):
        top *= base
    shift = np.uint64(64 - BITS)
    m = hashes.shape[0]
    for d in range(offsets.shape[0] - 1):
        L = 0
        p = offsets[d]
        while p < offsets[d + 1]:
            c, w = utf8_char(data, p)
            cps[L] = c
            L += 1
            p += w
        nw = word_spans(cps, 0, L, F, T, ts, te, sufs, cand, tmp_s, tmp_e)
        if nw < n:
            continue
        for i in range(nw):                  # each word's FNV-1a of its code points
            h = np.uint64(D.FNV_OFFSET)
            for q in range(ts[i], te[i]):
                h = (h ^ np.uint64(cps[q])) * np.uint64(D.FNV_PRIME)
            th[i] = h
        h = np.uint64(0)
        for i in range(n):
            h = h * base + th[i]
        count = 0
        for i in range(nw - n + 1):
            if i:
                h = (h - th[i - 1] * top) * base + th[i + n - 1]
            b = np.int64(h >> shift)
            if bits[b >> 3] & (1 << (b & 7)):
                lo, hi = 0, m                # then the sorted hashes
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if hashes[mid] < h:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < m and hashes[lo] == h:
                    count += 1
        out[d] = count
