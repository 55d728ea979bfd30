"""algorithms/quality_signals.py's signals for a whole batch, in one compiled pass.

    from algorithms.quality_signals_fast import measure, measure_packs
    values = measure("gopher_quality", batch.column("text"))   # {signal: np.ndarray}
    both = measure_packs(["fineweb", "c4"], batch.column("text"))  # {pack: {signal: ...}}

gives, for every document of a string column (a null text counts as empty), exactly the
numbers of the readable functions in quality_signals.py, computed straight from the
column's Arrow UTF-8 buffers by numba, the way algorithms/cleaning_fast.py does for clean.py:

- each text is decoded to code points once; character classes (str.isalpha, isspace,
  unicodedata categories, CJK, spaCy's punctuation lists) come from tables built from
  Python's own answers for every code point;
- words are cut by the same steps as quality_signals.words() (spaCy's prefix, suffix,
  infix and special-case rules, one word per CJK character), kept as (start, end) spans;
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
from .jit import njit

from algorithms import quality_signals as Q

# character flags
F_SPACE, F_ALPHA, F_LOWER, F_UPPER = 1, 2, 4, 8
F_CJK, F_ICON, F_PRE, F_SUF = 16, 32, 64, 128
F_QUOTE, F_DOTAFTER, F_NONPUNCT, F_STOP = 256, 512, 1024, 2048
F_SENT, F_PCAT, F_URLX, F_REWORD = 4096, 8192, 16384, 32768
F_DECIMAL, F_SALPHA, F_GLUE0, F_HYPH0 = 65536, 131072, 262144, 524288
F_LEAD, F_TRAIL = 1 << 20, 1 << 21

_TABLES = None
_B = np.uint64(0x100000001B3)


def _flag_table() -> tuple[np.ndarray, np.ndarray]:
    import unicodedata
    n = 0x110000
    chars = [chr(i) for i in range(n)]
    f = np.zeros(n, np.uint32)

    def add(flag, pred):
        f[np.fromiter((pred(c) for c in chars), np.bool_, count=n)] |= flag

    add(F_SPACE, str.isspace)
    add(F_ALPHA, str.isalpha)
    for flag, name in ((F_SALPHA, "alpha"), (F_LOWER, "alpha_lower"), (F_UPPER, "alpha_upper")):
        for a, b in Q.spacy_data()[name]:       # spaCy's letter classes, as Q reads them
            f[a:b + 1] |= flag
    alpha = np.flatnonzero(f & F_ALPHA)
    f[[i for i in alpha if Q.is_cjk(chars[i])]] |= F_CJK
    cats = [unicodedata.category(c) for c in chars]
    for a, b in Q.spacy_data()["icon"]:        # spaCy's icons, not every So
        f[a:b + 1] |= F_ICON
    f[[i for i, c in enumerate(cats) if c.startswith("P")]] |= F_PCAT
    for flag, s in ((F_PRE, "§%=—–" + Q.PUNCT_CHARS + Q.QUOTE_CHARS + Q.CURRENCY_CHARS),
                    (F_SUF, Q.PUNCT_CHARS + Q.QUOTE_CHARS + "—–"),
                    (F_QUOTE, Q.QUOTE_CHARS), (F_DOTAFTER, Q.DOT_AFTER),
                    (F_STOP, "".join(Q.STOP_CHARS)), (F_SENT, "".join(Q.SENTENCE_END))):
        f[[ord(c) for c in s]] |= flag
    # the compiled shortcut for chunks of letters relies on this
    assert not np.any((f & F_ALPHA).astype(bool) & (f & (F_PRE | F_SUF | F_ICON)).astype(bool))
    f |= F_NONPUNCT
    f[[ord(c) for c in Q.PUNCTUATION_SET]] &= ~np.uint32(F_NONPUNCT)
    urlx = np.zeros(n, np.bool_)
    urlx[0xA1:0x10000] = True
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789":
        urlx[ord(c)] = True
    f[urlx] |= F_URLX
    add(F_REWORD, lambda c: c.isalnum() or c == "_")
    add(F_DECIMAL, str.isdecimal)
    # the first characters of the special cases _glue looks for; none holds a CJK letter
    glued = ["".join(k) for k in Q.glued_specials()]
    f[sorted({ord(k[0]) for k in glued})] |= F_GLUE0
    assert not any(f[ord(c)] & F_CJK for k in glued for c in k)
    f[[ord(h[0]) for h in Q.HYPHENS]] |= F_HYPH0      # where _infixes looks for hyphens
    # for _marked: the ASCII marks that the prefix rule, or the suffix rule, takes off a
    # word alone ("." has a rule of its own)
    ascii = np.arange(128)
    f[ascii[(f[:128] & (F_PRE | F_ICON)) != 0]] |= F_LEAD
    f[ascii[(f[:128] & (F_SUF | F_ICON)) != 0]] |= F_TRAIL
    lower = np.full(n, -1, np.int32)
    for i, c in enumerate(chars):
        lc = c.lower()
        if len(lc) == 1:
            lower[i] = ord(lc)
    return f, lower


def _cps(s: str) -> np.ndarray:
    return np.array([ord(c) for c in s], np.int32)


def _hash_py(cps) -> int:
    h = 0
    for c in cps:
        h = (h * int(_B) + int(c)) & 0xFFFFFFFFFFFFFFFF
    return h


def _mix_py(h: int) -> int:
    """_mix in Python."""
    m = 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & m
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & m
    return h ^ (h >> 33)


def _special_tables():
    cases = Q.special_cases()
    glued = {"".join(k): k for k in Q.glued_specials()}
    keys = list(cases)
    kcp, ks, tl, ts, pl, ps, glue = [], [0], [], [0], [], [0], []
    for k in keys:
        kcp += [ord(c) for c in k]
        ks.append(len(kcp))
        tl += [len(t) for t in cases[k]]
        ts.append(len(tl))
        glue.append(k in glued)
        pl += [len(t) for t in glued.get(k, ())]
        ps.append(len(pl))
    endings = ["+", "US$", "C$", "A$", *Q.CURRENCY_CHARS, *Q.UNITS]
    ecp = [ord(c) for e in endings for c in e]
    es = np.cumsum([0] + [len(e) for e in endings])
    hy = [ord(c) for h in Q.HYPHENS for c in h]
    hs = np.cumsum([0] + [len(h) for h in Q.HYPHENS])
    stop = sorted(Q.STOP_WORDS)
    scp = [ord(c) for w in stop for c in w]
    ss = np.cumsum([0] + [len(w) for w in stop])
    i64, i32 = np.int64, np.int32
    # the special cases by hash, in open-addressing slots (a quarter full) that _special
    # probes from _mix(hash): one or two probes for a word that is not a special case
    size = 1
    while size < 4 * len(keys):
        size *= 2
    slots = np.full(size, -1, i64)
    for i, key in enumerate(keys):
        k = _mix_py(_hash_py(_cps(key))) & (size - 1)
        while slots[k] >= 0:
            k = (k + 1) & (size - 1)
        slots[k] = i
    return (slots, np.array(kcp, i32), np.array(ks, i64), np.array(tl, i32),
            np.array(ts, i64), np.array(glue, np.bool_), np.array(pl, i32), np.array(ps, i64),
            np.int64(max(map(len, keys))), np.array(ecp, i32), np.array(es, i64),
            np.array(hy, i32), np.array(hs, i64), np.array(scp, i32), np.array(ss, i64))


def _cached_flag_table() -> tuple[np.ndarray, np.ndarray]:
    """_flag_table(), cached on disk (algorithms/unicode_cache.py): building it walks every
    code point in Python several times (1.5 s, paid by every worker that measures a pack);
    loading it takes milliseconds. The table also depends on this module's rules and
    spaCy's table, so the file is named by a digest of the files that hold them: an edit
    to either builds it again."""
    import hashlib

    from .unicode_cache import cached_table

    here = Path(__file__).resolve().parent
    digest = hashlib.blake2b(digest_size=8)
    for name in ("quality_signals.py", "quality_signals_fast.py", "spacy_en_special_cases.json"):
        digest.update((here / name).read_bytes())

    def build() -> np.ndarray:
        f, lower = _flag_table()
        return np.stack([f.astype(np.int64), lower.astype(np.int64)])

    both = cached_table(f"quality-flags-{digest.hexdigest()}", build)
    return both[0].astype(np.uint32), both[1].astype(np.int32)


def tables():
    """(flags, lower, specials...) built once per process from Python and the spaCy table
    (the per-code-point part read from the disk cache)."""
    global _TABLES
    if _TABLES is None:
        f, lower = _cached_flag_table()
        _TABLES = (f, lower) + _special_tables()
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
        b0 = np.int32(data[p])
        if b0 < 0x80:
            out[n] = b0
            p += 1
        elif b0 < 0xE0:
            out[n] = ((b0 & 0x1F) << 6) | (np.int32(data[p + 1]) & 0x3F)
            p += 2
        elif b0 < 0xF0:
            out[n] = (((b0 & 0x0F) << 12) | ((np.int32(data[p + 1]) & 0x3F) << 6)
                      | (np.int32(data[p + 2]) & 0x3F))
            p += 3
        else:
            out[n] = (((b0 & 0x07) << 18) | ((np.int32(data[p + 1]) & 0x3F) << 12)
                      | ((np.int32(data[p + 2]) & 0x3F) << 6) | (np.int32(data[p + 3]) & 0x3F))
            p += 4
        n += 1
    return n


@njit(cache=True, inline="always")
def _poly(cps, a, b):
    h = np.uint64(0)
    for i in range(a, b):
        h = h * np.uint64(0x100000001B3) + np.uint64(cps[i])
    return h


@njit(cache=True, inline="always")
def _mix(h):
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, inline="always")
def _same(x, a0, a1, y, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for q in range(a1 - a0):
        if x[a0 + q] != y[b0 + q]:
            return False
    return True


@njit(cache=True, inline="always")
def _digit(c):
    return 48 <= c <= 57


@njit(cache=True)
def _find_dups(cps, starts, ends, m, slots):
    """datatrove's find_duplicates over the m strings cps[starts[i]:ends[i]]:
    (how many repeat an earlier one, their characters)."""
    size = 16
    while size < 2 * m:
        size *= 2
    tab = slots[:size]
    tab[:] = -1
    mask = np.uint64(size - 1)
    dup = 0
    dchars = 0
    for i in range(m):
        a, b = starts[i], ends[i]
        k = np.int64(_mix(_poly(cps, a, b)) & mask)
        found = False
        while tab[k] >= 0:
            j = tab[k]
            if _same(cps, a, b, cps, starts[j], ends[j]):
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
# words: quality_signals.words(), on code point spans
# --------------------------------------------------------------------------------------

@njit(cache=True)
def _special(cps, a, b, SH, KCP, KS, MAXK):
    """Index of the special case equal to cps[a:b], or -1 (SH: open-addressing slots)."""
    if b <= a or b - a > MAXK:
        return -1
    mask = SH.shape[0] - 1
    k = np.int64(_mix(_poly(cps, a, b)) & np.uint64(mask))
    while True:
        i = SH[k]
        if i < 0:
            return -1
        if _same(cps, a, b, KCP, KS[i], KS[i + 1]):
            return i
        k = (k + 1) & mask


@njit(cache=True)
def _prefix_len(cps, lo, hi, F):
    c = cps[lo]
    if c == 46 and lo + 1 < hi and cps[lo + 1] == 46:
        q = lo
        while q < hi and cps[q] == 46:
            q += 1
        return q - lo
    if hi - lo >= 3 and c == 85 and cps[lo + 1] == 83 and cps[lo + 2] == 36:   # US$
        return 3
    if hi - lo >= 2 and (c == 67 or c == 65) and cps[lo + 1] == 36:              # C$ A$
        return 2
    if F[c] & (F_PRE | F_ICON):
        return 1
    if c == 43 and not (lo + 1 < hi and _digit(cps[lo + 1])):
        return 1
    return 0


@njit(cache=True)
def _suffix_len(cps, lo, hi, F, ECP, ES):
    n = hi - lo
    c = cps[hi - 1]
    best = 0
    if F[c] & (F_SUF | F_ICON):
        best = 1
    if n >= 2:
        p = cps[hi - 2]
        if ((p == 0x2026 and c == 0x2026) or ((p == 39 or p == 0x2019) and (c == 115 or c == 83))):
            best = 2
        if p == 46 and c == 46:
            q = hi
            while q > lo and cps[q - 1] == 46:
                q -= 1
            if hi - q > best:
                best = hi - q
    if c == 46 and n > 1:
        b = cps[hi - 2]
        if _digit(b) or (F[b] & (F_LOWER | F_DOTAFTER)):
            best = max(best, 1)
        if n > 2 and (F[cps[hi - 3]] & F_UPPER) and (F[b] & F_UPPER):
            best = max(best, 1)
        if n > 2 and cps[hi - 3] == 0xB0 and (b == 70 or b == 102 or b == 67 or b == 99
                                                or b == 75 or b == 107):
            best = max(best, 1)
    # endings after a digit: only possible with a digit among the last few characters
    anydigit = False
    for q in range(max(lo, hi - 8), hi):
        if _digit(cps[q]):
            anydigit = True
    if anydigit:
        for e in range(ES.shape[0] - 1):
            k = ES[e + 1] - ES[e]
            if n > k and k > best and _digit(cps[hi - k - 1]) and _same(cps, hi - k, hi, ECP,
                                                                        ES[e], ES[e + 1]):
                best = k
    return best


@njit(cache=True)
def _looks_like_url(cps, lo, hi, F):
    dot = False               # every host it accepts has a "."
    for q in range(lo, hi):
        if cps[q] == 46:
            dot = True
            break
    if not dot:
        return False
    # scheme
    nst = 1
    st0 = lo
    st1 = -1
    r = lo
    while r < hi and ((F[cps[r]] & F_REWORD) or cps[r] == 43 or cps[r] == 45 or cps[r] == 46):
        r += 1
    if r - lo >= 2 and r + 2 < hi and cps[r] == 58 and cps[r + 1] == 47 and cps[r + 2] == 47:
        st1 = r + 3
        nst = 2
    for si in range(nst):
        base = st0 if si == 0 else st1
        # host starts: base itself, or after any "@" at least one character in
        h = base
        while h <= hi:
            if h == base or cps[h - 1] == 64:
                if h == base or h - 1 >= base + 1:
                    if _host_ok(cps, h, hi, F):
                        return True
            h += 1
    return False


@njit(cache=True)
def _host_ok(cps, a, hi, F):
    e = a
    while e < hi and ((F[cps[e]] & F_URLX) or cps[e] == 95 or cps[e] == 45 or cps[e] == 46):
        e += 1
    # labels split by "."; the last is the top-level domain
    last_dot = -1
    for q in range(a, e):
        if cps[q] == 46:
            last_dot = q
    if last_dot < 0:
        return False
    tld = e - last_dot - 1
    if tld < 2 or tld > 63:
        return False
    for q in range(last_dot + 1, e):
        if not (F[cps[q]] & F_LOWER):
            return False
    s = a
    for q in range(a, last_dot + 1):
        if cps[q] == 46:
            ln = q - s
            if ln < 1 or ln > 64:
                return False
            if not (F[cps[s]] & F_URLX) or not (F[cps[q - 1]] & F_URLX):
                return False
            s = q + 1
    # port, path
    r = e
    if r < hi and cps[r] == 58:
        d = r + 1
        while d < hi and (F[cps[d]] & F_DECIMAL):
            d += 1
        if d - r - 1 < 2 or d - r - 1 > 5:
            return False
        r = d
    if r == hi:
        return True
    c = cps[r]
    return c == 47 or c == 63 or c == 35


@njit(cache=True)
def _emit(ts, te, n, a, b):
    ts[n] = a
    te[n] = b
    return n + 1


@njit(cache=True)
def _emit_special(k, a, ts, te, n, TL, TS):
    p = a
    for q in range(TS[k], TS[k + 1]):
        n = _emit(ts, te, n, p, p + TL[q])
        p += TL[q]
    return n


@njit(cache=True)
def _split_piece(cps, a, b, F, T, ts, te, n, sufs):
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS, SCP, SS) = T
    k = _special(cps, a, b, SH, KCP, KS, MAXK)
    if k >= 0:
        return _emit_special(k, a, ts, te, n, TL, TS)
    lo, hi = a, b
    nsuf = 0
    last = -1
    while lo < hi and hi - lo != last:
        if _special(cps, lo, hi, SH, KCP, KS, MAXK) >= 0:
            break
        last = hi - lo
        pre = _prefix_len(cps, lo, hi, F)
        if pre and _special(cps, lo + pre, hi, SH, KCP, KS, MAXK) >= 0:
            n = _emit(ts, te, n, lo, lo + pre)
            lo += pre
            break
        suf = _suffix_len(cps, lo + pre, hi, F, ECP, ES) if lo + pre < hi else 0
        if suf and _special(cps, lo, hi - suf, SH, KCP, KS, MAXK) >= 0:
            sufs[nsuf] = hi - suf
            nsuf += 1
            hi -= suf
            break
        if pre:
            n = _emit(ts, te, n, lo, lo + pre)
            lo += pre
        if suf:
            sufs[nsuf] = hi - suf
            nsuf += 1
            hi -= suf
    if lo < hi:
        k = _special(cps, lo, hi, SH, KCP, KS, MAXK)
        if k >= 0:
            n = _emit_special(k, lo, ts, te, n, TL, TS)
        elif _looks_like_url(cps, lo, hi, F):
            n = _emit(ts, te, n, lo, hi)
        else:
            n = _infixes(cps, lo, hi, F, HY, HS, ts, te, n)
    # suffixes: found from the end inwards, emitted in text order
    for q in range(nsuf - 1, -1, -1):
        s0 = sufs[q]
        e0 = b if q == 0 else sufs[q - 1]
        n = _emit(ts, te, n, s0, e0)
    return n


@njit(cache=True)
def _infixes(cps, lo, hi, F, HY, HS, ts, te, n):
    start = lo
    i = lo
    while i < hi:
        c = cps[i]
        prev = cps[i - 1] if i > lo else -1
        nxt = cps[i + 1] if i + 1 < hi else -1
        end = 0
        if c == 46 and nxt == 46:
            q = i
            while q < hi and cps[q] == 46:
                q += 1
            end = q
        elif c == 0x2026 or (F[c] & F_ICON):
            end = i + 1
        elif prev >= 0 and _digit(prev) and (c == 43 or c == 45 or c == 42 or c == 94) and (
                nxt >= 0 and (_digit(nxt) or nxt == 45)):
            end = i + 1
        elif c == 46 and prev >= 0 and (F[prev] & (F_LOWER | F_QUOTE)) and nxt >= 0 and (
                F[nxt] & (F_UPPER | F_QUOTE)):
            end = i + 1
        elif c == 44 and prev >= 0 and (F[prev] & F_SALPHA) and nxt >= 0 and (F[nxt] & F_SALPHA):
            end = i + 1
        elif prev >= 0 and ((F[prev] & F_SALPHA) or _digit(prev)):
            for h in range(HS.shape[0] - 1 if F[c] & F_HYPH0 else 0):
                k = HS[h + 1] - HS[h]
                if i + k < hi and _same(cps, i, i + k, HY, HS[h], HS[h + 1]) and (
                        F[cps[i + k]] & F_SALPHA):
                    end = i + k
                    break
            if end == 0 and (c == 58 or c == 60 or c == 62 or c == 61 or c == 47) and (
                    nxt >= 0 and (F[nxt] & F_SALPHA)):
                end = i + 1
        if end:
            if i != lo:                     # an infix at the very start is ignored
                if i != start:
                    n = _emit(ts, te, n, start, i)
                n = _emit(ts, te, n, i, end)
                start = end
            i = end
        else:
            i += 1
    if start < hi:
        n = _emit(ts, te, n, start, hi)
    return n


@njit(cache=True)
def _glue(cps, n0, n1, F, T, ts, te, cand, tmp_s, tmp_e):
    """spaCy's second pass over one chunk's tokens ts/te[n0:n1]; returns the new end."""
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS, SCP, SS) = T
    nc = 0
    for i in range(n0, n1):
        if not (F[cps[ts[i]]] & F_GLUE0):        # no glued case starts with it
            continue
        for j in range(i + 1, n1 + 1):
            a, b = ts[i], te[j - 1]
            if b - a > MAXK or (F[cps[b - 1]] & F_CJK):    # no glued case holds CJK
                break
            k = _special(cps, a, b, SH, KCP, KS, MAXK)
            if k >= 0 and GLUE[k] and PS[k + 1] - PS[k] == j - i:
                ok = True
                for q in range(j - i):
                    if te[i + q] - ts[i + q] != PL[PS[k] + q]:
                        ok = False
                        break
                if ok:
                    # longest first, then the earliest: descending order of this
                    cand[nc] = (j - i) * (1 << 40) + ((1 << 40) - 1 - i)
                    nc += 1
    if nc == 0:
        return n1
    order = np.sort(cand[:nc])[::-1]
    m = n1 - n0
    taken = np.zeros(m, np.bool_)
    keep = np.zeros(m, np.int64)
    for c in order:
        length = c >> 40
        i = (1 << 40) - 1 - (c - (length << 40))
        if not taken[i - n0] and not taken[i + length - 1 - n0]:
            keep[i - n0] = length
        for q in range(i, i + length):
            taken[q - n0] = True
    n = 0
    i = n0
    while i < n1:
        if keep[i - n0] > 0:
            a, b = ts[i], te[i + keep[i - n0] - 1]
            k = _special(cps, a, b, SH, KCP, KS, MAXK)
            p = a
            for q in range(TS[k], TS[k + 1]):
                tmp_s[n] = p
                tmp_e[n] = p + TL[q]
                p += TL[q]
                n += 1
            i += keep[i - n0]
        else:
            tmp_s[n] = ts[i]
            tmp_e[n] = te[i]
            n += 1
            i += 1
    ts[n0:n0 + n] = tmp_s[:n]
    te[n0:n0 + n] = tmp_e[:n]
    return n0 + n


@njit(cache=True)
def _chunk(cps, a, b, F, T, ts, te, n, sufs, cand, tmp_s, tmp_e):
    """Words of the whitespace-free chunk cps[a:b] appended at ts/te[n:]."""
    n0 = n
    # Shortcut, same result: a chunk of letters only (no CJK) has nothing for the prefix,
    # suffix, infix or URL rules to split; only a special case ("cannot") can.
    plain = True
    for q in range(a, b):
        f = F[cps[q]]
        if not (f & F_ALPHA) or (f & F_CJK):
            plain = False
            break
    if plain:
        (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS, SCP, SS) = T
        k = _special(cps, a, b, SH, KCP, KS, MAXK)
        if k < 0:
            return _emit(ts, te, n, a, b)
        n = _emit_special(k, a, ts, te, n, TL, TS)
        if n - n0 == 1:
            return n
        return _glue(cps, n0, n, F, T, ts, te, cand, tmp_s, tmp_e)
    r = a
    for q in range(a, b):
        if F[cps[q]] & F_CJK:
            if r < q:
                n = _split_piece(cps, r, q, F, T, ts, te, n, sufs)
            n = _emit(ts, te, n, q, q + 1)
            r = q + 1
    if r < b:
        n = _split_piece(cps, r, b, F, T, ts, te, n, sufs)
    return _glue(cps, n0, n, F, T, ts, te, cand, tmp_s, tmp_e)


@njit(cache=True, inline="always")
def _marked(cps, i, j, F, SH, KCP, KS, MAXK, ts, te, n):
    """The words of the chunk cps[i:j] when it is one character, or a word of letters (or
    of ASCII digits) with at most one mark before it and one after it ("(see", "word,",
    "1990."), and no special case is involved: what _chunk would give, without its
    calls. Otherwise -1: _chunk does the work. For such a chunk _split_piece takes off
    the mark before (_prefix_len: 1), then the one after (_suffix_len: 1; no ending after
    a digit is a mark), and finds no infix and no URL in a word of letters or digits;
    no span of the pieces is a special case, so _glue changes nothing.
    tests/test_quality_signals.py checks it against _chunk on every character and every
    pair of ASCII marks around words and special cases."""
    if _special(cps, i, j, SH, KCP, KS, MAXK) >= 0:
        return -1
    if j - i == 1:
        return _emit(ts, te, n, i, j)
    p = i + 1 if F[cps[i]] & F_LEAD else i
    q = j
    c = cps[j - 1]
    if F[c] & F_TRAIL:
        q = j - 1
    elif c == 46 and j - 1 > p:          # "." comes off after a digit, a lower-case letter...
        b = cps[j - 2]
        if (_digit(b) or (F[b] & (F_LOWER | F_DOTAFTER))
                or (j - 2 > p and (F[cps[j - 3]] & F_UPPER) and (F[b] & F_UPPER))):
            q = j - 1
    if q <= p:
        return -1
    digits = _digit(cps[p])
    for r in range(p, q):
        f = F[cps[r]]
        if digits:
            if not _digit(cps[r]):
                return -1
        elif not (f & F_ALPHA) or (f & F_CJK):
            return -1
    # no special case on any span of the pieces, so nothing to keep whole or glue
    if (q - p < j - i and _special(cps, p, q, SH, KCP, KS, MAXK) >= 0):
        return -1
    if p > i and (_special(cps, i, p, SH, KCP, KS, MAXK) >= 0
                  or (q < j and _special(cps, i, q, SH, KCP, KS, MAXK) >= 0)):
        return -1
    if q < j and (_special(cps, q, j, SH, KCP, KS, MAXK) >= 0
                  or (p > i and _special(cps, p, j, SH, KCP, KS, MAXK) >= 0)):
        return -1
    if p > i:
        n = _emit(ts, te, n, i, p)
    n = _emit(ts, te, n, p, q)
    if q < j:
        n = _emit(ts, te, n, q, j)
    return n


@njit(cache=True)
def _words(cps, a, b, F, T, ts, te, sufs, cand, tmp_s, tmp_e):
    """All words of cps[a:b] into ts/te; returns how many."""
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS, SCP, SS) = T
    n = 0
    i = a
    while i < b:
        while i < b and (F[cps[i]] & F_SPACE):
            i += 1
        j = i
        plain = True        # letters only, no CJK: _chunk's shortcut, tested here
        while j < b:
            f = F[cps[j]]
            if f & F_SPACE:
                break
            if not (f & F_ALPHA) or (f & F_CJK):
                plain = False
            j += 1
        if j > i:
            if plain and _special(cps, i, j, SH, KCP, KS, MAXK) < 0:
                # most chunks: one word, as _chunk would give, without the cost of calling
                # it (each call takes and releases a reference to every table)
                n = _emit(ts, te, n, i, j)
            else:
                m = -1 if plain else _marked(cps, i, j, F, SH, KCP, KS, MAXK, ts, te, n)
                n = m if m >= 0 else _chunk(cps, i, j, F, T, ts, te, n, sufs, cand, tmp_s, tmp_e)
        i = j
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


@njit(cache=True)
def _gopher_quality(cps, L, F, T, nw, W, out):
    ts, te, sufs, cand, tmp_s, tmp_e, ls, le, slots, ph, pw = W
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS, SCP, SS) = T
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
                    if not (stops >> k) & 1 and _same(cps, a, b, SCP, SS[k], SS[k + 1]):
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
        a, b = ls[i], le[i]
        while a < b and (F[cps[a]] & F_SPACE):
            a += 1
        while b > a and (F[cps[b - 1]] & F_SPACE):
            b -= 1
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
    joined, _poly(stream, to[i], to[j]), is ph[j] - ph[i] * B ** (to[j] - to[i])."""
    p = 0
    h = np.uint64(0)
    for w in range(nw):
        to[w] = p
        ph[w] = h
        for q in range(ts[w], te[w]):
            c = cps[q]
            stream[p] = c
            h = h * np.uint64(0x100000001B3) + np.uint64(c)
            p += 1
    to[nw] = p
    ph[nw] = h
    return p


@njit(cache=True, inline="always")
def _joined_hash(to, ph, pw, i, j):
    """_poly of words i to j joined, from the prefix hashes (pw: the powers of B)."""
    return ph[j] - ph[i] * pw[to[j] - to[i]]


@njit(cache=True)
def _top_ngram(stream, to, ph, pw, nw, n, slots, counts):
    """datatrove's find_top_duplicate: length of " ".join(most frequent n-gram) x count."""
    m = nw - n + 1
    if m <= 0:
        return -1
    size = 16
    while size < 2 * m:
        size *= 2
    tab = slots[:size]
    tab[:] = -1
    mask = np.uint64(size - 1)
    best_i = -1
    best_c = 0
    for i in range(m):
        # the joined words' hash: n-grams equal word by word are equal joined
        k = np.int64(_mix(_joined_hash(to, ph, pw, i, i + n)) & mask)
        while True:
            j = tab[k]
            if j < 0:
                tab[k] = i
                counts[i] = 1
                c = 1
                j = i
                break
            same = True
            for w in range(n):
                if not _same(stream, to[i + w], to[i + w + 1], stream, to[j + w], to[j + w + 1]):
                    same = False
                    break
            if same:
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
    size = 16
    while size < 2 * m:
        size *= 2
    tab = slots[:size]
    tab[:] = -1
    mask = np.uint64(size - 1)
    total = 0
    i = 0
    while i < m:
        a, b = to[i], to[i + n]
        k = np.int64(_mix(_joined_hash(to, ph, pw, i, i + n)) & mask)
        found = False
        while tab[k] >= 0:
            j = tab[k]
            if _same(stream, a, b, stream, to[j], to[j + n]):
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
    a, b = 0, L
    while a < b and (F[cps[a]] & F_SPACE):
        a += 1
    while b > a and (F[cps[b - 1]] & F_SPACE):
        b -= 1
    np_ = 0
    s = a
    q = a
    while q < b:
        if cps[q] == 10 and q + 1 < b and cps[q + 1] == 10:
            r = q
            while r < b and cps[r] == 10:
                r += 1
            ls[np_] = s
            le[np_] = q
            np_ += 1
            s = r
            q = r
        else:
            q += 1
    ls[np_] = s
    le[np_] = b
    np_ += 1
    d, dc = _find_dups(cps, ls, le, np_, slots)
    out[1] = d / np_
    out[2] = dc / L if L else 0.0
    # lines: split at runs of newlines
    nl = 0
    s = 0
    q = 0
    while q < L:
        if cps[q] == 10:
            r = q
            while r < L and cps[r] == 10:
                r += 1
            ls[nl] = s
            le[nl] = q
            nl += 1
            s = r
            q = r
        else:
            q += 1
    ls[nl] = s
    le[nl] = L
    nl += 1
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
        a, b = ls[i], le[i]
        while a < b and (F[cps[a]] & F_SPACE):
            a += 1
        while b > a and (F[cps[b - 1]] & F_SPACE):
            b -= 1
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
def _run(want, cols, data, offsets, valid, F, LOWER, T, out, maxlen):
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
        pw[i] = pw[i - 1] * np.uint64(0x100000001B3)
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        if not valid[d]:
            s = e
        L = _decode(data, s, e, cps)
        nw = _words(cps, 0, L, F, T, ts, te, sufs, cand, tmp_s, tmp_e)
        row = out[d]
        if want[0]:
            _fineweb(cps, L, F, nw, W, row[cols[0]:])
        if want[1]:
            _gopher_quality(cps, L, F, T, nw, W, row[cols[1]:])
        if want[2]:
            _gopher_repetition(cps, L, F, nw, W, row[cols[2]:])
        if want[3]:
            _c4(cps, L, F, LOWER, nw, W, row[cols[3]:])


_INTS = {"word_count", "stop_word_count", "chars", "has_lorem_ipsum", "has_curly_bracket",
         "sentence_count"}


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
        F, LOWER, *T = tables()
        _run(want, cols, data, offsets, valid, F, LOWER, tuple(T), out, maxlen)
        missing = np.flatnonzero(np.isnan(out).any(axis=0))
        if len(missing):
            label = [f"{p}.{k}" for p in packs for k in names[p]]
            raise RuntimeError(f"{', '.join(label[i] for i in missing)}: declared in "
                               "quality_signals.SIGNALS, but the compiled kernel "
                               "(quality_signals_fast) gave no value for some documents")
    return {p: {k: (out[:, i].astype(np.int64) if k in _INTS else out[:, i].copy())
                for i, k in enumerate(names[p], start=int(cols[Q.PACKS.index(p)]))}
            for p in packs}


def measure_one(pack: str, text: str) -> dict[str, float | int]:
    """measure() for one text."""
    return {k: v[0].item() for k, v in measure(pack, pa.array([text], pa.string())).items()}
