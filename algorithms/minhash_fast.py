"""The compiled fast path of algorithms/minhash.py: numba kernels for MinHash signatures
(normalising the text, hashing its shingles, taking the k minima), band hashes, and LSH
buckets by sorting.

Each kernel computes exactly what the readable code of algorithms/minhash.py computes in
plain Python (tested equal): shingle hashes are 64-bit FNV-1a over the shingle's code
points, finished with MurmurHash3's fmix64 and cut to 32 bits; the k hash functions are
h_i(x) = ((a_i * x + b_i) mod 2^64) >> 32, computed exactly in 32-bit SIMD lanes that
AVX2 has (see min_hashes), once per distinct shingle of a text (a repeat cannot change
a minimum). The kernels are compiled on first use and cached on disk: importing numba
takes 0.2 s, more than a rerun that reuses every signature spends on its own work.
"""

from __future__ import annotations

import re

import numpy as np

from .jit import njit
from .kernels import fmix64

LONG_TEXT = 1 << 18          # characters; longer texts are normalised and hashed in pieces
EMPTY = np.uint32(0xFFFFFFFF)

BLOCK = 512                  # shingles hashed together; the k functions run on 1-2 blocks
SEEN_SLOTS = 1 << 14         # the table of a text's shingle hashes seen so far: at most 64 KB
SPECIAL = np.uint32(0xFFFFFFFF)   # in _char_map: a character left to normalise()
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
LOW32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)


@njit(cache=True, inline="always")
def _shingle_hash(cp, start, stop):
    """32-bit hash of the code points cp[start:stop] (FNV-1a style, then fmix64)."""
    h = FNV_OFFSET
    for q in range(start, stop):
        h = (h ^ np.uint64(cp[q])) * FNV_PRIME
    h ^= np.uint64(stop - start)
    return fmix64(h) >> SHIFT32


@njit(cache=True)
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
        hs[j] = fmix64(hs[j] ^ np.uint64(n)) >> SHIFT32


@njit(cache=True)
def _split_multipliers(a):
    """a_i = a_hi * 2^32 + a_lo -> the uint32 arrays (a_lo, a_hi)."""
    a_lo = np.empty(a.shape[0], np.uint32)
    a_hi = np.empty(a.shape[0], np.uint32)
    for i in range(a.shape[0]):
        a_lo[i] = np.uint32(a[i] & LOW32)
        a_hi[i] = np.uint32(a[i] >> SHIFT32)
    return a_lo, a_hi


@njit(cache=True)
def min_hashes(xs, count, a_lo, a_hi, b, acc):
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


@njit(cache=True)
def _clear_seen(seen, shingles):
    """Empty the first slots of the seen-table, about 4 per shingle; returns the slot mask."""
    size = 64
    while size < 4 * shingles and size < seen.shape[0]:
        size *= 2
    seen[:size] = 0
    return np.uint32(size - 1)


@njit(cache=True)
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


@njit(cache=True)
def _sign_text(cp, start, stop, n, a_lo, a_hi, b, acc, hs, xs, seen):
    """acc = min(acc, MinHash of the normalised code points cp[start:stop]).

    A text shorter than n characters is a single shingle: the whole text. Otherwise its
    shingles are hashed BLOCK at a time, repeats dropped, and the k functions applied to
    the distinct hashes collected so far (xs holds 2 * BLOCK)."""
    if stop - start < n:
        xs[0] = np.uint32(_shingle_hash(cp, start, stop))
        min_hashes(xs, 1, a_lo, a_hi, b, acc)
        return
    end = stop - n + 1
    mask = _clear_seen(seen, end - start)
    kept = 0
    for p in range(start, end, BLOCK):
        count = min(BLOCK, end - p)
        _hash_shingles(cp, p, count, n, hs)
        kept = _keep_unseen(hs, count, seen, mask, xs, kept)
        if kept > BLOCK:
            min_hashes(xs, kept, a_lo, a_hi, b, acc)
            kept = 0
    min_hashes(xs, kept, a_lo, a_hi, b, acc)


@njit(cache=True, inline="always")
def _put(buf, m, prev, c):
    """Write the mapped character c at buf[m]; the next one goes after it unless both
    are spaces (so runs of whitespace collapse, and leading ones vanish). Returns that
    next place."""
    buf[m] = c
    return m + ((c != 32) | (prev != 32))


@njit(cache=True, inline="always")
def _normalised_length(buf, m, special):
    """The length of the normalised text in buf[:m], a trailing space cut; -1 if it
    holds a character left to normalise()."""
    if m > 0 and buf[m - 1] == 32:
        m -= 1
    return -1 if special else m


@njit(cache=True)
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
        m = _put(buf, m, prev, c)
        prev = c
        special |= c == SPECIAL
    return _normalised_length(buf, m, special)


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True)
def _normalise_utf8_into(data, start, stop, char_map, buf):
    """_normalise_into for the UTF-8 bytes data[start:stop] (an Arrow string column's own
    buffer): each character is decoded, then mapped, as _normalise_into maps the code
    points of the same text. Returns -1 as it does, and also for bytes that are not
    valid UTF-8 (then normalise() must: it reports them as Python does)."""
    m = 0
    prev = np.uint32(32)
    special = False
    p = start
    while p < stop:
        c = np.uint32(data[p])
        if c < 0x80:
            p += 1
        elif c >= 0xC0 and c < 0xE0 and p + 2 <= stop:
            c = ((c & 0x1F) << 6) | (np.uint32(data[p + 1]) & 0x3F)
            p += 2
        elif c >= 0xE0 and c < 0xF0 and p + 3 <= stop:
            c = (((c & 0x0F) << 12) | ((np.uint32(data[p + 1]) & 0x3F) << 6)
                 | (np.uint32(data[p + 2]) & 0x3F))
            p += 3
        elif c >= 0xF0 and c < 0xF5 and p + 4 <= stop:
            c = (((c & 0x07) << 18) | ((np.uint32(data[p + 1]) & 0x3F) << 12)
                 | ((np.uint32(data[p + 2]) & 0x3F) << 6) | (np.uint32(data[p + 3]) & 0x3F))
            p += 4
        else:
            return -1
        if c >= len(char_map):
            return -1
        c = char_map[c]
        m = _put(buf, m, prev, c)
        prev = c
        special |= c == SPECIAL
    return _normalised_length(buf, m, special)


@njit(cache=True)
def _sig_utf8_texts(data, offsets, n, a, b, char_map, long_bytes, out, lens):
    """_sig_raw_texts for the UTF-8 texts data[offsets[d]:offsets[d+1]], read where they
    are: no Python string, no array of code points. lens[d] = -1 as there, and -2 for a
    text of more than long_bytes bytes (left to the caller, whose pieces bound memory)."""
    a_lo, a_hi = _split_multipliers(a)
    longest = 1
    for d in range(offsets.shape[0] - 1):
        size = offsets[d + 1] - offsets[d]
        if size <= long_bytes:
            longest = max(longest, size)      # a text has no more characters than bytes
    buf = np.empty(longest, np.uint32)
    hs = np.empty(BLOCK, np.uint64)
    xs = np.empty(2 * BLOCK, np.uint32)
    seen = np.empty(SEEN_SLOTS, np.uint32)
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        if e - s > long_bytes:
            lens[d] = -2
            continue
        m = _normalise_utf8_into(data, s, e, char_map, buf)
        lens[d] = m
        if m >= 0:
            _sign_text(buf, 0, m, n, a_lo, a_hi, b, out[d], hs, xs, seen)


@njit(cache=True)
def _sig_hashed(x, offsets, a, b, out):
    """Signatures of sets given directly as 32-bit shingle hashes (used by the demo's
    simulation of pairs with an exact Jaccard similarity)."""
    a_lo, a_hi = _split_multipliers(a)
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        min_hashes(x[s:e], e - s, a_lo, a_hi, b, out[d])


@njit(cache=True)
def _band_hashes(sig, bands, rows, out):
    """out[j, d] = 64-bit hash of band j (rows r values) of signature d."""
    for d in range(sig.shape[0]):
        for j in range(bands):
            h = np.uint64(0x9E3779B97F4A7C15) * np.uint64(j + 1)
            for t in range(j * rows, (j + 1) * rows):
                h = fmix64(h ^ np.uint64(sig[d, t]))
            out[j, d] = h


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
        from .unicode_cache import cached_table

        _CHAR_MAP = cached_table("normalise_map", _build_char_map)
    return _CHAR_MAP


def _build_char_map() -> np.ndarray:
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
    return m


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


@njit(cache=True)
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
