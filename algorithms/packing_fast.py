"""A compiled byte-level BPE encoder: HF's algorithm, several times HF's speed.

pack_parallel.py spends almost all its time turning text into ids. HF tokenizers does
2-3.5 MB/s per core; tiktoken, given the same vocabulary, ~12-16 MB/s. This module is
the same two steps HF's ByteLevel BPE takes, compiled with numba over UTF-8 bytes:

1. split the text into pieces with GPT-2's pattern
   `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`,
   written out as a scanner over a table of each code point's class (letter, number,
   whitespace, other) built from the `regex` package's Unicode data;
2. encode each piece's bytes with the tokenizer's own merge list: start from one token
   per byte and apply the lowest-ranked merge among adjacent pairs, leftmost first,
   until none applies (exactly HF's BPE, unlike tiktoken's rank-of-bytes shortcut).

A bounded cache keeps the ids of short pieces already seen (words repeat: "the" is
encoded once), so English costs little more than one pass over its bytes. Pieces are
scanned a block at a time (scan_pieces), and each one's cache slot is prefetched AHEAD
pieces before its turn, so the slot is in the core's cache when it is probed (the cache,
16 MB, is not). Chinese,
whose pieces are whole clauses, spends its time in the merges; it still runs at about
5 times HF's speed.

Use `BpeEncoder.from_tokenizer(tok)` (None when the tokenizer is not a plain byte-level
BPE) and `encoder.pack(texts, eos)`. Identity with HF is checked by the tests on varied
text and every Unicode code point, and by pack_parallel.py on a sample at start.
"""

from __future__ import annotations

import json

import numpy as np
from .jit import njit, prefetch
from .kernels import fnv1a64, utf8_char

# code point classes, as the GPT-2 pattern sees them
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
N_CODEPOINTS = 0x110000
EMPTY = -1
ID_BITS = 20  # token ids below 2^20: a merge's two ids pack into one int64 key

_CLASSES: np.ndarray | None = None

# Letters and numbers of the `regex` package's newer Unicode that HF tokenizers' regex
# engine (Oniguruma; Rust's regex crate, which rustbpe uses, agrees with it) does not know:
# code points assigned after its Unicode version, which it classes as other (\p{Cn}), so
# HF cuts a piece around them where a letter would continue it. Inclusive ranges; the
# tests compare the whole table with HF's own classes (tests/test_bpe_trainer.py).
UNKNOWN_TO_HF = [
    (0x558, 0x558), (0x58B, 0x58C), (0x88F, 0x88F), (0xC5C, 0xC5C), (0xCDC, 0xCDC),
    (0x208F, 0x208F), (0x209D, 0x209F), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2),
    (0xA7D4, 0xA7D4), (0xA7DD, 0xA7DD), (0xA7E2, 0xA7E2), (0xA7F1, 0xA7F1),
    (0xAB6C, 0xAB6D), (0x107BB, 0x107BF), (0x10940, 0x10959), (0x10EC5, 0x10EC7),
    (0x10ED9, 0x10EEE), (0x11B0A, 0x11B0A), (0x11DB0, 0x11DDB), (0x11DE0, 0x11DE9),
    (0x11DF1, 0x11DF1), (0x1246F, 0x1246F), (0x12475, 0x1247F), (0x12550, 0x12686),
    (0x16EA0, 0x16EB8), (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF6), (0x187F8, 0x187FF),
    (0x18CD6, 0x18CDA), (0x18D09, 0x18D20), (0x18D80, 0x18DF2), (0x18E00, 0x19191),
    (0x191A0, 0x191D2), (0x1B123, 0x1B128), (0x1B168, 0x1B168), (0x1D6A6, 0x1D6A6),
    (0x1DF1F, 0x1DF24), (0x1DF2B, 0x1DF81), (0x1DF90, 0x1DF96), (0x1DFCD, 0x1DFFF),
    (0x1E6C0, 0x1E6DE), (0x1E6E0, 0x1E6E2), (0x1E6E4, 0x1E6E5), (0x1E6E7, 0x1E6ED),
    (0x1E6F0, 0x1E6F4), (0x1E6FE, 0x1E6FF), (0x2B73A, 0x2B73F), (0x2B81E, 0x2B81E),
    (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479), (0x3D000, 0x3FC3F),
]


def codepoint_classes() -> np.ndarray:
    """uint8 class of every code point: \\p{L} letter, \\p{N} number, \\s space, else other."""
    global _CLASSES
    if _CLASSES is None:
        import regex

        from .unicode_cache import cached_table

        # the `regex` package's classes, cached on disk per regex version (0.02-0.03 s
        # to build, paid before any work by pack's driver and the tokenizer's tasks)
        cls = cached_table(f"gpt2-classes-regex{regex.__version__}-{_classes_code()}",
                           _regex_classes).copy()
        for lo, hi in UNKNOWN_TO_HF:
            cls[lo:hi + 1] = OTHER
        _CLASSES = cls
    return _CLASSES


def _classes_code() -> str:
    """A digest of the code that builds the classes: an edited _regex_classes, or other
    class values, are a new cache entry, not the old table."""
    import hashlib
    import inspect

    code = inspect.getsource(_regex_classes) + repr((LETTER, NUMBER, SPACE, N_CODEPOINTS))
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def _regex_classes() -> np.ndarray:
    import regex

    cls = np.zeros(N_CODEPOINTS, dtype=np.uint8)
    # every code point but the surrogates, which cannot appear in UTF-8 text
    points = np.r_[0:0xD800, 0xE000:N_CODEPOINTS].astype("<u4")
    text = points.tobytes().decode("utf-32-le")
    for value, pattern in ((LETTER, r"\p{L}+"), (NUMBER, r"\p{N}+"), (SPACE, r"\s+")):
        for m in regex.finditer(pattern, text):
            cls[points[m.start():m.end()]] = value
    return cls


# --------------------------------------------------------------------------------------
# Open-addressing hash tables in flat arrays (numba has no fast dict for these keys).
# --------------------------------------------------------------------------------------

FIB = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: Fibonacci hashing


@njit(cache=True, inline="always")
def _slot(key, mask):
    return np.int64((np.uint64(key) * FIB) >> np.uint64(40)) & mask


@njit(cache=True, inline="always")
def _pair_key(a, b):
    return (np.int64(a) << ID_BITS) | np.int64(b)


RANK_BITS = 20  # merges below 2^20: a table entry is (left id, right id, rank) in 60 bits
RANK_MASK = (1 << RANK_BITS) - 1


@njit(cache=True, inline="always")
def _merge_lookup(table, a, b):
    """Rank of the merge (a, b), or -1 when the pair does not merge. Each entry of the
    table is one int64, (a << 40) | (b << 20) | rank, so that the table of a 32k
    vocabulary (1 MB) stays in a core's L2 cache."""
    key = _pair_key(a, b)
    mask = len(table) - 1
    i = _slot(key, mask)
    while True:
        k = table[i]
        if k == EMPTY:
            return -1
        if k >> RANK_BITS == key:
            return k & RANK_MASK
        i = (i + 1) & mask


def merge_table(pairs: np.ndarray) -> np.ndarray:
    """Hash table of merge (left id, right id) -> rank, for `pairs` in rank order;
    at most a quarter full, so probes are short."""
    if len(pairs) > RANK_MASK:
        raise ValueError(f"{len(pairs):,} merges: the compiled encoder takes at most {RANK_MASK:,}")
    size = 1 << max(4, int(4 * len(pairs)).bit_length())
    table = np.full(size, EMPTY, dtype=np.int64)
    _fill_merges(table, pairs.astype(np.int64))
    return table


@njit(cache=True)
def _fill_merges(table, pairs):
    mask = len(table) - 1
    for r in range(len(pairs)):
        key = _pair_key(pairs[r, 0], pairs[r, 1])
        i = _slot(key, mask)
        while table[i] != EMPTY and table[i] >> RANK_BITS != key:
            i = (i + 1) & mask
        # HF lists each merge once; were one repeated, the last rank would win, as in
        # HF's own merge map
        table[i] = (key << RANK_BITS) | r


# --------------------------------------------------------------------------------------
# Step 1: GPT-2's pre-tokenizer pattern as a scanner over UTF-8 bytes.
# --------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _class_at(buf, p, end, classes):
    """(class, byte length) of the character at p; (-1, 0) at the end."""
    if p >= end:
        return -1, 0
    c, n = utf8_char(buf, p)
    return classes[c], n


@njit(cache=True, inline="always")
def _run(buf, p, end, classes, cls):
    """End of the run of characters of class `cls` (or, for OTHER, not letter/number/
    space) starting at p."""
    while p < end:
        k, n = _class_at(buf, p, end, classes)
        if k != cls:
            break
        p += n
    return p


@njit(cache=True, inline="always")
def _piece_end(buf, p, end, classes):
    """End of the pattern's match starting at p (alternatives tried in order)."""
    b = buf[p]
    # 's 't 're 've 'm 'll 'd
    if b == 39 and p + 1 < end:
        b1 = buf[p + 1]
        if b1 == 115 or b1 == 116 or b1 == 109 or b1 == 100:  # s t m d
            return p + 2
        if p + 2 < end:
            b2 = buf[p + 2]
            if (b1 == 114 and b2 == 101) or (b1 == 118 and b2 == 101) \
                    or (b1 == 108 and b2 == 108):  # re ve ll
                return p + 3
    # ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run
    q = p + 1 if b == 32 else p
    k, n = _class_at(buf, q, end, classes)
    if k != -1 and k != SPACE:
        return _run(buf, q + n, end, classes, k)
    # \s+(?!\S): a whitespace run, minus its last character when a non-space follows;
    # \s+ otherwise (a single whitespace character before a non-space)
    k, n = _class_at(buf, p, end, classes)
    if k == SPACE:
        last = p
        q = p + n
        while True:
            k2, n2 = _class_at(buf, q, end, classes)
            if k2 != SPACE:
                break
            last = q
            q += n2
        if q >= end or last == p:
            return q
        return last
    return p + n  # unreachable for valid text; keeps the scanner moving


# --------------------------------------------------------------------------------------
# Step 2: BPE on one piece.
# --------------------------------------------------------------------------------------

LONG_PIECE = 24  # bytes: from here a heap beats a linear scan per merge
NO_MERGE = np.int64(1) << 62


@njit(cache=True)
def _scratch(size):
    """Work arrays for pieces of up to `size` bytes: (tok, rank, nxt, prv, alive, heap)."""
    return (np.empty(size, np.int32), np.empty(size, np.int64), np.empty(size, np.int64),
            np.empty(size, np.int64), np.empty(size, np.bool_), np.empty(3 * size, np.int64))


@njit(cache=True, inline="always")
def _pair_rank(table, a, b):
    r = _merge_lookup(table, a, b)
    return NO_MERGE if r < 0 else r


@njit(cache=True)
def _bpe_short(buf, start, stop, byte_ids, table, merge_ids, out, o, tok, rank):
    """BPE on buf[start:stop] into out[o:]; returns the new o. tok holds the symbols,
    rank[i] the rank of the pair (tok[i], tok[i+1]); each step merges the lowest-ranked
    pair, leftmost on ties, until no pair is a merge."""
    m = stop - start
    for i in range(m):
        tok[i] = byte_ids[buf[start + i]]
    for i in range(m - 1):
        rank[i] = _pair_rank(table, tok[i], tok[i + 1])
    while m > 1:
        best, bi = NO_MERGE, -1
        for i in range(m - 1):
            if rank[i] < best:
                best, bi = rank[i], i
        if bi < 0:
            break
        tok[bi] = merge_ids[best]
        m -= 1
        for i in range(bi + 1, m):  # drop symbol bi+1 and the pair that started there
            tok[i] = tok[i + 1]
            rank[i] = rank[i + 1]
        if bi + 1 < m:
            rank[bi] = _pair_rank(table, tok[bi], tok[bi + 1])
        if bi > 0:
            rank[bi - 1] = _pair_rank(table, tok[bi - 1], tok[bi])
    for i in range(m):
        out[o + i] = tok[i]
    return o + m


@njit(cache=True, inline="always")
def _heap_push(heap, n, key):
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= key:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = key
    return n + 1


@njit(cache=True, inline="always")
def _sift_down(heap, n, i):
    """Move heap[i] down to its place among heap[:n]."""
    key = heap[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap[c + 1] < heap[c]:
            c += 1
        if key <= heap[c]:
            break
        heap[i] = heap[c]
        i = c
    heap[i] = key


@njit(cache=True)
def _bpe_long(buf, start, stop, byte_ids, table, merge_ids, out, o,
              tok, rank, nxt, prv, alive, heap):
    """_bpe_short for long pieces in O(n log n), as HF does it: the symbols form a
    linked list and the candidate merges a heap ordered by (rank, position), so the
    lowest-ranked, leftmost merge still comes first. An entry whose pair has changed
    since it was pushed is stale and skipped."""
    m = stop - start
    for i in range(m):
        alive[i] = True
        tok[i] = byte_ids[buf[start + i]]
        nxt[i] = i + 1 if i + 1 < m else -1
        prv[i] = i - 1
    n = 0
    for i in range(m - 1):
        rank[i] = _pair_rank(table, tok[i], tok[i + 1])
        if rank[i] != NO_MERGE:
            heap[n] = (rank[i] << 32) | i
            n += 1
    rank[m - 1] = NO_MERGE
    for i in range(n // 2 - 1, -1, -1):  # heapify in O(n)
        _sift_down(heap, n, i)
    while n > 0:
        key = heap[0]
        n -= 1
        if n > 0:
            heap[0] = heap[n]
            _sift_down(heap, n, 0)
        r, i = key >> 32, key & 0xFFFFFFFF
        if not alive[i] or rank[i] != r:
            continue  # stale
        j = nxt[i]  # merge symbol j into symbol i
        tok[i] = merge_ids[r]
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] != -1:
            prv[nxt[j]] = i
        # the two pairs that now hold the new symbol: (i, its next) and (its prev, i)
        rank[i] = NO_MERGE if nxt[i] == -1 else _pair_rank(table, tok[i], tok[nxt[i]])
        if rank[i] != NO_MERGE:
            n = _heap_push(heap, n, (rank[i] << 32) | i)
        a = prv[i]
        if a != -1:
            rank[a] = _pair_rank(table, tok[a], tok[i])
            if rank[a] != NO_MERGE:
                n = _heap_push(heap, n, (rank[a] << 32) | a)
    i = 0
    while i != -1:
        out[o] = tok[i]
        o += 1
        i = nxt[i]
    return o


# --------------------------------------------------------------------------------------
# The piece cache, and the whole batch.
# --------------------------------------------------------------------------------------

CACHE_MAX_PIECE = 32  # bytes; longer pieces rarely repeat
INLINE_IDS = 4        # ids kept in the slot itself; a piece with more keeps them apart
# A slot is one 64-byte cache line, seen as int64 [8], uint8 [64] and int32 [16]: its
# piece's hash (int64 0), its length | its id count << 8 | where its ids start << 16
# (int64 1; 0 when the slot is empty), its bytes (uint8 16..47) and up to INLINE_IDS
# ids (int32 12..15). A lookup that hits reads one line.
S_HASH, S_META = 0, 1
S_KEY = 16
S_IDS = 12


@njit(cache=True, inline="always")
def _cache_slot(buf, p, q, h, c_slots, c_bytes):
    """The slot holding piece buf[p:q] (hash h), or the empty slot (meta 0) where it
    would go."""
    mask = len(c_slots) - 1
    m = q - p
    hh = np.int64(h)
    s = np.int64(h & np.uint64(mask))
    while True:
        meta = c_slots[s, S_META]
        if meta == 0:
            return s
        if c_slots[s, S_HASH] == hh and (meta & 0xFF) == m:
            same = True
            for i in range(m):
                if c_bytes[s, S_KEY + i] != buf[p + i]:
                    same = False
                    break
            if same:
                return s
        s = (s + 1) & mask


@njit(cache=True)
def _cache_put(s, buf, p, q, h, ids, a, n, c_slots, c_bytes, c_ints, c_ids, c_fill):
    """Store piece buf[p:q] with its n ids ids[a:a+n] in empty slot s, while the table is
    at most half full and the id store has room (then the cache stops growing)."""
    if 2 * (c_fill[0] + 1) > len(c_slots) or (n > INLINE_IDS and c_fill[1] + n > len(c_ids)):
        return
    m = q - p
    for i in range(m):
        c_bytes[s, S_KEY + i] = buf[p + i]
    start = 0
    if n <= INLINE_IDS:
        for i in range(n):
            c_ints[s, S_IDS + i] = ids[a + i]
    else:
        start = c_fill[1]
        for i in range(n):
            c_ids[start + i] = ids[a + i]
        c_fill[1] += n
    c_slots[s, S_HASH] = np.int64(h)
    c_slots[s, S_META] = m | (np.int64(n) << 8) | (np.int64(start) << 16)
    c_fill[0] += 1


# Pieces scanned ahead of the one being encoded, their cache slots prefetched: a lookup
# otherwise waits on memory (encoding 22 MB of the benchmark corpus, 0.80-0.93 -> 0.56-0.74
# CPU s with a fresh cache; 4, 8 and 16 measured alike).
AHEAD = 8             # pieces between a cache slot's prefetch and its probe
SCAN = 4096           # pieces found by one call of scan_pieces


@njit(cache=True)
def scan_pieces(buf, head, end, classes, hashed_min, hashed_max, ps, qs, hs):
    """GPT-2's pieces of buf[head:end], up to len(ps) of them: piece i is
    buf[ps[i]:qs[i]], and hs[i] its hash when it is longer than hashed_min bytes and no
    longer than hashed_max (0 otherwise). Returns (pieces found, where the next one
    starts). The encoder and the trainer's word count both read pieces this way: a
    consumer prefetches the table slot of piece i + AHEAD before it probes piece i."""
    n = 0
    while n < len(ps) and head < end:
        q = _piece_end(buf, head, end, classes)
        ps[n] = head
        qs[n] = q
        hs[n] = fnv1a64(buf, head, q) if hashed_min < q - head <= hashed_max else np.uint64(0)
        n += 1
        head = q
    return n, head


@njit(cache=True)
def _encode_docs(buf, starts, ends, eos, classes, byte_ids, table, merge_ids,
                 c_slots, c_bytes, c_ints, c_ids, c_fill, out):
    """Encode documents buf[starts[d]:ends[d]] into out, EOS after each one; returns the
    number of ids written. Pieces are scanned SCAN at a time (scan_pieces); the cache
    slot of the piece AHEAD places on is prefetched before a piece is encoded."""
    o = 0
    size = 64
    tok, rank, nxt, prv, alive, heap = _scratch(size)
    ps = np.empty(SCAN, np.int64)
    qs = np.empty(SCAN, np.int64)
    hs = np.empty(SCAN, np.uint64)
    slot_mask = np.uint64(len(c_slots) - 1)
    for d in range(len(starts)):
        head, end = starts[d], ends[d]
        while head < end:
            n, head = scan_pieces(buf, head, end, classes, 1, CACHE_MAX_PIECE, ps, qs, hs)
            for i in range(min(AHEAD, n)):
                if hs[i] != 0:
                    prefetch(c_slots, np.int64(hs[i] & slot_mask))
            for i in range(n):
                j = i + AHEAD
                if j < n and hs[j] != 0:
                    prefetch(c_slots, np.int64(hs[j] & slot_mask))
                p, q, h = ps[i], qs[i], hs[i]
                m = q - p
                if m > size:  # room for the longest piece so far
                    size = max(m, 2 * size)
                    tok, rank, nxt, prv, alive, heap = _scratch(size)
                cached = 1 < m <= CACHE_MAX_PIECE
                s = np.int64(0)
                if cached:
                    s = _cache_slot(buf, p, q, h, c_slots, c_bytes)
                    meta = c_slots[s, S_META]
                    if meta != 0:  # seen before: copy its ids
                        k = (meta >> 8) & 0xFF
                        if k <= INLINE_IDS:
                            for t in range(k):
                                out[o + t] = c_ints[s, S_IDS + t]
                        else:
                            a = meta >> 16
                            for t in range(k):
                                out[o + t] = c_ids[a + t]
                        o += k
                        continue
                if m < LONG_PIECE:
                    o2 = _bpe_short(buf, p, q, byte_ids, table, merge_ids, out, o, tok, rank)
                else:
                    o2 = _bpe_long(buf, p, q, byte_ids, table, merge_ids, out, o,
                                   tok, rank, nxt, prv, alive, heap)
                if cached:
                    _cache_put(s, buf, p, q, h, out, o, o2 - o, c_slots, c_bytes, c_ints, c_ids,
                               c_fill)
                o = o2
        out[o] = eos
        o += 1
    return o


# --------------------------------------------------------------------------------------
# Distinct pieces: what HF's BpeTrainer holds in memory (train_tokenizer's estimate).
# --------------------------------------------------------------------------------------

@njit(cache=True)
def _mix(h):
    """A 64-bit finaliser (splitmix64): FNV-1a's high bits alone are not uniform."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@njit(cache=True)
def _sampled_pieces(buf, offsets, classes, below):
    """(hash, byte length) of every piece of the documents buf[offsets[d]:offsets[d+1]]
    whose hash is below `below`: the same pieces are kept wherever they occur."""
    cap = 1024
    hashes = np.empty(cap, np.uint64)
    lengths = np.empty(cap, np.int64)
    n = 0
    for d in range(len(offsets) - 1):
        p, end = offsets[d], offsets[d + 1]
        while p < end:
            q = _piece_end(buf, p, end, classes)
            h = _mix(fnv1a64(buf, p, q))
            if h < below:
                if n == cap:
                    cap *= 2
                    hashes2 = np.empty(cap, np.uint64)
                    lengths2 = np.empty(cap, np.int64)
                    hashes2[:n] = hashes[:n]
                    lengths2[:n] = lengths[:n]
                    hashes, lengths = hashes2, lengths2
                hashes[n] = h
                lengths[n] = q - p
                n += 1
            p = q
    return hashes[:n], lengths[:n]


def sampled_pieces(buf: np.ndarray, offsets: np.ndarray, rate_bits: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pieces (GPT-2's pattern, as the ByteLevel pre-tokenizer cuts them) of
    the UTF-8 documents buf[offsets[d]:offsets[d+1]], sampled by hash: one piece in
    2**rate_bits, the same ones in every call, so the samples of several calls unite
    into a sample of their distinct pieces. Returns their hashes (sorted, unique) and
    byte lengths."""
    below = np.uint64(min(1 << (64 - rate_bits), 2**64 - 1))   # all, at 0 bits
    h, n = _sampled_pieces(buf, offsets.astype(np.int64), codepoint_classes(), below)
    h, first = np.unique(h, return_index=True)
    return h, n[first]


@njit(cache=True)
def _sampled_words(buf, lengths, below):
    """(hash, byte length) of the words buf[...] (side by side, `lengths` bytes each)
    whose hash is below `below`: _sampled_pieces's hash, over distinct words."""
    hashes = np.empty(len(lengths), np.uint64)
    out_len = np.empty(len(lengths), np.int64)
    n = 0
    p = 0
    for w in range(len(lengths)):
        q = p + lengths[w]
        h = _mix(fnv1a64(buf, p, q))
        if h < below:
            hashes[n] = h
            out_len[n] = q - p
            n += 1
        p = q
    return hashes[:n], out_len[:n]


def sampled_words(buf: np.ndarray, lengths: np.ndarray, rate_bits: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """sampled_pieces from a list of distinct words (bytes side by side, their lengths)
    instead of the documents they were cut from: the same hashes and lengths."""
    below = np.uint64(min(1 << (64 - rate_bits), 2**64 - 1))
    h, n = _sampled_words(buf, lengths.astype(np.int64), below)
    h, first = np.unique(h, return_index=True)
    return h, n[first]


def bpe_tables(tok) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(the id of each byte, merges as (left id, right id) in rank order, the id each
    merge makes) of an HF byte-level BPE tokenizer; None when it is not one. Plain
    Python: whether a tokenizer converts is known without compiling anything."""
    from .tokenizer_file import byte_decoder, byte_level_unsupported

    spec = json.loads(tok.to_str())
    if byte_level_unsupported(tok, spec):
        return None
    model = spec["model"]
    vocab = model["vocab"]
    to_byte = byte_decoder()
    byte_char = {b: c for c, b in to_byte.items()}
    if any(byte_char[b] not in vocab for b in range(256)):
        return None
    byte_ids = np.array([vocab[byte_char[b]] for b in range(256)])
    # each merge "a b" as (id of a, id of b) and the id of a + b; -1 where a token is
    # missing (then the vocabulary is not a plain BPE). One list per column: a third of
    # the time of a loop over the merges, which pack's driver pays before any work.
    merges = [m if isinstance(m, list) else m.split(" ", 1) for m in model["merges"]]
    get = vocab.get
    pairs = np.array([[get(a, -1) for a, _ in merges], [get(b, -1) for _, b in merges]],
                     dtype=np.int64).T.reshape(-1, 2)
    ids = np.array([get(a + b, -1) for a, b in merges], dtype=np.int64)
    if (pairs < 0).any() or (ids < 0).any() or max(vocab.values(), default=0) >= 1 << ID_BITS:
        return None
    return byte_ids, np.ascontiguousarray(pairs), ids


class BpeEncoder:
    """Byte-level BPE over flat arrays; see the module docstring.

    byte_ids: the id of each single byte; merges: (left id, right id) pairs in rank
    order; merge_ids: the id each merge makes. The piece cache has `cache_slots` slots
    (a power of two; it fills to half), 17 MB at the default."""

    def __init__(self, byte_ids: np.ndarray, merges: np.ndarray, merge_ids: np.ndarray,
                 cache_slots: int = 1 << 18):
        if cache_slots < 2 or cache_slots & (cache_slots - 1):
            raise ValueError(f"cache_slots {cache_slots}: must be a power of two")
        self.byte_ids = byte_ids.astype(np.int32)
        self.merges = merges
        self.table = merge_table(merges)
        self.merge_ids = merge_ids.astype(np.int32)
        self.classes = codepoint_classes()
        self.c_slots = np.zeros((cache_slots, 8), dtype=np.int64)
        self.c_bytes = self.c_slots.view(np.uint8).reshape(cache_slots, 64)
        self.c_ints = self.c_slots.view(np.int32).reshape(cache_slots, 16)
        self.c_ids = np.zeros(cache_slots, dtype=np.int32)   # ids of pieces with more
        self.c_fill = np.zeros(2, dtype=np.int64)

    @classmethod
    def from_tokenizer(cls, tok) -> "BpeEncoder | None":
        """The encoder for an HF byte-level BPE tokenizer, or None when it is not one."""
        tables = bpe_tables(tok)
        return None if tables is None else cls(*tables)

    def pack(self, texts: list[str], eos: int) -> np.ndarray:
        """The documents' ids, each followed by one EOS, as int32 (one call, no Python
        work per piece)."""
        raw = [t.encode("utf-8") for t in texts]
        offsets = np.zeros(len(raw) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in raw], out=offsets[1:])
        return self.pack_bytes(np.frombuffer(b"".join(raw), dtype=np.uint8), offsets[:-1],
                               offsets[1:], eos)

    def pack_bytes(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   eos: int) -> np.ndarray:
        """pack() of the UTF-8 documents buf[starts[d]:ends[d]] (an Arrow column's own
        buffers, say: no Python string is made)."""
        size = int((ends - starts).sum()) + len(starts)   # ids <= bytes, + one EOS each
        out = np.empty(size, dtype=np.int32)
        n = _encode_docs(buf, starts, ends, eos, self.classes, self.byte_ids, self.table,
                         self.merge_ids, self.c_slots, self.c_bytes, self.c_ints,
                         self.c_ids, self.c_fill, out)
        return out[:n]

    def ids(self, text: str) -> np.ndarray:
        """One document's ids, without EOS."""
        return self.pack([text], 0)[:-1]
