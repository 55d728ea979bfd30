"""Step 3b (tutorial sections 3.4 to 3.6): remove near-duplicates with MinHash and LSH.

    python dedup_minhash.py                      # data/dedup_exact -> data/dedup
    python dedup_minhash.py --threshold 0.85 --workers 8
    python dedup_minhash.py --bands 16 --rows 8 --num-perm 128 --ngram 5

What it does, in the tutorial's words:
  3.4  Each document becomes the set of its 5-character shingles (on the same normalised
       text as dedup_exact.py), compressed to a signature of k=128 minimum hash values.
       Two signatures agree in a position with probability equal to the Jaccard
       similarity of the two shingle sets.
  3.5  LSH: the signature is cut into b=16 bands of r=8 rows; two documents that agree
       on a whole band land in the same bucket and become a candidate pair, with
       probability P = 1 - (1 - s^r)^b. Only candidates are compared: a candidate is a
       duplicate only if its signatures agree in at least --threshold (0.8) of all 128
       positions. Short character shingles without this check let through about 5%
       false pairs; the rejected candidates are counted and reported.
  3.6  Duplicates are joined into connected components (union-find): A~B and B~C puts
       A, B and C in one cluster even when A and C differ more. Each cluster keeps
       exactly one document, the first in corpus order (smallest shard, then row), so
       the result depends neither on --workers nor on how documents were split into tasks.

Phases (parallel ones run through the datatrove executor, tasks fixed by the data: units
of at most --task-mb MB of text, see pipeline/units.py):
  1. signatures  one task per unit -> _work/sig/XXXXX.npy (n x k uint32) and the band
                 hashes _work/band/XXXXX.npy (b x n uint64), streamed batch by batch
  2. buckets     one task per band: sort the band hashes (no dict of Python objects);
                 equal neighbours are candidate pairs -> _work/pairs/XXX.npy
  3. verify      driver: unique candidates, similarity over all k values, >= threshold
  4. cluster     driver: union-find over the verified pairs, root = smallest index
  5. filter      one task per unit: copy the kept rows -> part-XXXXX.parquet

Reruns are cheap: the signatures, the band hashes and the candidate pairs are kept in
the output (signatures/, bands/, candidates/; --no-keep-signatures turns this off), keyed
by what they depend on (the input's fingerprint, --ngram, --num-perm, --seed; the bands
and candidates also --bands and --rows) and checked against their digests before use. The
candidates are kept with the number of signature positions each pair shares, so a rerun
with another --threshold redoes only the clusters and the filter; one with another
b x r and the same k also the buckets and verification. An output file whose rows do
not change is reused as it is. `--sweep threshold=0.7,0.8,0.9`
prints what each threshold would remove, and the pairs that change fate between
neighbouring values, without writing any output.

The signature kernel is compiled with numba (cached on disk after the first run; numba
itself is imported only when a kernel first runs, so a rerun that reuses every signature
never loads the compiler). Each
of the k hash functions is h_i(x) = ((a_i * x + b_i) mod 2^64) >> 32 on a 32-bit
shingle hash x (multiply-add-shift, a strongly universal family, no modulo), computed
exactly in 32-bit SIMD lanes that AVX2 has (see _min_hashes), once per distinct shingle
of a text: a repeat cannot change a minimum. The kernel also normalises the text. A
text shorter than the shingle length is one shingle (the whole text); a multi-megabyte
text is normalised and hashed in pieces, in bounded memory. Nothing is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import layout
from pipeline.arrays import from_numpy
from pipeline.errors import StageError, run_stage
from pipeline.executors import (add_executor_args, load_task_results, run_tasks, save_task_result,
                               start_pool_early)
from pipeline.kept_store import (cover_units, keep_whole, load_array, load_whole, read_verified,
                           replace_dir, write_index)
from pipeline.kept_store import entry as kept_entry
from pipeline.manifest import check_input
from pipeline.progress import task_progress
from pipeline.tables import human_bytes, markdown_table, pct, save_report, table
from pipeline.shards import link_or_copy, list_shards, write_table
from pipeline.staging import StageRun
from pipeline.units import (Unit, describe, fetch_rows, locate, plan_units, read_unit,
                            unit_offsets)
from dedup_exact import EXAMPLES, Picked, filter_phase, normalise, save_npy, shard_rows_of, snippet

WORK = "_work"
BATCH_ROWS = 2048
LONG_TEXT = 1 << 18          # characters; longer texts are normalised and hashed in pieces
ALL_PAIRS_MAX = 64           # buckets up to this size: every pair is a candidate
EMPTY = np.uint32(0xFFFFFFFF)


# --------------------------------------------------------------------------------------
# The MinHash kernels (numba). Shingle hashes are 64-bit FNV-1a + fmix64 cut to 32 bits;
# the k hash functions run in 32-bit lanes (see _min_hashes), so they vectorise on AVX2.
# --------------------------------------------------------------------------------------

class _Kernel:
    """A kernel numba has not compiled yet. Its first call compiles every kernel of this
    module (compile_kernels), then runs the compiled one. `py_func` is the Python code."""

    def __init__(self, fn, options: dict):
        self.py_func, self.options = fn, options

    def __call__(self, *args):
        compile_kernels()
        return globals()[self.py_func.__name__](*args)


def kernel(**options):
    """@kernel(...) is @numba.njit(...), applied on first use: importing numba takes 0.2 s,
    more than a rerun that reuses every signature spends on its own work."""
    return lambda fn: _Kernel(fn, options)


def compile_kernels() -> None:
    """Replace each kernel of this module by numba's compiled version (cached on disk).
    All at once, because a kernel calls others by their global names."""
    g = globals()
    lazy = [name for name, value in g.items() if isinstance(value, _Kernel)]
    if lazy:
        from numba import njit

        for name in lazy:
            g[name] = njit(**g[name].options)(g[name].py_func)


BLOCK = 512                  # shingles hashed together; the k functions run on 1-2 blocks
SEEN_SLOTS = 1 << 14         # the table of a text's shingle hashes seen so far: at most 64 KB
SPECIAL = np.uint32(0xFFFFFFFF)   # in _char_map: a character left to normalise()
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
LOW32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)


@kernel(cache=True, inline="always")
def _fmix64(h):
    """MurmurHash3's finaliser: spreads every input bit over all 64 output bits."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@kernel(cache=True, inline="always")
def _shingle_hash(cp, start, stop):
    """32-bit hash of the code points cp[start:stop] (FNV-1a style, then fmix64)."""
    h = FNV_OFFSET
    for q in range(start, stop):
        h = (h ^ np.uint64(cp[q])) * FNV_PRIME
    h ^= np.uint64(stop - start)
    return _fmix64(h) >> SHIFT32


@kernel(cache=True)
def _hash_shingles(cp, start, count, n, hs):
    """hs[j] = _shingle_hash(cp, start + j, start + j + n) for j < count, computed one
    character position at a time for all count shingles: independent multiplies that
    pipeline, instead of one shingle's chain of n dependent ones."""
    for j in range(count):
        hs[j] = FNV_OFFSET
    for q in range(n):
        for j in range(count):
            hs[j] = (hs[j] ^ np.uint64(cp[start + j + q])) * FNV_PRIME
    for j in range(count):
        hs[j] = _fmix64(hs[j] ^ np.uint64(n)) >> SHIFT32


@kernel(cache=True)
def _split_multipliers(a):
    """a_i = a_hi * 2^32 + a_lo -> the uint32 arrays (a_lo, a_hi)."""
    a_lo = np.empty(a.shape[0], np.uint32)
    a_hi = np.empty(a.shape[0], np.uint32)
    for i in range(a.shape[0]):
        a_lo[i] = np.uint32(a[i] & LOW32)
        a_hi[i] = np.uint32(a[i] >> SHIFT32)
    return a_lo, a_hi


@kernel(cache=True)
def _min_hashes(xs, count, a_lo, a_hi, b, acc):
    """acc[i] = min(acc[i], h_i(x)) over x in xs[:count], h_i(x) = ((a_i*x + b_i) mod 2^64) >> 32.

    For x < 2^32 and a_i = a_hi * 2^32 + a_lo, exactly:
        h_i(x) = (((a_lo*x + b_i) mod 2^64) >> 32  +  a_hi*x) mod 2^32,
    since a_hi*x*2^32 only adds to bits 32..63. That is one 32x32->64 multiply
    (vpmuludq), one 64-bit add and one 32-bit multiply, add and min (vpmulld, vpaddd,
    vpminud): all of them AVX2 instructions, where the uint64 formula needs the
    AVX-512-only vpmullq and vpminuq. The loop over x is the vectorised one.
    """
    for i in range(a_lo.shape[0]):
        lo, hi, add = np.uint64(a_lo[i]), a_hi[i], b[i]
        m = acc[i]
        for j in range(count):
            x = xs[j]
            v = np.uint32(np.uint32((lo * np.uint64(x) + add) >> SHIFT32) + np.uint32(hi * x))
            m = min(m, v)
        acc[i] = m


@kernel(cache=True)
def _clear_seen(seen, shingles):
    """Empty the first slots of the seen-table, about 4 per shingle; returns the slot mask."""
    size = 64
    while size < 4 * shingles and size < seen.shape[0]:
        size *= 2
    seen[:size] = 0
    return np.uint32(size - 1)


@kernel(cache=True)
def _keep_unseen(hs, count, seen, mask, xs, kept):
    """Append to xs[kept:] the hashes of hs[:count] not seen before in this text; returns
    the new kept. The table is direct-mapped and lossy: a collision only lets a repeated
    hash through again, which cannot change a minimum (slot value 0 = empty)."""
    for j in range(count):
        x = np.uint32(hs[j])
        slot = x & mask
        old = seen[slot]
        seen[slot] = x
        xs[kept] = x
        kept += (old != x) | (x == 0)
    return kept


@kernel(cache=True)
def _sign_text(cp, start, stop, n, a_lo, a_hi, b, acc, hs, xs, seen):
    """acc = min(acc, MinHash of the normalised code points cp[start:stop]).

    A text shorter than n characters is a single shingle: the whole text. Otherwise its
    shingles are hashed BLOCK at a time, repeats dropped, and the k functions applied to
    the distinct hashes collected so far (xs holds 2 * BLOCK)."""
    if stop - start < n:
        xs[0] = np.uint32(_shingle_hash(cp, start, stop))
        _min_hashes(xs, 1, a_lo, a_hi, b, acc)
        return
    end = stop - n + 1
    mask = _clear_seen(seen, end - start)
    kept = 0
    for p in range(start, end, BLOCK):
        count = min(BLOCK, end - p)
        _hash_shingles(cp, p, count, n, hs)
        kept = _keep_unseen(hs, count, seen, mask, xs, kept)
        if kept > BLOCK:
            _min_hashes(xs, kept, a_lo, a_hi, b, acc)
            kept = 0
    _min_hashes(xs, kept, a_lo, a_hi, b, acc)


@kernel(cache=True)
def _normalise_into(cp, start, stop, char_map, buf):
    """buf[:m] = normalise(text) for the code points cp[start:stop]; returns m, or -1 if
    the text holds a character _char_map cannot lower alone (then normalise() must).

    Branch-free: every whitespace character maps to a space, and a space is written only
    after a non-space, so runs collapse and leading spaces vanish; a trailing one is cut."""
    m = 0
    prev = np.uint32(32)
    special = False
    for p in range(start, stop):
        c = char_map[cp[p]]
        buf[m] = c
        m += (c != 32) | (prev != 32)
        prev = c
        special |= c == SPECIAL
    if m > 0 and buf[m - 1] == 32:
        m -= 1
    return -1 if special else m


@kernel(cache=True)
def _sig_texts(cp, offsets, n, a, b, out):
    """Signatures of normalised texts given as code points cp[offsets[d]:offsets[d+1]].

    out (docs x k, uint32) holds running minima, so a long text can be fed in pieces.
    """
    a_lo, a_hi = _split_multipliers(a)
    hs = np.empty(BLOCK, np.uint64)
    xs = np.empty(2 * BLOCK, np.uint32)
    seen = np.empty(SEEN_SLOTS, np.uint32)
    for d in range(offsets.shape[0] - 1):
        _sign_text(cp, offsets[d], offsets[d + 1], n, a_lo, a_hi, b, out[d], hs, xs, seen)


@kernel(cache=True)
def _sig_raw_texts(cp, offsets, n, a, b, char_map, out, lens):
    """Signatures of raw texts: each is normalised here first (see _normalise_into).

    lens[d] = length of the normalised text d, or -1 if it was left to normalise()
    (its row of out untouched)."""
    a_lo, a_hi = _split_multipliers(a)
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    buf = np.empty(longest, np.uint32)
    hs = np.empty(BLOCK, np.uint64)
    xs = np.empty(2 * BLOCK, np.uint32)
    seen = np.empty(SEEN_SLOTS, np.uint32)
    for d in range(offsets.shape[0] - 1):
        m = _normalise_into(cp, offsets[d], offsets[d + 1], char_map, buf)
        lens[d] = m
        if m >= 0:
            _sign_text(buf, 0, m, n, a_lo, a_hi, b, out[d], hs, xs, seen)


@kernel(cache=True)
def _sig_hashed(x, offsets, a, b, out):
    """Signatures of sets given directly as 32-bit shingle hashes (used by the demo's
    simulation of pairs with an exact Jaccard similarity)."""
    a_lo, a_hi = _split_multipliers(a)
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        _min_hashes(x[s:e], e - s, a_lo, a_hi, b, out[d])


@kernel(cache=True)
def _band_hashes(sig, bands, rows, out):
    """out[j, d] = 64-bit hash of band j (rows r values) of signature d."""
    for d in range(sig.shape[0]):
        for j in range(bands):
            h = np.uint64(0x9E3779B97F4A7C15) * np.uint64(j + 1)
            for t in range(j * rows, (j + 1) * rows):
                h = _fmix64(h ^ np.uint64(sig[d, t]))
            out[j, d] = h


class MinHasher:
    """MinHash signatures of k hash functions over n-character shingles (section 3.4).

    The only MinHash implementation in the project: dedup_minhash.py, minhash_demo.py and
    the benchmark all use it. The parameters (a_i odd, b_i) come from `seed`, and the
    first k of them do not depend on num_perm, so MinHasher(16) is a prefix of
    MinHasher(256) with the same seed.
    """

    def __init__(self, num_perm: int = 128, ngram: int = 5, seed: int = 1):
        if num_perm < 1 or ngram < 1:
            raise ValueError("num_perm and ngram must be positive")
        self.k, self.n, self.seed = num_perm, ngram, seed
        ab = np.random.default_rng(seed).integers(0, 2**64, size=(num_perm, 2), dtype=np.uint64,
                                                  endpoint=False)
        self.a = ab[:, 0] | np.uint64(1)   # odd multipliers
        self.b = ab[:, 1].copy()

    def empty(self, docs: int) -> np.ndarray:
        return np.full((docs, self.k), EMPTY, dtype=np.uint32)

    def signatures(self, texts: list[str | None], normalised: bool = False) -> np.ndarray:
        """(len(texts), k) uint32 signatures; texts are normalised first unless told not."""
        return self.signatures_and_lengths(texts, normalised)[0]

    def signatures_and_lengths(self, texts: list[str | None],
                               normalised: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Signatures and the length (characters) of each normalised text."""
        out = self.empty(len(texts))
        lens = np.zeros(len(texts), dtype=np.int64)
        short: list[int] = []
        for i, t in enumerate(texts):
            if t is not None and len(t) > LONG_TEXT:
                lens[i] = self._long(t, out[i:i + 1], normalised)
            else:
                short.append(i)
        if short and len(short) == len(texts):
            self._short([t or "" for t in texts], out, lens, normalised)
        elif short:
            sub, sub_lens = self.empty(len(short)), np.zeros(len(short), dtype=np.int64)
            self._short([texts[i] or "" for i in short], sub, sub_lens, normalised)
            out[short], lens[short] = sub, sub_lens
        return out, lens

    def signature(self, text: str, normalised: bool = False) -> np.ndarray:
        return self.signatures([text], normalised)[0]

    def _short(self, texts: list[str], out: np.ndarray, lens: np.ndarray,
               normalised: bool) -> None:
        """Texts up to LONG_TEXT characters, all in one kernel call: normalised there,
        except the rare text with a character whose lowercase needs str.lower()."""
        cp, off = _code_points(texts)
        if normalised:
            _sig_texts(cp, off, self.n, self.a, self.b, out)
            lens[:] = np.diff(off)
            return
        _sig_raw_texts(cp, off, self.n, self.a, self.b, _char_map(), out, lens)
        left = np.nonzero(lens < 0)[0]
        if len(left):
            cp, off = _code_points([normalise(texts[i]) for i in left])
            sub = self.empty(len(left))
            _sig_texts(cp, off, self.n, self.a, self.b, sub)
            out[left], lens[left] = sub, np.diff(off)

    def _long(self, text: str, out: np.ndarray, normalised: bool) -> int:
        """A long text, piece by piece: the last n-1 characters of each piece are carried
        over, so every shingle that spans two pieces is still hashed. Returns the length
        of the normalised text."""
        carry, ran, length = "", False, 0
        pieces = _raw_pieces(text) if normalised else normalised_pieces(text)
        for piece in pieces:
            length += len(piece)
            buf = carry + piece
            if len(buf) >= self.n:
                cp, off = _code_points([buf])
                _sig_texts(cp, off, self.n, self.a, self.b, out)
                ran = True
                carry = buf[len(buf) - (self.n - 1):] if self.n > 1 else ""
            else:
                carry = buf
        if not ran:  # the whole normalised text is shorter than one shingle
            cp, off = _code_points([carry])
            _sig_texts(cp, off, self.n, self.a, self.b, out)
        return length

    def signatures_of_hashed_sets(self, sets: list[np.ndarray]) -> np.ndarray:
        """Signatures of sets of 32-bit shingle hashes (the simulation in minhash_demo.py)."""
        lens = np.array([len(s) for s in sets], dtype=np.int64)
        off = np.zeros(len(sets) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        x = np.concatenate(sets).astype(np.uint32) if sets else np.zeros(0, np.uint32)
        out = self.empty(len(sets))
        _sig_hashed(x, off, self.a, self.b, out)
        return out


def _code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts -> one uint32 array of Unicode code points, and the offsets of each text."""
    off = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)), out=off[1:])
    return np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32), off


_CHAR_MAP: np.ndarray | None = None


def _char_map() -> np.ndarray:
    """Code point -> what normalise() makes of it, for the kernel (built once, 4.4 MB).

    Whitespace (exactly the characters str.split() splits on) -> 32, a space; any other
    character -> its str.lower() when that is one character not depending on context;
    SPECIAL for the rest, which normalise() handles: capital sigma (its lowercase
    depends on the next letter) and the few characters lowering to two (U+0130).
    """
    global _CHAR_MAP
    if _CHAR_MAP is None:
        everything = np.arange(0x110000, dtype=np.uint32).tobytes().decode("utf-32-le",
                                                                            "surrogatepass")
        special = "\u03a3\u0130"
        lower = everything.translate({ord(c): "?" for c in special}).lower()
        if len(lower) == len(everything):
            m = np.frombuffer(lower.encode("utf-32-le", "surrogatepass"), np.uint32).copy()
        else:   # another character lowers to several: find them one by one
            m = np.array([ord(low) if len(low) == 1 else SPECIAL
                          for low in (c.lower() for c in everything)], dtype=np.uint32)
        m[[ord(c) for c in special]] = SPECIAL
        m[m == 32] = SPECIAL                 # a non-space lowering to a space (none does)
        m[[s.start() for s in _WS.finditer(everything)]] = 32
        _CHAR_MAP = m
    return _CHAR_MAP


def _raw_pieces(text: str, size: int = LONG_TEXT):
    for i in range(0, len(text), size):
        yield text[i:i + size]


_WS = re.compile(r"\s")  # for str patterns, exactly the characters str.split() splits on


def normalised_pieces(text: str, size: int = LONG_TEXT):
    """normalise(text), yielded in pieces of about `size` characters (bounded memory).

    "".join(normalised_pieces(t)) == normalise(t). Cuts go at the first whitespace
    after `size` characters (searched for up to `size` more), which keeps every word
    whole, including the context str.lower() looks at for a Greek final sigma. A run of
    more than `size` characters without whitespace is cut inside; the halves are joined
    back without a space (the only possible difference: a capital sigma right at such a
    cut may lower to σ instead of ς).
    """
    emitted = need_space = False
    i, n = 0, len(text)
    while i < n:
        j = min(i + size, n)
        if j < n:
            m = _WS.search(text, j, min(n, j + size))
            if m:
                j = m.start()
        raw, i = text[i:j], j
        words = raw.split()
        if not words:
            need_space = True
            continue
        body = " ".join(words).lower()
        if emitted and (need_space or raw[0].isspace()):
            body = " " + body
        yield body
        emitted, need_space = True, raw[-1].isspace()


def similarity(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """MinHash estimate of Jaccard: the fraction of positions where two signatures agree."""
    return (np.asarray(sig_a) == np.asarray(sig_b)).mean(axis=-1)


def band_hashes(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(bands, docs) uint64: one hash per band of each signature (section 3.5)."""
    if sig.shape[1] != bands * rows:
        raise ValueError(f"signature length {sig.shape[1]} != bands {bands} x rows {rows}")
    out = np.empty((bands, sig.shape[0]), dtype=np.uint64)
    _band_hashes(np.ascontiguousarray(sig), bands, rows, out)
    return out


def candidate_probability(s, bands: int, rows: int):
    """P = 1 - (1 - s^r)^b: the chance that a pair of similarity s shares a band."""
    return 1.0 - (1.0 - np.asarray(s, dtype=float) ** rows) ** bands


# --------------------------------------------------------------------------------------
# LSH buckets by sorting, and union-find.
# --------------------------------------------------------------------------------------

@kernel(cache=True)
def _bucket_pairs_into(h, order, all_pairs_max, out, fill):
    """Count (fill=False) or write (fill=True) the candidate pairs; returns the count."""
    n = order.shape[0]
    cnt = 0
    s = 0
    while s < n:
        e = s + 1
        while e < n and h[order[e]] == h[order[s]]:
            e += 1
        m = e - s
        if m > 1:
            if m <= all_pairs_max:
                for p in range(s, e):
                    for q in range(p + 1, e):
                        if fill:
                            out[cnt, 0] = order[p]
                            out[cnt, 1] = order[q]
                        cnt += 1
            else:
                for q in range(s + 1, e):
                    if fill:
                        out[cnt, 0] = order[s]
                        out[cnt, 1] = order[q]
                    cnt += 1
                    if q - 1 > s:
                        if fill:
                            out[cnt, 0] = order[q - 1]
                            out[cnt, 1] = order[q]
                        cnt += 1
        s = e
    return cnt


def bucket_pairs(h: np.ndarray, all_pairs_max: int = ALL_PAIRS_MAX) -> np.ndarray:
    """Candidate pairs (i < j) of documents whose band hashes h are equal.

    Buckets are found by a stable sort, not a dict: equal hashes become neighbours and
    ties stay in corpus order. A bucket of m <= all_pairs_max documents yields all its
    pairs, so verification sees every edge; a bigger bucket (templated pages, say)
    yields each member paired with the bucket's first member and with its predecessor,
    to stay linear.
    """
    order = np.argsort(h, kind="stable")
    dummy = np.empty((0, 2), dtype=np.int64)
    n = _bucket_pairs_into(h, order, all_pairs_max, dummy, False)
    out = np.empty((n, 2), dtype=np.int64)
    _bucket_pairs_into(h, order, all_pairs_max, out, True)
    return out


def union_find(n: int, edges: np.ndarray) -> np.ndarray:
    """Connected components of n nodes; each node's root is its component's smallest index.

    In numpy, by hooking and pointer jumping: every root takes the smallest root across
    its edges, then every node follows parents until it reaches a root; repeat until no
    root changes. Roots only decrease and always belong to the component, so the fixed
    point is each component's smallest index. A few rounds for real clusters; no
    compiler to load (a rerun that reuses everything else never imports one)."""
    out = np.arange(n, dtype=np.int64)
    if len(edges) == 0:
        return out
    # only the documents on an edge take part, renumbered in order (so the smallest
    # local index is the smallest document index)
    nodes, local = np.unique(np.asarray(edges, dtype=np.int64), return_inverse=True)
    local = local.reshape(-1, 2)
    a, b = local[:, 0], local[:, 1]
    root = np.arange(len(nodes), dtype=np.int64)
    while True:
        ra, rb = root[a], root[b]
        m = np.minimum(ra, rb)
        new = root.copy()
        np.minimum.at(new, ra, m)
        np.minimum.at(new, rb, m)
        while True:   # pointer jumping: every node straight to its root
            nxt = new[new]
            if np.array_equal(nxt, new):
                break
            new = nxt
        if np.array_equal(new, root):
            out[nodes] = nodes[root]
            return out
        root = new


# --------------------------------------------------------------------------------------
# Phase 1: signatures and band hashes of one unit, streamed to disk batch by batch, or
# taken from the ones a previous run kept (signatures/, bands/ in the output).
# --------------------------------------------------------------------------------------

SIG_VERSION = 1   # bump when the hash family or the normalisation changes


def signature_deps(input_fingerprint: str, ngram: int, num_perm: int, seed: int) -> dict:
    """Everything a signature depends on: a change to any of these invalidates the kept ones."""
    return {"version": SIG_VERSION, "input_fingerprint": input_fingerprint, "ngram": ngram,
            "num_perm": num_perm, "seed": seed}


def band_deps(sig_deps: dict, bands: int, rows: int) -> dict:
    return {**sig_deps, "bands": bands, "rows": rows}


def _save_or_link(arr: np.ndarray, pieces: list[dict], dst: Path) -> None:
    """Write a reused array into the staging folder; a whole kept file is hard-linked."""
    if len(pieces) == 1 and pieces[0]["whole"]:
        link_or_copy(pieces[0]["path"], dst)
    else:
        save_npy(dst, arr)


def compute_signatures(unit: Unit, mh: "MinHasher", sig_path: Path) -> tuple[int, int]:
    """Sign every document of a unit into sig_path (rows x k uint32), batch by batch.
    Returns (text bytes, texts shorter than one shingle)."""
    tmp = sig_path.with_name(sig_path.name.replace(".npy", ".tmp.npy"))
    sig = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint32, shape=(unit.rows, mh.k))
    start = nbytes = short = 0
    prog = task_progress()
    for batch in read_unit(unit, columns=["text"], batch_rows=BATCH_ROWS):
        texts = batch.column(0).to_pylist()
        s, lens = mh.signatures_and_lengths(texts)
        sig[start:start + len(texts)] = s
        start += len(texts)
        b = int(pc.sum(pc.binary_length(batch.column(0))).as_py() or 0)
        nbytes += b
        short += int((lens < mh.n).sum())
        prog.add(len(texts), b)
    if start != unit.rows:
        raise StageError(f"{unit.shard}: read {start} rows of a unit, footer says {unit.rows}")
    sig.flush()
    del sig
    tmp.replace(sig_path)
    return nbytes, short


def signature_task(rank: int, world_size: int, units: list[dict], staging: str,
                   num_perm: int, ngram: int, seed: int, bands: int, band_rows: int,
                   sig_sources: list, band_sources: list) -> None:
    """Task `rank`: the signatures (_work/sig/RANK.npy, rows x k) and band hashes
    (_work/band/RANK.npy, b x rows) of unit `rank`; kept ones are reused when their
    digests check out, and then the unit's text is not read at all."""
    unit = Unit(**units[rank])
    work = Path(staging) / WORK
    for d in ("sig", "band"):
        (work / d).mkdir(parents=True, exist_ok=True)
    sig_path, band_path = work / "sig" / f"{rank:05d}.npy", work / "band" / f"{rank:05d}.npy"
    sig, pieces, notes = load_array(sig_sources[rank], unit.rows)
    if sig is not None:  # whole kept files only: they carry the unit's byte counts
        _save_or_link(sig, pieces, sig_path)
        nbytes = sum(p["extra"]["bytes"] for p in pieces)
        short = sum(p["extra"]["short"] for p in pieces)
        task_progress().add(unit.rows, nbytes)
    else:
        nbytes, short = compute_signatures(unit, MinHasher(num_perm, ngram, seed), sig_path)
        sig = np.load(sig_path, mmap_mode="r")
    band, bpieces, bnotes = load_array(band_sources[rank], unit.rows, axis=1)
    if band is not None:
        _save_or_link(band, bpieces, band_path)
    else:
        save_npy(band_path, band_hashes(np.asarray(sig), bands, band_rows))
    save_task_result(staging, "signatures", rank, {
        "docs": unit.rows, "bytes": nbytes, "short": short,
        "signatures_reused": bool(pieces), "bands_reused": bool(bpieces),
        "notes": notes + bnotes,
        "sig": kept_entry(sig_path, unit.shard, unit.row_start, unit.rows, bytes=nbytes,
                          short=short),
        "band": kept_entry(band_path, unit.shard, unit.row_start, unit.rows)})


def kept_sources(output: Path, deps_sig: dict, deps_band: dict, units: list[Unit]
                 ) -> tuple[list, list, list[str]]:
    """For every unit, the kept signature and band files that cover it (the output's own,
    then a sweep's side store), and a line per store on whether it is used."""
    sig_src: list[list] = [[] for _ in units]
    band_src: list[list] = [[] for _ in units]
    notes = []
    for where in (output, side_store(output)):
        for name, deps, src in (("signatures", deps_sig, sig_src), ("bands", deps_band, band_src)):
            # whole files only (the same cut into units): they carry the unit's counts
            cover, line = cover_units(where / name, deps, units, f"kept {name}", whole_only=True)
            if line:
                notes.append(line)
            for s, pieces in zip(src, cover):
                if pieces is not None:
                    s.append(pieces)
    return sig_src, band_src, notes


def side_store(output: Path) -> Path:
    """Signatures a sweep computed when no run had kept them: beside the output, hidden."""
    return output.parent / f".{output.name}.signatures"


def keep_store(work: Path, dest: Path, results: list[dict], deps_sig: dict,
               deps_band: dict, band_pairs: int) -> dict:
    """Move the signature and band files, and the candidate pairs, into `dest` as three
    kept stores; return what the manifest records (dependencies, files, bytes on disk)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, d, key, deps in (("signatures", "sig", "sig", deps_sig),
                               ("bands", "band", "band", deps_band)):
        target = dest / name
        shutil.rmtree(target, ignore_errors=True)
        os.replace(work / d, target)
        out[name] = write_index(target, deps, [r[key] for r in results])
    target = dest / "candidates"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    os.replace(work / "candidates.npy", target / "pairs.npy")
    out["candidates"] = keep_whole(target, candidate_deps(deps_band), "pairs.npy",
                                   band_pairs=int(band_pairs))
    out["bytes"] = sum(out[n]["bytes"] for n in ("signatures", "bands", "candidates"))
    return out


# --------------------------------------------------------------------------------------
# Phase 2: one band's buckets, grouped by sorting.
# --------------------------------------------------------------------------------------

def bucket_task(rank: int, world_size: int, units: int, staging: str) -> None:
    work = Path(staging) / WORK
    h = np.concatenate([np.load(work / "band" / f"{s:05d}.npy", mmap_mode="r")[rank]
                        for s in range(units)])
    pairs = bucket_pairs(h)
    save_npy(work / "pairs" / f"{rank:03d}.npy", pairs)
    save_task_result(staging, "buckets", rank, {"pairs": int(len(pairs))})


# --------------------------------------------------------------------------------------
# Phase 3: verify candidates against all k values.
# --------------------------------------------------------------------------------------

class Signatures:
    """Random access to the per-unit signature files by global document index."""

    def __init__(self, folder: Path, tasks: int, offsets: np.ndarray):
        self.mm = [np.load(folder / f"{s:05d}.npy", mmap_mode="r") for s in range(tasks)]
        self.offsets = offsets

    def get(self, gidx: np.ndarray) -> np.ndarray:
        gidx = np.asarray(gidx, dtype=np.int64)
        k = self.mm[0].shape[1] if self.mm else 0
        out = np.empty((len(gidx), k), dtype=np.uint32)
        unit, row = locate(self.offsets, gidx)
        for s in np.unique(unit):
            sel = unit == s
            out[sel] = self.mm[s][row[sel]]
        return out


def unique_pairs(pair_files: list[Path], n_docs: int) -> np.ndarray:
    """All candidate pairs from every band, each once, sorted."""
    keys = [np.load(f) for f in pair_files]
    keys = [p[:, 0] * n_docs + p[:, 1] for p in keys if len(p)]
    if not keys:
        return np.zeros((0, 2), np.int64)
    u = np.unique(np.concatenate(keys))
    return np.stack([u // n_docs, u % n_docs], axis=1)


def match_counts(pairs: np.ndarray, sigs: Signatures, chunk: int = 1 << 16) -> np.ndarray:
    """For each candidate, at how many of the k positions its two signatures agree.
    Pairs are compared `chunk` at a time: at most 2 x chunk x k x 4 bytes of signatures
    (64 MB at k = 128) are held, however many candidates there are."""
    out = np.empty(len(pairs), dtype=np.int64)
    for s in range(0, len(pairs), chunk):
        p = pairs[s:s + chunk]
        out[s:s + chunk] = (sigs.get(p[:, 0]) == sigs.get(p[:, 1])).sum(axis=1)
    return out


def verify(pairs: np.ndarray, sigs: Signatures, threshold: float, k: int,
           matches: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Similarity of each candidate over all k values (matches / k, exactly what
    similarity() gives); returns (sims, accepted mask, matches). Kept `matches` (a
    rerun's) are used as they are: a new threshold needs no signature at all."""
    if matches is None:
        matches = match_counts(pairs, sigs)
    sims = matches / k
    return sims, accepted(sims, threshold), matches


def accepted(sims: np.ndarray, threshold: float) -> np.ndarray:
    return sims >= threshold - 1e-12


def clusters(n_docs: int, pairs: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                       np.ndarray]:
    """(root of every document, removed documents, the document each was merged into)."""
    root = union_find(n_docs, np.ascontiguousarray(pairs[ok]))
    removed = np.nonzero(root != np.arange(n_docs))[0]
    return root, removed, root[removed]


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------

SIM_BINS = np.round(np.linspace(0.0, 1.0, 51), 4)   # verified-similarity histogram, 0.02 wide
CLUSTER_EXAMPLE_CHARS = 2000                         # text kept per member of an example cluster


def largest_clusters(root: np.ndarray, n: int = 5) -> list[tuple[int, int]]:
    """(kept index, size) of the n largest clusters, ties by corpus order."""
    removed = np.nonzero(root != np.arange(len(root)))[0]
    if len(removed) == 0:
        return []
    r, c = np.unique(root[removed], return_counts=True)
    order = np.lexsort((r, -c))[:n]
    return [(int(r[i]), int(c[i]) + 1) for i in order]


def cluster_size_counts(kept_of: np.ndarray) -> dict[str, int]:
    """{cluster size: how many clusters} over clusters of 2 or more documents."""
    if len(kept_of) == 0:
        return {}
    _, c = np.unique(kept_of, return_counts=True)
    sizes, n = np.unique(c + 1, return_counts=True)
    return {str(int(s)): int(k) for s, k in zip(sizes, n)}


class Shown(NamedTuple):
    """What the report shows whole: the largest clusters (kept index, size), three
    members of each (the kept one first), and the rows to read: those members, then the
    first removed documents."""
    clusters: list[tuple[int, int]]
    members: list[np.ndarray]
    rows: np.ndarray


def shown_rows(root: np.ndarray, removed: np.ndarray) -> Shown:
    clusters_ = largest_clusters(root)
    members_of = [np.nonzero(root == k)[0][:3] for k, _ in clusters_]
    rows = np.concatenate([*members_of, removed[:EXAMPLES]]).astype(np.int64)
    return Shown(clusters_, members_of, rows)


def report_picks(shown: Shown, removed, kept_of) -> dict[str, np.ndarray]:
    """The global rows whose id and text the report shows, picked by the filter tasks
    (dedup_exact.filter_phase), which read every row anyway."""
    return {"id": np.concatenate([removed, kept_of, shown.rows]), "text": shown.rows}


def report_rows(units, offsets, sigs, root, removed, kept_of, sims, shown: Shown,
                staging: Path) -> dict:
    """What the report shows from the input: report/removed.parquet (every removed
    document, its cluster's kept one and their similarity) and the ids and texts of the
    largest clusters and of a few removed documents (report_picks)."""
    rep = staging / "report"
    rep.mkdir(exist_ok=True)
    ex_n = min(EXAMPLES, len(removed))
    id_of = Picked(staging, "id")
    ids, kept_ids = id_of.at(removed), id_of.at(kept_of)
    shown_ids = id_of.at(shown.rows).to_pylist()
    shown_text = Picked(staging, "text").at(shown.rows).to_pylist()
    size = np.bincount(root, minlength=len(root))
    s, r = shard_rows_of(units, offsets, removed)
    ks, kr = shard_rows_of(units, offsets, kept_of)
    write_table(rep / "removed.parquet", pa.table({
        "id": ids, "kept_id": kept_ids, "similarity": from_numpy(sims, pa.float64()),
        "shard": s, "row": from_numpy(r, pa.int64()),
        "kept_shard": ks, "kept_row": from_numpy(kr, pa.int64()),
        "cluster_size": from_numpy(size[kept_of], pa.int64())}))

    lines, md_clusters, js_clusters = [], [], []
    at = 0
    for rank, ((k, sz), members) in enumerate(zip(shown.clusters, shown.members), 1):
        texts = shown_text[at:at + len(members)]
        mids = shown_ids[at:at + len(members)]
        at += len(members)
        msims = similarity(sigs.get(members), sigs.get([k] * len(members)))
        lines.append(f"cluster {rank}: {sz} documents, kept {mids[0]}")
        entry = {"kept_id": mids[0], "size": sz, "members": []}
        for i, (mid, t, sm) in enumerate(zip(mids, texts, msims)):
            tag = "kept   " if i == 0 else f"sim {sm:.2f}"
            lines.append(f"  {tag} {mid}: {snippet(t, 90)}")
            entry["members"].append({"id": mid, "similarity": round(float(sm), 4),
                                     "text": (t or "")[:CLUSTER_EXAMPLE_CHARS]})
        js_clusters.append(entry)
        md_clusters.append([mids[0], sz, snippet(texts[0], 100)])
    ex_text = shown_text[at:]
    examples = [{"id": ids[i].as_py(), "kept_id": kept_ids[i].as_py(),
                 "similarity": round(float(sims[i]), 4),
                 "text": snippet(ex_text[i])} for i in range(ex_n)]
    return {"lines": lines, "md_clusters": md_clusters, "js_clusters": js_clusters,
            "examples": examples, "cluster_sizes": cluster_size_counts(kept_of)}


def build_report(shown: dict, cand_sims, counts, staging: Path, config: dict) -> str:
    """The stage's tables (text, report/dedup_minhash_stats.{json,md}) from the counts and
    report_rows()' examples."""
    rep = staging / "report"
    lines, md_clusters, js_clusters = shown["lines"], shown["md_clusters"], shown["js_clusters"]
    examples = shown["examples"]
    c = counts
    rows = [["documents", c["docs_in"], c["docs_out"], pct(c["docs_out"], c["docs_in"])],
            ["bytes", human_bytes(c["bytes_in"]), human_bytes(c["bytes_out"]),
             pct(c["bytes_out"], c["bytes_in"])]]
    head = ["dedup_minhash", "before", "after", "kept"]
    lsh = [["band collisions (pairs, all bands)", c["band_pairs"]],
           ["candidate pairs (unique)", c["candidates"]],
           [f"rejected: similarity < {config['threshold']}", c["candidates_rejected"]],
           ["verified duplicate pairs", c["candidates"] - c["candidates_rejected"]],
           ["clusters (2+ documents)", c["clusters"]],
           ["removed: near_duplicate", c["removed"]["near_duplicate"]],
           [f"texts shorter than {config['ngram']} chars (one shingle)", c["short_texts"]]]
    text = table(head, rows) + "\n\n" + table(["LSH " + f"b={config['bands']} r={config['rows']}", "count"], lsh)
    if lines:
        text += "\n\nlargest clusters:\n" + "\n".join(lines)
    md = "# dedup_minhash\n\n" + markdown_table(head, rows) + "\n\n" + markdown_table(["LSH", "count"], lsh)
    if md_clusters:
        md += "\n\n## Largest clusters\n\n" + markdown_table(["kept id", "documents", "text"], md_clusters)
    if examples:
        md += "\n\n## Removed examples\n\n" + markdown_table(
            ["removed id", "kept id", "similarity", "text"],
            [[e["id"], e["kept_id"], f"{e['similarity']:.3f}", e["text"]] for e in examples])
    hist = np.histogram(np.clip(cand_sims, 0, 1), SIM_BINS)[0].tolist() if len(cand_sims) else []
    save_report(rep, "dedup_minhash_stats", {
        **c, "config": config, "largest_clusters": js_clusters, "examples": examples,
        "cluster_sizes": shown["cluster_sizes"],
        "candidate_similarity": {"bins": SIM_BINS.tolist(), "counts": hist,
                                 "threshold": config["threshold"]}}, md)
    return text


# --------------------------------------------------------------------------------------
# Sweeps: removals, clusters and rejections at several thresholds, from one set of
# candidates and their similarities; nothing written but a report.
# --------------------------------------------------------------------------------------

def sweep_thresholds(spec: str) -> list[float]:
    name, sep, values = spec.partition("=")
    if name.strip().replace("-", "_").removeprefix("__") != "threshold" or not sep:
        raise StageError(f"--sweep {spec!r}: dedup_minhash.py sweeps threshold=V1,V2,...")
    try:
        out = sorted({float(v) for v in values.split(",") if v.strip()})
    except ValueError:
        raise StageError(f"--sweep {spec!r}: thresholds must be numbers") from None
    if not out or not all(0.0 < v <= 1.0 for v in out):
        raise StageError(f"--sweep {spec!r}: thresholds must be in (0, 1]")
    return out


def sweep(n_docs: int, pairs: np.ndarray, sims: np.ndarray, thresholds: list[float],
          units, offsets, examples: int = 5) -> tuple[str, dict]:
    """Per threshold: removed documents, clusters, candidates rejected; for neighbouring
    thresholds, the pairs accepted by the lower and rejected by the higher one."""
    rows, data = [], {"docs_in": n_docs, "candidates": int(len(pairs)), "thresholds": [],
                      "changes": []}
    for t in thresholds:
        ok = accepted(sims, t)
        _, removed, kept_of = clusters(n_docs, pairs, ok)
        d = {"threshold": t, "removed": int(len(removed)),
             "clusters": int(len(np.unique(kept_of))), "rejected": int((~ok).sum())}
        data["thresholds"].append(d)
        rows.append([f"{t:g}", d["removed"], pct(d["removed"], n_docs), d["clusters"], d["rejected"]])
    lines = [f"sweep threshold ({n_docs:,} documents, {len(pairs):,} candidate pairs)",
             table(["threshold", "removed", "share", "clusters", "rejected"], rows), ""]
    for a, b in zip(thresholds, thresholds[1:]):
        between = np.flatnonzero(accepted(sims, a) & ~accepted(sims, b))
        order = between[np.argsort(-sims[between], kind="stable")][:examples]
        da = next(x for x in data["thresholds"] if x["threshold"] == a)
        db = next(x for x in data["thresholds"] if x["threshold"] == b)
        change = {"from": a, "to": b, "pairs": int(len(between)),
                  "documents": da["removed"] - db["removed"], "examples": []}
        lines.append(f"threshold {a:g} -> {b:g}: {change['documents']:,} documents change fate; "
                     f"{len(between):,} pairs merged at {a:g} but not at {b:g}")
        if len(order):
            ia, ib = pairs[order, 0], pairs[order, 1]
            ta, tb = fetch_rows(units, offsets, ia, "text"), fetch_rows(units, offsets, ib, "text")
            ida, idb = fetch_rows(units, offsets, ia, "id"), fetch_rows(units, offsets, ib, "id")
            for k in range(len(order)):
                e = {"id": ida[k], "other_id": idb[k], "similarity": round(float(sims[order[k]]), 4),
                     "text": snippet(ta[k], 300), "other_text": snippet(tb[k], 300)}
                change["examples"].append(e)
                lines.append(f"  sim {e['similarity']:.3f}: {e['id']} {snippet(ta[k], 60)!r}")
                lines.append(f"             {e['other_id']} {snippet(tb[k], 60)!r}")
        data["changes"].append(change)
        lines.append("")
    md = ["# dedup_minhash.py --sweep", "", markdown_table(
        ["threshold", "removed", "clusters", "rejected"],
        [[f"{d['threshold']:g}", d["removed"], d["clusters"], d["rejected"]]
         for d in data["thresholds"]]), ""]
    for ch in data["changes"]:
        md += [f"## threshold {ch['from']:g} -> {ch['to']:g}: {ch['documents']:,} documents "
               f"change fate ({ch['pairs']:,} pairs)", ""]
        if ch["examples"]:
            md += [markdown_table(["similarity", "id", "text", "other id", "other text"],
                                  [[f"{e['similarity']:.3f}", e["id"], snippet(e["text"], 120),
                                    e["other_id"], snippet(e["other_text"], 120)]
                                   for e in ch["examples"]]), ""]
    return "\n".join(lines).rstrip(), {**data, "markdown": "\n".join(md)}


# --------------------------------------------------------------------------------------

def check_args(args) -> None:
    if args.ngram < 1:
        raise StageError(f"--ngram {args.ngram}: must be at least 1")
    if args.num_perm < 1 or args.bands < 1 or args.rows < 1:
        raise StageError("--num-perm, --bands and --rows must be positive")
    if args.bands * args.rows != args.num_perm:
        raise StageError(f"--bands {args.bands} x --rows {args.rows} = {args.bands * args.rows}, "
                         f"but --num-perm is {args.num_perm}: LSH needs b*r == k")
    if not 0.0 < args.threshold <= 1.0:
        raise StageError(f"--threshold {args.threshold}: must be in (0, 1]")
    if args.workers < 1:
        raise StageError("--workers must be at least 1")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=str(layout.DEDUP_EXACT), help="default: data/dedup_exact")
    p.add_argument("--output", default=str(layout.DEDUP), help="default: data/dedup")
    p.add_argument("--ngram", type=int, default=5, help="shingle length in characters (default 5)")
    p.add_argument("--num-perm", type=int, default=128, help="k, hash functions (default 128)")
    p.add_argument("--bands", type=int, default=16, help="b, LSH bands (default 16)")
    p.add_argument("--rows", type=int, default=8, help="r, rows per band (default 8); b*r must be k")
    p.add_argument("--threshold", type=float, default=0.8,
                   help="a candidate pair is a duplicate if its signatures agree on at least "
                        "this fraction of the k values (default 0.8)")
    p.add_argument("--seed", type=int, default=1, help="seed of the hash functions (default 1)")
    p.add_argument("--sweep", default=None, metavar="threshold=V1,V2,...",
                   help="print removed documents, clusters and rejected candidates at each "
                        "threshold, and the pairs that change fate between neighbours; writes "
                        "no output, only report/sweep.{json,md}")
    p.add_argument("--no-keep-signatures", action="store_true",
                   help="do not keep signatures and band hashes in the output (a rerun with "
                        "another --threshold then recomputes them)")
    add_executor_args(p)
    args = p.parse_args(argv)
    check_args(args)
    return args


def link_kept(units: list[Unit], sig_src: list, band_src: list, work: Path) -> list[dict] | None:
    """When every unit's signatures and band hashes are kept (whole files), check their
    digests and hard-link them into _work/: the signature phase's results, made in this
    process in milliseconds per unit. None if any file fails its check (the phase then
    runs its tasks, which recompute what failed)."""
    if not (all(sig_src) and all(band_src)):
        return None
    for d in ("sig", "band"):
        (work / d).mkdir(parents=True, exist_ok=True)
    results = []
    for rank, u in enumerate(units):
        linked = {}
        for key, sources in (("sig", sig_src[rank]), ("band", band_src[rank])):
            pieces = sources[0]
            if len(pieces) != 1 or not pieces[0]["whole"] or read_verified(pieces[0]) is None:
                return None
            dst = work / key / f"{rank:05d}.npy"
            link_or_copy(pieces[0]["path"], dst)
            linked[key] = kept_entry(dst, u.shard, u.row_start, u.rows, record=pieces[0],
                                     **pieces[0]["extra"])
        extra = linked["sig"]
        results.append({"docs": u.rows, "bytes": extra["bytes"], "short": extra["short"],
                        "signatures_reused": True, "bands_reused": True, "notes": [],
                        **linked})
    return results


def signature_phase(run_parallel, units, offsets, args, staging: Path, sig_src, band_src,
                    timed=None) -> list[dict]:
    """Phase 1. When everything is kept, the driver only checks digests and links files
    (timed: the stage's phase timer); otherwise one task per unit."""
    with (timed or contextlib.nullcontext)("signatures"):
        got = link_kept(units, sig_src, band_src, staging / WORK)
    if got is not None:
        return got
    reused = all(sig_src) and all(band_src)
    run_parallel("signatures", signature_task, len(units), args, inline=reused,
                 total_docs=int(offsets[-1]), total_bytes=sum(u.text_bytes for u in units),
                 units=[u.to_dict() for u in units], staging=str(staging),
                 num_perm=args.num_perm, ngram=args.ngram, seed=args.seed, bands=args.bands,
                 band_rows=args.rows, sig_sources=sig_src, band_sources=band_src)
    return load_task_results(staging, "signatures", len(units))


def candidate_deps(deps_band: dict) -> dict:
    """What the candidates and their match counts depend on: the signatures and band
    hashes, and how a bucket is read."""
    return {**deps_band, "all_pairs_max": ALL_PAIRS_MAX}


def kept_candidates(output: Path, deps: dict) -> tuple[np.ndarray | None, int, list[str]]:
    """Candidates kept by an earlier run (the output's, then a sweep's side store) for
    exactly these band hashes and signatures: (rows of [doc a, doc b, matching positions],
    band collisions, notes); (None, 0, notes) if none."""
    notes = []
    for where in (output, side_store(output)):
        data, extra, why = load_whole(where / "candidates", deps)
        if data is not None:
            kept = np.load(io.BytesIO(data))
            if kept.ndim == 2 and kept.shape[1] == 3 and "band_pairs" in extra:
                notes.append(f"candidates and their similarities reused from "
                             f"{where / 'candidates'}: buckets and verification skipped")
                return kept, int(extra["band_pairs"]), notes
            why = "not a candidate list"
        if why != "none kept":
            notes.append(f"kept candidates in {where / 'candidates'} not used: {why}")
    return None, 0, notes


def keep_candidates(work: Path, pairs: np.ndarray, matches: np.ndarray) -> None:
    """Leave the verified candidates in _work/candidates.npy, for keep_store."""
    small = len(pairs) == 0 or int(pairs.max()) < 2**31   # 12 bytes a candidate, not 24
    save_npy(work / "candidates.npy",
             np.column_stack([pairs, matches]).astype(np.int32 if small else np.int64))


def candidates(run_parallel, units, offsets, args, staging: Path, output: Path,
               deps: dict) -> tuple[np.ndarray, int, np.ndarray | None]:
    """Phase 2 and the unique candidate pairs: (pairs, band collisions, their kept match
    counts or None). Candidates and their similarities depend only on the signatures and
    band hashes, so those kept for the same ones are reused: no buckets, no verification."""
    work = staging / WORK
    kept, band_pairs, notes = kept_candidates(output, deps)
    for line in notes:
        print(line, file=sys.stderr)
    if kept is not None:
        kept = kept.astype(np.int64)
        return np.ascontiguousarray(kept[:, :2]), band_pairs, kept[:, 2].copy()
    # sorting b arrays of 8 bytes per document: far less than a second per million
    # documents, so a worker pool would cost more than the work below a few million
    run_parallel("buckets", bucket_task, args.bands, args, units=len(units),
                 staging=str(staging), inline=int(offsets[-1]) < 4_000_000)
    band_pairs = sum(r["pairs"] for r in load_task_results(staging, "buckets", args.bands))
    pairs = unique_pairs([work / "pairs" / f"{j:03d}.npy" for j in range(args.bands)],
                         int(offsets[-1]))
    return pairs, band_pairs, None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start_pool_early(args)
    inp, out = Path(args.input), Path(args.output)
    if inp.resolve() == out.resolve():
        raise StageError(f"--output {out} is the input folder; choose another")
    thresholds = sweep_thresholds(args.sweep) if args.sweep else None
    shards = list_shards(inp)
    units = plan_units(shards, args.task_mb)
    offsets = unit_offsets(units)
    n_docs = int(offsets[-1])
    deps_sig = signature_deps(check_input(inp / "manifest.json")["output_fingerprint"],
                              args.ngram, args.num_perm, args.seed)
    deps_band = band_deps(deps_sig, args.bands, args.rows)
    sig_src, band_src, src_notes = kept_sources(out, deps_sig, deps_band, units)
    if thresholds:
        return run_sweep(args, thresholds, units, offsets, sig_src, band_src, src_notes,
                         deps_sig, deps_band)

    config = {"normalise": "collapse whitespace, lowercase", "ngram": args.ngram,
              "num_perm": args.num_perm, "bands": args.bands, "rows": args.rows,
              "threshold": args.threshold, "seed": args.seed,
              "hash": "fnv1a+fmix64 shingle, (a*x+b)>>32 uint32", "verify": "signature",
              "task_mb": args.task_mb, "keep_signatures": not args.no_keep_signatures}
    run = StageRun("dedup_minhash", out, config, input_manifest=inp / "manifest.json")
    if run.resumed:
        print(f"resuming in {run.staging}", file=sys.stderr)
    print(f"dedup_minhash: {describe(units)}", file=sys.stderr)
    for line in src_notes:
        print(line, file=sys.stderr)
    staging, work = run.staging, run.staging / WORK

    sig_results = signature_phase(run.parallel, units, offsets, args, staging, sig_src, band_src,
                                  run.phase)
    pairs, band_pairs, matches = candidates(run.parallel, units, offsets, args, staging, out,
                                            candidate_deps(deps_band))

    with run.phase("verify"):
        sigs = Signatures(work / "sig", len(units), offsets)
        sims, ok, matches = verify(pairs, sigs, args.threshold, args.num_perm, matches)
        keep_candidates(work, pairs, matches)

    with run.phase("cluster"):
        root, removed, kept_of = clusters(n_docs, pairs, ok)
        removed_sims = similarity(sigs.get(removed), sigs.get(kept_of)) if len(removed) else np.zeros(0)
        save_npy(work / "removed.npy", removed)

    to_show = shown_rows(root, removed)
    records = filter_phase(run, args, units, offsets, "removed.npy",
                           pick=report_picks(to_show, removed, kept_of))
    counts = {
        "docs_in": n_docs, "docs_out": sum(r["rows"] for r in records),
        "bytes_in": sum(r["bytes"] for r in sig_results),
        "bytes_out": sum(r["text_bytes"] for r in records),
        "removed": {"near_duplicate": int(len(removed))},
        "band_pairs": int(band_pairs), "candidates": int(len(pairs)),
        "candidates_rejected": int((~ok).sum()), "clusters": int(len(np.unique(kept_of))),
        "short_texts": sum(r["short"] for r in sig_results),
    }
    with run.phase("report"):
        shown = report_rows(units, offsets, sigs, root, removed, kept_of, removed_sims,
                            to_show, staging)
        text = build_report(shown, sims, counts, staging, config)
    del sigs
    kept = {"tasks_reused": sum(r["signatures_reused"] for r in sig_results),
            "tasks": len(units), "notes": [n for r in sig_results for n in r["notes"]]}
    if not args.no_keep_signatures:
        kept.update(keep_store(work, staging, sig_results, deps_sig, deps_band, band_pairs))
    kept["output_files_reused"] = sum(bool(r.get("reused")) for r in records)
    shutil.rmtree(work, ignore_errors=True)
    carry_sweep_reports(out, staging)
    run.commit(records, counts, extra={"kept": kept})
    shutil.rmtree(side_store(out), ignore_errors=True)  # merged into the output's stores
    print(text)
    for line in kept["notes"][:5]:
        print(f"note: {line}", file=sys.stderr)
    print(kept_line(kept, n_docs))
    print(f"wrote {out}/ ({len(records)} shards), {out}/report/ and {out}/manifest.json")
    return 0


def kept_line(kept: dict, n_docs: int) -> str:
    reuse = (f"signatures reused for {kept['tasks_reused']} of {kept['tasks']} tasks; "
             f"{kept.get('output_files_reused', 0)} output files reused unchanged")
    if "bytes" not in kept:
        return reuse + "; signatures not kept (--no-keep-signatures)"
    per_doc = kept["bytes"] / n_docs if n_docs else 0
    return (f"{reuse}; kept signatures and band hashes: {human_bytes(kept['bytes'])} "
            f"({per_doc:.0f} bytes per document) in signatures/, bands/ and candidates/")


def carry_sweep_reports(output: Path, staging: Path) -> None:
    """A sweep's report describes the input, not the output: keep it across reruns."""
    for f in (output / "report").glob("sweep.*"):
        (staging / "report").mkdir(exist_ok=True)
        shutil.copy2(f, staging / "report" / f.name)


def run_sweep(args, thresholds: list[float], units, offsets, sig_src, band_src, src_notes,
              deps_sig: dict, deps_band: dict) -> int:
    """--sweep: candidates and their similarities once, then every threshold on them.
    The output, its manifest and the stages below are untouched; signatures it had to
    compute are kept in a hidden store beside the output for the next run."""
    out = Path(args.output)
    work_root = out.parent / f".{out.name}.sweep.partial"
    shutil.rmtree(work_root, ignore_errors=True)
    work_root.mkdir(parents=True)
    print(f"sweep: thresholds {', '.join(f'{t:g}' for t in thresholds)} on {describe(units)}",
          file=sys.stderr)
    for line in src_notes:
        print(line, file=sys.stderr)

    def parallel(phase, fn, tasks, a, **kw):
        return run_tasks(fn, tasks, a, work_root / "_logs" / phase, phase, **kw)

    t0 = time.time()
    sig_results = signature_phase(parallel, units, offsets, args, work_root, sig_src, band_src)
    pairs, band_pairs, matches = candidates(parallel, units, offsets, args, work_root, out,
                                            candidate_deps(deps_band))
    sims, _, matches = verify(pairs, Signatures(work_root / WORK / "sig", len(units), offsets),
                              1.0, args.num_perm, matches)
    keep_candidates(work_root / WORK, pairs, matches)
    text, data = sweep(int(offsets[-1]), pairs, sims, thresholds, units, offsets)
    md = data.pop("markdown")
    data["seconds"] = round(time.time() - t0, 3)
    data["signatures_reused"] = sum(r["signatures_reused"] for r in sig_results)
    data["config"] = {"ngram": args.ngram, "num_perm": args.num_perm, "bands": args.bands,
                      "rows": args.rows, "seed": args.seed}
    data["depends_on"] = deps_band   # the input fingerprint and every setting it used
    save_report(out / "report", "sweep", data, md)
    if data["signatures_reused"] < len(units):
        tmp = work_root / "_kept"
        keep_store(work_root / WORK, tmp, sig_results, deps_sig, deps_band, band_pairs)
        replace_dir(tmp, side_store(out))
    shutil.rmtree(work_root, ignore_errors=True)
    print(text)
    print(f"signatures reused for {data['signatures_reused']} of {len(units)} tasks; "
          f"{data['seconds']:.1f} s")
    print(f"wrote {out}/report/sweep.md and sweep.json (the output and its manifest are unchanged)")
    return 0


if __name__ == "__main__":
    run_stage(main)
