"""algorithms/quality_signals.py's signals for a whole batch, in one compiled pass.

    from algorithms.quality_signals_fast import measure, measure_packs
    values = measure("gopher_quality", batch.column("text"))   # {signal: np.ndarray}
    both = measure_packs(["fineweb", "c4"], batch.column("text"))  # {pack: {signal: ...}}

gives, for every document of a string column (a null text counts as empty), exactly the
numbers of the readable functions in quality_signals.py, computed straight from the
column's Arrow UTF-8 buffers by numba, the way algorithms/cleaning_fast.py does for clean.py:

- each text is decoded to code points once; character classes (str.isspace, unicodedata
  categories, CJK, datatrove's punctuation sets) come from a table of flags built from
  Python's own answers for every code point;
- words are cut by algorithms/words_fast.py (words.py's words: spaCy's English rules, one
  word per CJK character), kept as (start, end) spans;
- equal strings (lines, paragraphs, n-grams) are found with 64-bit polynomial hashes and
  every hash match is confirmed by comparing the code points, so a collision can never
  change a number;
- every ratio is the same float64 division of the same two integers;
- packs measured together (measure_packs) decode each text and cut it into words once:
  the words are most of every pack's cost.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from algorithms import quality_signals as Q

from . import words_fast
from .jit import njit
from .kernels import POLY_BASE, fmix64, poly_hash, same, utf8_char
from .words_fast import F_ALPHA, F_CJK, F_SPACE, word_spans

# the packs' own character flags, beside words_fast's (bits it leaves free)
F_NONPUNCT, F_STOP, F_SENT, F_PCAT = 1024, 2048, 4096, 8192

_TABLES = None


def _flag_table() -> tuple[np.ndarray, np.ndarray]:
    """(flags, lower) of every code point: words_fast's flags with the packs' own, and the
    code point str.lower() gives (-1 where it gives more than one)."""
    import unicodedata
    n = 0x110000
    chars = [chr(i) for i in range(n)]
    f = words_fast.cached_flag_table().copy()
    assert not np.any(f & (F_NONPUNCT | F_STOP | F_SENT | F_PCAT))
    cats = [unicodedata.category(c) for c in chars]
    f[[i for i, c in enumerate(cats) if c.startswith("P")]] |= F_PCAT
    for flag, s in ((F_STOP, "".join(Q.STOP_CHARS)), (F_SENT, "".join(Q.SENTENCE_END))):
        f[[ord(c) for c in s]] |= flag
    f |= F_NONPUNCT
    f[[ord(c) for c in Q.PUNCTUATION_SET]] &= ~np.uint32(F_NONPUNCT)
    lower = np.full(n, -1, np.int32)
    for i, c in enumerate(chars):
        lc = c.lower()
        if len(lc) == 1:
            lower[i] = ord(lc)
    return f, lower


def _stop_words() -> tuple[np.ndarray, np.ndarray]:
    """Gopher's stop words, sorted: their code points side by side, and where each starts."""
    stop = sorted(Q.STOP_WORDS)
    scp = [ord(c) for w in stop for c in w]
    ss = np.cumsum([0] + [len(w) for w in stop])
    return np.array(scp, np.int32), np.array(ss, np.int64)


def _cached_flag_table() -> tuple[np.ndarray, np.ndarray]:
    """_flag_table(), cached on disk (algorithms/unicode_cache.py): building it walks every
    code point in Python several times (1.5 s, paid by every worker that measures a pack);
    loading it takes milliseconds. The table also depends on this module's rules and
    words_fast's (and spaCy's table), so the file is named by a digest of the files that
    hold them: an edit to any builds it again."""
    import hashlib

    from .unicode_cache import cached_table

    here = Path(__file__).resolve().parent
    digest = hashlib.blake2b(digest_size=8)
    for name in ("quality_signals.py", "quality_signals_fast.py"):
        digest.update((here / name).read_bytes())
    for path in words_fast.source_files():
        digest.update(path.read_bytes())

    def build() -> np.ndarray:
        f, lower = _flag_table()
        return np.stack([f.astype(np.int64), lower.astype(np.int64)])

    both = cached_table(f"quality-flags-{digest.hexdigest()}", build)
    return both[0].astype(np.uint32), both[1].astype(np.int32)


def tables():
    """(flags, lower, T, stop word code points, their starts), built once per process:
    T is words_fast's tables; the per-code-point part is read from the disk cache."""
    global _TABLES
    if _TABLES is None:
        f, lower = _cached_flag_table()
        _TABLES = (f, lower, words_fast.special_tables()) + _stop_words()
    return _TABLES


# --------------------------------------------------------------------------------------
# basics
# --------------------------------------------------------------------------------------

@njit(cache=True)
def _decode(data, s, e, out):
    """UTF-8 bytes data[s:e] -> code points in out; returns how many."""
    n = 0
    p = s
    while p < e:
        c, w = utf8_char(data, p)
        out[n] = c
        p += w
        n += 1
    return n


@njit(cache=True, inline="always")
def _empty_table(slots, m):
    """An open-addressing table for m items: the first slots (a power of two, at least
    twice m) of the scratch `slots`, every one empty (-1)."""
    size = 16
    while size < 2 * m:
        size *= 2
    tab = slots[:size]
    tab[:] = -1
    return tab


@njit(cache=True)
def _find_dups(cps, starts, ends, m, slots):
    """datatrove's find_duplicates over the m strings cps[starts[i]:ends[i]]:
    (how many repeat an earlier one, their characters)."""
    tab = _empty_table(slots, m)
    size = tab.shape[0]
    mask = np.uint64(size - 1)
    dup = 0
    dchars = 0
    for i in range(m):
        a, b = starts[i], ends[i]
        k = np.int64(fmix64(poly_hash(cps, a, b)) & mask)
        found = False
        while tab[k] >= 0:
            j = tab[k]
            if same(cps, a, b, cps, starts[j], ends[j]):
                found = True
                break
            k = (k + 1) & (size - 1)
        if found:
            dup += 1
            dchars += b - a
        else:
            tab[k] = i
    return dup, dchars


# --------------------------------------------------------------------------------------
# lines and paragraphs
# --------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _strip(cps, a, b, F):
    """str.strip() of cps[a:b]: its bounds without the white space at either end."""
    while a < b and (F[cps[a]] & F_SPACE):
        a += 1
    while b > a and (F[cps[b - 1]] & F_SPACE):
        b -= 1
    return a, b


@njit(cache=True)
def _split_at_newlines(cps, a, b, least, ls, le):
    """re.split(r"\\n{least,}", text) of the text cps[a:b]: the spans between runs of at
    least `least` newlines, into ls/le; returns how many (at least one)."""
    n = 0
    s = a
    q = a
    while q < b:
        if cps[q] == 10:
            r = q
            while r < b and cps[r] == 10:
                r += 1
            if r - q >= least:
                ls[n] = s
                le[n] = q
                n += 1
                s = r
            q = r
        else:
            q += 1
    ls[n] = s
    le[n] = b
    return n + 1


@njit(cache=True, inline="always")
def _is_linebreak(c):
    return (c == 10 or c == 13 or c == 11 or c == 12 or c == 0x1C or c == 0x1D or c == 0x1E
            or c == 0x85 or c == 0x2028 or c == 0x2029)


@njit(cache=True)
def _splitlines(cps, L, ls, le):
    """str.splitlines(): line spans, without their line breaks."""
    n = 0
    s = 0
    while s < L:
        e = s
        while e < L and not _is_linebreak(cps[e]):
            e += 1
        ls[n] = s
        le[n] = e
        n += 1
        if e < L and cps[e] == 13 and e + 1 < L and cps[e + 1] == 10:
            e += 1
        s = e + 1
    return n


# --------------------------------------------------------------------------------------
# per pack
# --------------------------------------------------------------------------------------

@njit(cache=True)
def _fineweb(cps, L, F, nw, W, out):
    ts, te, sufs, cand, tmp_s, tmp_e, ls, le, slots, ph, pw = W
    nl = 0
    punct = 0
    short = 0
    newlines = 0
    s = 0
    while s <= L:
        e = s
        while e < L and cps[e] != 10:
            e += 1
        if e < L:
            newlines += 1
        blank = True
        wid = 0
        for q in range(s, e):
            if not (F[cps[q]] & F_SPACE):
                blank = False
            wid += 2 if (F[cps[q]] & F_CJK) else 1
        if not blank:
            ls[nl] = s
            le[nl] = e
            nl += 1
            if F[cps[e - 1]] & F_STOP:
                punct += 1
            elif cps[e - 1] == 0x2026:   # "…" / "……" right after a CJK character
                q = e - 1
                while q > s and cps[q - 1] == 0x2026:
                    q -= 1
                if q > s and (F[cps[q - 1]] & F_CJK):
                    punct += 1
            if wid <= 30:
                short += 1
        s = e + 1
    if nl > 0:
        out[0] = punct / nl
        out[1] = short / nl
        out[2] = _find_dups(cps, ls, le, nl, slots)[1] / (L - newlines)
    else:
        out[0] = 0.0
        out[1] = 0.0
        out[2] = 0.0
    out[3] = newlines / nw if nw else 0.0


@njit(cache=True)
def _gopher_quality(cps, L, F, SCP, SS, nw, W, out):
    ts, te, sufs, cand, tmp_s, tmp_e, ls, le, slots, ph, pw = W
    real = 0
    real_len = 0
    alpha = 0
    stops = 0
    nstop = SS.shape[0] - 1
    # the stop words are sorted: those that start with an ASCII character come first; a
    # word can only be one of the group its first character is in, and once a document
    # has shown every word of that group there is nothing left to find for it
    nasc = 0
    while nasc < nstop and SCP[SS[nasc]] < 128:
        nasc += 1
    asc = (1 << nasc) - 1
    rest = ((1 << nstop) - 1) ^ asc
    for w in range(nw):
        a, b = ts[w], te[w]
        isreal = False
        isalpha = False
        for q in range(a, b):
            f = F[cps[q]]
            if f & F_NONPUNCT:
                isreal = True
            if f & F_ALPHA:
                isalpha = True
        if isreal:
            real += 1
            real_len += b - a
        if isalpha:
            alpha += 1
        if b - a <= 4:
            if cps[a] < 128:
                k0, k1, group = 0, nasc, asc
            else:
                k0, k1, group = nasc, nstop, rest
            if stops & group != group:
                for k in range(k0, k1):
                    if not (stops >> k) & 1 and same(cps, a, b, SCP, SS[k], SS[k + 1]):
                        stops |= 1 << k
    hashes = 0
    ell = 0
    dots = 0
    for q in range(L):
        c = cps[q]
        if c == 35:
            hashes += 1
        if c == 0x2026:
            ell += 1
        if c == 46:
            dots += 1
        else:
            ell += dots // 3
            dots = 0
    ell += dots // 3
    n = _splitlines(cps, L, ls, le)
    bullets = 0
    ends = 0
    for i in range(n):
        a, b = _strip(cps, ls[i], le[i], F)
        if a < b and (cps[a] == 0x2022 or cps[a] == 45):
            bullets += 1
        if b > a and (cps[b - 1] == 0x2026 or (b - a >= 3 and cps[b - 1] == 46
                                                and cps[b - 2] == 46 and cps[b - 3] == 46)):
            ends += 1
    nbits = 0
    for k in range(nstop):
        nbits += (stops >> k) & 1
    out[0] = real
    out[1] = real_len / real if real else 0.0
    out[2] = hashes / nw if nw else 0.0
    out[3] = ell / nw if nw else 0.0
    out[4] = bullets / n if n else 0.0
    out[5] = ends / n if n else 0.0
    out[6] = alpha / nw if nw else 0.0
    out[7] = nbits


@njit(cache=True)
def _token_stream(cps, ts, te, nw, stream, to, ph):
    """The words' code points back to back (stream), where each starts (to), and the
    polynomial hash of the stream up to each word (ph), so that the hash of words i to j
    joined, poly_hash(stream, to[i], to[j]), is ph[j] - ph[i] * B ** (to[j] - to[i])."""
    p = 0
    h = np.uint64(0)
    for w in range(nw):
        to[w] = p
        ph[w] = h
        for q in range(ts[w], te[w]):
            c = cps[q]
            stream[p] = c
            h = h * POLY_BASE + np.uint64(c)
            p += 1
    to[nw] = p
    ph[nw] = h
    return p


@njit(cache=True, inline="always")
def _joined_hash(to, ph, pw, i, j):
    """poly_hash of words i to j joined, from the prefix hashes (pw: the powers of B)."""
    return ph[j] - ph[i] * pw[to[j] - to[i]]


@njit(cache=True)
def _top_ngram(stream, to, ph, pw, nw, n, slots, counts):
    """datatrove's find_top_duplicate: length of " ".join(most frequent n-gram) x count."""
    m = nw - n + 1
    if m <= 0:
        return -1
    tab = _empty_table(slots, m)
    size = tab.shape[0]
    mask = np.uint64(size - 1)
    best_i = -1
    best_c = 0
    for i in range(m):
        # the joined words' hash: n-grams equal word by word are equal joined
        k = np.int64(fmix64(_joined_hash(to, ph, pw, i, i + n)) & mask)
        while True:
            j = tab[k]
            if j < 0:
                tab[k] = i
                counts[i] = 1
                c = 1
                j = i
                break
            equal = True
            for w in range(n):
                if not same(stream, to[i + w], to[i + w + 1], stream, to[j + w], to[j + w + 1]):
                    equal = False
                    break
            if equal:
                counts[j] += 1
                c = counts[j]
                break
            k = (k + 1) & (size - 1)
        if c > best_c or (c == best_c and j < best_i):
            best_c = c
            best_i = j
    return (to[best_i + n] - to[best_i] + n - 1) * best_c


@njit(cache=True)
def _dup_ngram(stream, to, ph, pw, nw, n, slots):
    """datatrove's find_all_duplicate: characters of n-grams (joined without spaces) that
    repeat an earlier one, jumping past each repeat."""
    m = nw - n + 1
    if m <= 0:
        return 0
    tab = _empty_table(slots, m)
    size = tab.shape[0]
    mask = np.uint64(size - 1)
    total = 0
    i = 0
    while i < m:
        a, b = to[i], to[i + n]
        k = np.int64(fmix64(_joined_hash(to, ph, pw, i, i + n)) & mask)
        found = False
        while tab[k] >= 0:
            j = tab[k]
            if same(stream, a, b, stream, to[j], to[j + n]):
                found = True
                break
            k = (k + 1) & (size - 1)
        if found:
            total += b - a
            i += n
        else:
            tab[k] = i
            i += 1
    return total


@njit(cache=True)
def _gopher_repetition(cps, L, F, nw, W, out):
    ts, te, sufs, cand, tmp_s, tmp_e, ls, le, slots, ph, pw = W
    out[0] = L
    # paragraphs: text.strip() split at runs of 2+ newlines
    a, b = _strip(cps, 0, L, F)
    np_ = _split_at_newlines(cps, a, b, 2, ls, le)
    d, dc = _find_dups(cps, ls, le, np_, slots)
    out[1] = d / np_
    out[2] = dc / L if L else 0.0
    # lines: split at runs of newlines
    nl = _split_at_newlines(cps, 0, L, 1, ls, le)
    d, dc = _find_dups(cps, ls, le, nl, slots)
    out[3] = d / nl
    out[4] = dc / L if L else 0.0
    stream = tmp_s            # free again once the words are cut
    to = tmp_e
    _token_stream(cps, ts, te, nw, stream, to, ph)
    for g in range(3):
        top = _top_ngram(stream, to, ph, pw, nw, g + 2, slots, sufs)
        out[5 + g] = top / L if (top >= 0 and L) else 0.0
    for g in range(6):
        out[8 + g] = _dup_ngram(stream, to, ph, pw, nw, g + 5, slots) / L if L else 0.0


@njit(cache=True)
def _c4(cps, L, F, LOWER, nw, W, out):
    ts, te, sufs, cand, tmp_s, tmp_e, ls, le, slots, ph, pw = W
    # "lorem ipsum" in text.lower()
    pat = np.array([108, 111, 114, 101, 109, 32, 105, 112, 115, 117, 109], np.int32)
    lorem = 0
    for q in range(L - 10):
        ok = True
        for k in range(11):
            if LOWER[cps[q + k]] != pat[k]:
                ok = False
                break
        if ok:
            lorem = 1
            break
    curly = 0
    for q in range(L):
        if cps[q] == 123:
            curly = 1
            break
    n = _splitlines(cps, L, ls, le)
    total = 0
    w0 = 0                    # the document's words, chunk by chunk (same chunks)
    for i in range(n):
        a, b = _strip(cps, ls[i], le[i], F)
        count = 0
        seen = False
        q = a
        while q < b:
            if F[cps[q]] & F_SPACE:
                r = q
                while r < b and (F[cps[r]] & F_SPACE):
                    r += 1
                if not (r - q == 1 and cps[q] == 32):      # a whitespace token
                    if count == 0:
                        count = 1
                    if seen:
                        count += 1
                        seen = False
                q = r
            else:
                r = q
                while r < b and not (F[cps[r]] & F_SPACE):
                    r += 1
                w1 = w0
                while w1 < nw and ts[w1] < r:
                    w1 += 1
                for w in range(w0, w1):
                    if count == 0:
                        count = 1
                    x, y = ts[w], te[w]
                    if y - x == 1 and (F[cps[x]] & F_SENT):
                        seen = True
                    elif seen:
                        punct = True
                        for z in range(x, y):
                            if not (F[cps[z]] & F_PCAT):
                                punct = False
                                break
                        if not punct:
                            count += 1
                            seen = False
                w0 = w1
                q = r
        total += max(1, count)
    out[0] = lorem
    out[1] = curly
    out[2] = total


@njit(cache=True)
def _run(want, cols, data, offsets, valid, F, LOWER, T, SCP, SS, out, maxlen):
    """Every pack p with want[p] for every document, its signals in out[d, cols[p]:]:
    each text decoded once and cut into words once, whatever the packs."""
    cps = np.empty(maxlen + 1, np.int32)
    cap = maxlen + 2
    W = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64),
         np.empty(cap * 12, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64),
         np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(4 * cap + 32, np.int64),
         np.empty(cap, np.uint64), np.empty(cap, np.uint64))
    ts, te, sufs, cand, tmp_s, tmp_e, ls, le, slots, ph, pw = W
    pw[0] = 1                 # the powers of B, for _joined_hash
    for i in range(1, cap):
        pw[i] = pw[i - 1] * POLY_BASE
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        if not valid[d]:
            s = e
        L = _decode(data, s, e, cps)
        nw = word_spans(cps, 0, L, F, T, ts, te, sufs, cand, tmp_s, tmp_e)
        row = out[d]
        if want[0]:
            _fineweb(cps, L, F, nw, W, row[cols[0]:])
        if want[1]:
            _gopher_quality(cps, L, F, SCP, SS, nw, W, row[cols[1]:])
        if want[2]:
            _gopher_repetition(cps, L, F, nw, W, row[cols[2]:])
        if want[3]:
            _c4(cps, L, F, LOWER, nw, W, row[cols[3]:])




def measure(pack: str, col: pa.Array | pa.ChunkedArray) -> dict[str, np.ndarray]:
    """Every signal of `pack` for every text of a string column (null = empty text)."""
    return measure_packs([pack], col)[pack]


def measure_packs(packs: list[str], col: pa.Array | pa.ChunkedArray) -> dict[str, dict]:
    """measure() for several packs in one pass: {pack: {signal: np.ndarray}}. Each text
    is decoded and cut into words once for all of them."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_large_string(col.type):
        col = col.cast(pa.string())
    names = {p: list(Q.SIGNALS[p]) for p in packs}
    want = np.zeros(len(Q.PACKS), np.bool_)
    cols = np.zeros(len(Q.PACKS), np.int64)
    width = 0
    for p in packs:
        want[Q.PACKS.index(p)] = True
        cols[Q.PACKS.index(p)] = width
        width += len(names[p])
    n = len(col)
    # NaN until the kernel writes it: a signal declared in quality_signals.SIGNALS that
    # no kernel computes is an error below, not a column of zeros
    out = np.full((n, width), np.nan)
    if n:
        bufs = col.buffers()
        offsets = np.frombuffer(bufs[1], np.int32)[col.offset:col.offset + n + 1].astype(np.int64)
        data = (np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None
                else np.zeros(0, np.uint8))
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        maxlen = int(np.diff(offsets).max()) if n else 0     # bytes >= code points
        F, LOWER, T, SCP, SS = tables()
        _run(want, cols, data, offsets, valid, F, LOWER, T, SCP, SS, out, maxlen)
        missing = np.flatnonzero(np.isnan(out).any(axis=0))
        if len(missing):
            label = [f"{p}.{k}" for p in packs for k in names[p]]
            raise RuntimeError(f"{', '.join(label[i] for i in missing)}: declared in "
                               "quality_signals.SIGNALS, but the compiled kernel "
                               "(quality_signals_fast) gave no value for some documents")
    return {p: {k: (out[:, i].astype(np.int64) if k in Q.INT_SIGNALS else out[:, i].copy())
                for i, k in enumerate(names[p], start=int(cols[Q.PACKS.index(p)]))}
            for p in packs}


def measure_one(pack: str, text: str) -> dict[str, float | int]:
    """measure() for one text."""
    return {k: v[0].item() for k, v in measure(pack, pa.array([text], pa.string())).items()}
