"""algorithms/words.py's words, cut by numba: datatrove's word tokenizer (spaCy's blank
English tokenizer), with every CJK character a word of its own.

    F, T = tables()
    n = word_spans(cps, 0, len(cps), F, T, ts, te, sufs, cand, tmp_s, tmp_e)
    # word i is cps[ts[i]:te[i]] (cps: the text's code points, int32)

datatrove's FineWeb, Gopher and C4 filters count words with spaCy's tokenizer, so the rule
packs (algorithms/quality_signals_fast.py) must count the same words; spaCy itself, in
Python, would be most of their cost. Here its English rules are reproduced step by step as
words.py writes them out, on spans of code points, without making a string:

- whitespace cuts the text into chunks, and every CJK character is a word;
- spaCy's prefix, suffix and infix rules split a chunk, and its 1,347 special cases
  ("don't" -> "do", "n't") are found in a hash table: open-addressing slots probed from
  the fmix64 of the chunk's polynomial hash, every match confirmed character by character;
- spaCy's URL rule keeps a URL whole, and its second pass glues back the special cases
  the affix rules took apart (":)");
- two shortcuts cut the common chunks (letters only; a word with one mark before or after
  it) without the full splitter, with the same result: tests/test_words.py checks them
  on every code point.

Character classes (spaCy's letter classes, icons and punctuation lists, str.isspace,
CJK) come from a table of flags per code point built from words.py's own definitions,
cached on disk (algorithms/unicode_cache.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import words
from .jit import njit
from .kernels import POLY_BASE, fmix64, poly_hash, same

# character flags (bits 10 to 13 are left to quality_signals_fast's own flags)
F_SPACE, F_ALPHA, F_LOWER, F_UPPER = 1, 2, 4, 8
F_CJK, F_ICON, F_PRE, F_SUF = 16, 32, 64, 128
F_QUOTE, F_DOTAFTER = 256, 512
F_URLX, F_REWORD = 16384, 32768
F_DECIMAL, F_SALPHA, F_GLUE0, F_HYPH0 = 65536, 131072, 262144, 524288
F_LEAD, F_TRAIL = 1 << 20, 1 << 21

_TABLES = None


def _flag_table() -> np.ndarray:
    """The flags above of every code point, from words.py's definitions and Python's."""
    n = 0x110000
    chars = [chr(i) for i in range(n)]
    f = np.zeros(n, np.uint32)

    def add(flag, pred):
        f[np.fromiter((pred(c) for c in chars), np.bool_, count=n)] |= flag

    add(F_SPACE, str.isspace)
    add(F_ALPHA, str.isalpha)
    for flag, name in ((F_SALPHA, "alpha"), (F_LOWER, "alpha_lower"), (F_UPPER, "alpha_upper")):
        for a, b in words.spacy_data()[name]:      # spaCy's letter classes, as words.py reads them
            f[a:b + 1] |= flag
    alpha = np.flatnonzero(f & F_ALPHA)
    f[[i for i in alpha if words.is_cjk(chars[i])]] |= F_CJK
    for a, b in words.spacy_data()["icon"]:       # spaCy's icons, not every So
        f[a:b + 1] |= F_ICON
    for flag, s in ((F_PRE, "§%=—–" + words.PUNCT_CHARS + words.QUOTE_CHARS + words.CURRENCY_CHARS),
                    (F_SUF, words.PUNCT_CHARS + words.QUOTE_CHARS + "—–"),
                    (F_QUOTE, words.QUOTE_CHARS), (F_DOTAFTER, words.DOT_AFTER)):
        f[[ord(c) for c in s]] |= flag
    # the compiled shortcut for chunks of letters relies on this
    assert not np.any((f & F_ALPHA).astype(bool) & (f & (F_PRE | F_SUF | F_ICON)).astype(bool))
    urlx = np.zeros(n, np.bool_)
    urlx[0xA1:0x10000] = True
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789":
        urlx[ord(c)] = True
    f[urlx] |= F_URLX
    add(F_REWORD, lambda c: c.isalnum() or c == "_")
    add(F_DECIMAL, str.isdecimal)
    # the first characters of the special cases _glue looks for; none holds a CJK letter
    glued = ["".join(k) for k in words.glued_specials()]
    f[sorted({ord(k[0]) for k in glued})] |= F_GLUE0
    assert not any(f[ord(c)] & F_CJK for k in glued for c in k)
    f[[ord(h[0]) for h in words.HYPHENS]] |= F_HYPH0     # where _infixes looks for hyphens
    # for _marked: the ASCII marks that the prefix rule, or the suffix rule, takes off a
    # word alone ("." has a rule of its own)
    ascii = np.arange(128)
    f[ascii[(f[:128] & (F_PRE | F_ICON)) != 0]] |= F_LEAD
    f[ascii[(f[:128] & (F_SUF | F_ICON)) != 0]] |= F_TRAIL
    return f


def _cps(s: str) -> np.ndarray:
    return np.array([ord(c) for c in s], np.int32)


def _hash_py(cps) -> int:
    """kernels.poly_hash in Python."""
    h = 0
    for c in cps:
        h = (h * int(POLY_BASE) + int(c)) & 0xFFFFFFFFFFFFFFFF
    return h


def _mix_py(h: int) -> int:
    """kernels.fmix64 in Python."""
    m = 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & m
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & m
    return h ^ (h >> 33)


def special_tables() -> tuple:
    """T: spaCy's special cases (their code points, the lengths of the words each gives,
    which the second pass glues), the endings that count after a digit and the hyphens,
    as the kernels below read them."""
    cases = words.special_cases()
    glued = {"".join(k): k for k in words.glued_specials()}
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
    endings = ["+", "US$", "C$", "A$", *words.CURRENCY_CHARS, *words.UNITS]
    ecp = [ord(c) for e in endings for c in e]
    es = np.cumsum([0] + [len(e) for e in endings])
    hy = [ord(c) for h in words.HYPHENS for c in h]
    hs = np.cumsum([0] + [len(h) for h in words.HYPHENS])
    i64, i32 = np.int64, np.int32
    # the special cases by hash, in open-addressing slots (a quarter full) that _special
    # probes from fmix64(hash): one or two probes for a word that is not a special case
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
            np.array(hy, i32), np.array(hs, i64))


def source_files() -> list[Path]:
    """The files the tables are built from: a table cached on disk is named by their digest."""
    here = Path(__file__).resolve().parent
    return [here / name for name in ("words.py", "words_fast.py", "spacy_en_special_cases.json")]


def cached_flag_table() -> np.ndarray:
    """_flag_table(), cached on disk (algorithms/unicode_cache.py): building it walks every
    code point in Python several times (about a second); loading it takes milliseconds.
    The table also depends on words.py's rules and spaCy's table, so the file is named by
    a digest of the files that hold them (source_files): an edit to any builds it again."""
    import hashlib

    from .unicode_cache import cached_table

    digest = hashlib.blake2b(digest_size=8)
    for path in source_files():
        digest.update(path.read_bytes())
    return cached_table(f"word-flags-{digest.hexdigest()}", _flag_table)


def tables() -> tuple[np.ndarray, tuple]:
    """(F, T): the flags of every code point and the special cases' tables, built once
    per process (the flags read from the disk cache)."""
    global _TABLES
    if _TABLES is None:
        _TABLES = (cached_flag_table(), special_tables())
    return _TABLES


# --------------------------------------------------------------------------------------
# the kernels: spaCy's steps on code point spans
# --------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _digit(c):
    return 48 <= c <= 57


@njit(cache=True)
def _special(cps, a, b, SH, KCP, KS, MAXK):
    """Index of the special case equal to cps[a:b], or -1 (SH: open-addressing slots)."""
    if b <= a or b - a > MAXK:
        return -1
    mask = SH.shape[0] - 1
    k = np.int64(fmix64(poly_hash(cps, a, b)) & np.uint64(mask))
    while True:
        i = SH[k]
        if i < 0:
            return -1
        if same(cps, a, b, KCP, KS[i], KS[i + 1]):
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
            if n > k and k > best and _digit(cps[hi - k - 1]) and same(cps, hi - k, hi, ECP,
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
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS) = T
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
                if i + k < hi and same(cps, i, i + k, HY, HS[h], HS[h + 1]) and (
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
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS) = T
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
        (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS) = T
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
    tests/test_words.py checks it against _chunk on every character and every
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
def word_spans(cps, a, b, F, T, ts, te, sufs, cand, tmp_s, tmp_e):
    """The words of cps[a:b], word i being cps[ts[i]:te[i]]; returns how many. ts, te,
    sufs, tmp_s and tmp_e are int64 scratch of at least b - a + 2 items, cand of twelve
    times that (quality_signals_fast._run makes them once for a whole batch)."""
    (SH, KCP, KS, TL, TS, GLUE, PL, PS, MAXK, ECP, ES, HY, HS) = T
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
