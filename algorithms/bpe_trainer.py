"""Training the byte-level BPE tokenizer of tutorial 4.7: BpeTrainer, and BpeTrainer compiled.

- train_hf: the tutorial's own code, HF tokenizers' BpeTrainer (ByteLevel pre-tokenizer
  and decoder, all 256 bytes in the initial alphabet, the special tokens first).
- train_fast (the default): the same algorithm over flat arrays, compiled with numba,
  giving the same tokenizer.json byte for byte (tests/test_bpe_trainer.py on the sample,
  bench/bench_trainer.py on the benchmark corpus), several times faster:
  1. count_words: GPT-2's pattern cuts the texts into words (the compiled scanner of
     algorithms/packing_fast.py, whose cuts are HF ByteLevel's on every code point); each distinct
     word is kept once with its count, chunks of text counted on `threads` threads;
  2. _train_merges: BpeTrainer's merge loop (tokenizers' bpe/trainer.rs): pairs counted
     with overlaps, each pair with the positions where it occurs, a heap of (count, pair)
     refreshed lazily that takes the highest count and, on ties, the smaller pair of ids,
     the ids being BpeTrainer's (bytes in the order of their byte-level characters, then
     one per merge); merging a pair in a word changes its neighbours' pair counts as
     BpeTrainer's Word::merge does; it stops at vocab_size or when the best pair is seen
     fewer than min_frequency times (so a corpus too small for the vocabulary gives a
     short one, which train_tokenizer.py's check reports);
  3. to_hf: the HF tokenizer.json laid out as BpeTrainer lays it out: the special
     tokens at ids 0..10 (added, special), the 256 byte tokens, one token per merge.
  The words are counted in any order and the merges do not depend on it: the result is
  the same for any number of threads.

How much memory each trainer needs is estimated in algorithms/trainer_memory.py. rustbpe
(nanochat's trainer), evaluated first and not the default, is in bench/rustbpe_eval.py.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Iterable

import numpy as np
from .jit import njit, prefetch
from .kernels import fnv1a64, same

from algorithms.packing_fast import SCAN, codepoint_classes, scan_pieces
from algorithms.tokenizer_file import SPECIAL_TOKENS, byte_decoder


# --------------------------------------------------------------------------------------
# The tutorial's trainer (HF tokenizers' BpeTrainer).
# --------------------------------------------------------------------------------------

def set_threads(threads: int | None) -> None:
    """Training threads for both libraries: RAYON_NUM_THREADS, read by each library when
    its thread pool first starts (so set it before any training in the process)."""
    if threads:
        os.environ["RAYON_NUM_THREADS"] = str(int(threads))


def new_tokenizer():
    """Byte-level BPE: ByteLevel pre-tokenizer and its matching ByteLevel decoder (4.7)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_hf(batches: Iterable[list[str]], vocab_size: int, min_frequency: int,
             special_tokens: list[str] = SPECIAL_TOKENS, threads: int | None = None):
    """Tutorial 4.7 with HF's BpeTrainer: batches of texts -> tokenizers.Tokenizer."""
    from tokenizers import pre_tokenizers, trainers

    set_threads(threads)
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),                 # ids 0..10, inside vocab_size
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes (4.4)
        show_progress=sys.stderr.isatty(),
    )
    tok.train_from_iterator(batches, trainer=trainer)
    return tok


# --------------------------------------------------------------------------------------
# The compiled trainer: BpeTrainer's algorithm over flat arrays (numba).
# --------------------------------------------------------------------------------------

KEY_BITS = 21                 # a pair key is (left << KEY_BITS) | right
KEY_MASK = (1 << KEY_BITS) - 1
# columns of the per-pair table
P_KEY, P_COUNT, P_START, P_LEN = range(4)
# columns of the per-position table
SYM, NXT, PRV, CNT = range(4)
# a merge visits its pair's positions in order, from all over the sample: the row of the
# position this many steps ahead is prefetched (1.4-1.6x faster on 80 MB of sample)
PREFETCH_AHEAD = 16


@njit(cache=True, inline="always")
def _key(a, b):
    return (np.int64(a) << KEY_BITS) | np.int64(b)


@njit(cache=True)
def _new_pair(pairs, n, key):
    """(pairs, n + 1, n): the pair key added as row n (count 0, no positions yet); the
    rows double when full."""
    if n == len(pairs):
        more = np.zeros((2 * len(pairs), 4), np.int64)
        more[:n] = pairs[:n]
        pairs = more
    pairs[n, P_KEY] = key
    pairs[n, P_COUNT] = 0
    pairs[n, P_LEN] = 0
    return pairs, n + 1, n


@njit(cache=True)
def _grow(a, need):
    if need <= len(a):
        return a
    out = np.empty((max(need, 2 * len(a)),) + a.shape[1:], a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True, inline="always")
def _before(c1, k1, c2, k2):
    """Heap order: the higher count first, then the smaller pair (BpeTrainer's Merge)."""
    return c1 > c2 or (c1 == c2 and k1 < k2)


@njit(cache=True)
def _push(heap, n, count, key, p):
    if n == len(heap):
        heap = _grow(heap, n + 1)
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(count, key, heap[parent, 0], heap[parent, 1]):
            break
        heap[i] = heap[parent]
        i = parent
    heap[i, 0], heap[i, 1], heap[i, 2] = count, key, p
    return heap, n + 1


@njit(cache=True)
def _sift(heap, n, i):
    count, key, p = heap[i, 0], heap[i, 1], heap[i, 2]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(heap[c + 1, 0], heap[c + 1, 1], heap[c, 0], heap[c, 1]):
            c += 1
        if not _before(heap[c, 0], heap[c, 1], count, key):
            break
        heap[i] = heap[c]
        i = c
    heap[i, 0], heap[i, 1], heap[i, 2] = count, key, p


@njit(cache=True, nogil=True)   # run on a thread of its own: run_interruptibly
def _train_merges(wbuf, rank, wstart, wlen, wcount, n_merges, min_frequency):
    """BpeTrainer's merge loop (tokenizers' bpe/trainer.rs, do_train) over words held as
    bytes in wbuf[wstart[w]:wstart[w] + wlen[w]], each seen wcount[w] times; byte v is
    symbol rank[v] (symbols 0..255 are the bytes in BpeTrainer's id order), merge k makes
    symbol 256 + k.

    As BpeTrainer: pairs are counted with overlaps; a heap holds (count, pair), refreshed
    lazily, the higher count first and the smaller pair on ties; merging a pair changes
    its neighbours' pair counts as BpeTrainer's Word::merge does, left to right in each
    word; it stops after n_merges merges or when the best pair is seen fewer than
    min_frequency times. Unlike BpeTrainer, which keeps for each pair the words holding it
    and scans each of them whole at every merge, each pair keeps the positions where it
    occurs, in order (a word's symbols are linked, a merged-away symbol is -1); a pair
    holds the newest of its two symbols, so all its positions appear in one merge. A
    position whose pair has changed since is skipped. Each position also knows the pair
    that starts there, so a neighbour's old pair is read, not looked up: no table of
    pairs by key (a pair (x, new) is new in merge k, and made once per x). Returns
    (pairs, counts)."""
    n_sym = len(wbuf)
    # one row per position, its four fields side by side (one cache line holds four
    # positions; a merge visits positions all over the sample, and prefetches the row of
    # the one it will visit PREFETCH_AHEAD steps on): the symbol (-1 once
    # merged away), the next and previous positions of its word (-1 at the ends), and
    # the count of its word
    node = np.empty((n_sym, 4), np.int32)
    for w in range(len(wlen)):
        s, m = wstart[w], wlen[w]
        for i in range(s, s + m):
            node[i, SYM] = rank[wbuf[i]]
            node[i, NXT] = i + 1 if i + 1 < s + m else -1
            node[i, PRV] = i - 1 if i > s else -1
            node[i, CNT] = wcount[w]
    # The growing arrays (pairs, the position pool, the heap) are reserved at sizes they
    # rarely outgrow (on 80 MB of sample they reached 0.15, 2.1 and 0.1 rows per byte of
    # words), and left empty: a page of np.empty is only made when first written, so the
    # reserve costs nothing until used, where growing by copying wrote every row again
    # into new pages (page faults were a third of this loop's time; 0.9 -> 0.5 GB made).
    # Every row is written before it is read (_new_pair, the pool and heap fills).
    pairs = np.empty((max(1 << 14, n_sym // 4), 4), np.int64)
    n_pairs = 0
    at = np.full(n_sym, -1, np.int32)   # the pair starting at each position (-1: none)
    byte_pair = np.full(1 << 16, -1, np.int64)   # the pairs of two bytes, by a * 256 + b
    for i in range(n_sym):
        if node[i, NXT] != -1:
            d = node[i, SYM] * 256 + node[i + 1, SYM]
            p = byte_pair[d]
            if p < 0:
                pairs, n_pairs, p = _new_pair(pairs, n_pairs,
                                              _key(node[i, SYM], node[i + 1, SYM]))
                byte_pair[d] = p
            pairs[p, P_COUNT] += node[i, CNT]
            pairs[p, P_LEN] += 1
            at[i] = p
    # each pair's positions, in order, side by side in one pool
    pool_n = 0
    for p in range(n_pairs):
        pairs[p, P_START] = pool_n
        pool_n += pairs[p, P_LEN]
        pairs[p, P_LEN] = 0
    pool = np.empty(max(16, pool_n + pool_n // 4, 5 * n_sym // 2), np.int32)
    for i in range(n_sym):
        p = at[i]
        if p >= 0:
            pool[pairs[p, P_START] + pairs[p, P_LEN]] = i
            pairs[p, P_LEN] += 1
    # a pair's count only falls once it is formed: one seen fewer than min_frequency times
    # could never be merged, and stays out of the heap
    least = max(1, min_frequency)
    heap = np.empty((max(16, n_pairs, n_sym // 8), 3), np.int64)
    n_heap = 0
    for p in range(n_pairs):
        if pairs[p, P_COUNT] >= least:
            heap[n_heap, 0], heap[n_heap, 1], heap[n_heap, 2] = pairs[p, P_COUNT], pairs[p, P_KEY], p
            n_heap += 1
    for i in range(n_heap // 2 - 1, -1, -1):
        _sift(heap, n_heap, i)

    events = np.empty((1 << 16, 2), np.int32)   # (new pair, position) formed by a merge
    # within one merge, the pair a neighbouring symbol x gains, by x: (x, new) on the
    # left, (new, x) on the right; valid when stamped k
    n_ids = 256 + n_merges
    left_k = np.full(n_ids, -1, np.int64)
    left_new = np.empty(n_ids, np.int64)
    right_k = np.full(n_ids, -1, np.int64)
    right_new = np.empty(n_ids, np.int64)
    merges = np.zeros((n_merges, 2), np.int64)
    counts = np.zeros(n_merges, np.int64)
    k = 0
    while k < n_merges and n_heap > 0:
        count, key, p = heap[0, 0], heap[0, 1], heap[0, 2]
        n_heap -= 1
        if n_heap > 0:
            heap[0] = heap[n_heap]
            _sift(heap, n_heap, 0)
        now = pairs[p, P_COUNT]
        if now != count:          # stale: back in with its count
            if now >= least:
                heap, n_heap = _push(heap, n_heap, now, key, p)
            continue
        if count < 1 or count < min_frequency:
            break
        a, b = key >> KEY_BITS, key & KEY_MASK
        new = 256 + k
        merges[k, 0], merges[k, 1] = a, b
        counts[k] = count
        first_new = n_pairs
        n_ev = 0
        e_end = pairs[p, P_START] + pairs[p, P_LEN]
        for e in range(pairs[p, P_START], e_end):
            if e + PREFETCH_AHEAD < e_end:   # its rows come from memory meanwhile
                ahead = pool[e + PREFETCH_AHEAD]
                prefetch(node, ahead)
                prefetch(at, ahead)
            i = pool[e]
            if node[i, SYM] != a:
                continue
            j = node[i, NXT]
            if j == -1 or node[j, SYM] != b:
                continue
            c = np.int64(node[i, CNT])
            h = node[i, PRV]
            if h != -1:   # (prev, a) -> (prev, new)
                x = node[h, SYM]
                if left_k[x] != k:
                    left_k[x] = k
                    pairs, n_pairs, q = _new_pair(pairs, n_pairs, _key(x, new))
                    left_new[x] = q
                pairs[at[h], P_COUNT] -= c
                q = left_new[x]
                pairs[q, P_COUNT] += c
                at[h] = q
                if n_ev == len(events):
                    events = _grow(events, n_ev + 1)
                events[n_ev, 0], events[n_ev, 1] = q, h
                n_ev += 1
            g = node[j, NXT]
            if g != -1:   # (b, next) -> (new, next)
                y = node[g, SYM]
                if right_k[y] != k:
                    right_k[y] = k
                    pairs, n_pairs, q = _new_pair(pairs, n_pairs, _key(new, y))
                    right_new[y] = q
                pairs[at[j], P_COUNT] -= c
                q = right_new[y]
                pairs[q, P_COUNT] += c
                at[i] = q
                if n_ev == len(events):
                    events = _grow(events, n_ev + 1)
                events[n_ev, 0], events[n_ev, 1] = q, i
                n_ev += 1
            else:
                at[i] = -1
            node[i, SYM] = new
            node[j, SYM] = -1
            node[i, NXT] = g
            if g != -1:
                node[g, PRV] = i
        # the pairs formed by this merge: their positions (in order), then into the heap
        for e in range(n_ev):
            pairs[events[e, 0], P_LEN] += 1
        if pool_n + n_ev > len(pool):   # grow by half: the pool is the largest array
            more = np.empty(max(pool_n + n_ev, len(pool) + len(pool) // 2), np.int32)
            more[:pool_n] = pool[:pool_n]
            pool = more
        for q in range(first_new, n_pairs):
            pairs[q, P_START] = pool_n
            pool_n += pairs[q, P_LEN]
            pairs[q, P_LEN] = 0
        for e in range(n_ev):
            q = events[e, 0]
            pool[pairs[q, P_START] + pairs[q, P_LEN]] = events[e, 1]
            pairs[q, P_LEN] += 1
        for q in range(first_new, n_pairs):
            if pairs[q, P_COUNT] >= least:
                heap, n_heap = _push(heap, n_heap, pairs[q, P_COUNT], pairs[q, P_KEY], q)
        k += 1
    return merges[:k], counts[:k]


# --------------------------------------------------------------------------------------
# Counting the words: GPT-2's pattern (the compiled scanner of algorithms/packing_fast.py, HF's
# cuts), each distinct word once with its count, on several threads.
# --------------------------------------------------------------------------------------

WORD_CHUNK = 8 << 20   # text bytes counted by one task
# Pieces (or words) hashed ahead of the one being counted, their table rows prefetched,
# as the encoder does (algorithms/packing_fast.py: AHEAD, scan_pieces): a probe otherwise
# waits on memory.
AHEAD = 8


@njit(cache=True, nogil=True)
def _dedupe(buf, starts, lengths, weights):
    """The distinct byte strings buf[starts[i]:starts[i] + lengths[i]], with their weights
    summed: (bytes side by side, lengths, counts), in order of first appearance."""
    size = 1 << 10
    while size < 2 * len(starts) + 2:
        size *= 2
    # a slot holds a distinct string's hash and number side by side (one probe, one
    # cache line); the string AHEAD places on has its hash taken and its slot prefetched
    slots = np.empty((size, 2), np.int64)
    slots[:, 1] = -1
    first = np.empty(len(starts), np.int64)     # distinct -> its first occurrence
    count = np.zeros(len(starts), np.int64)
    ring = np.empty(AHEAD, np.uint64)
    n = 0
    mask = size - 1
    for i in range(min(AHEAD, len(starts))):
        ring[i] = fnv1a64(buf, starts[i], starts[i] + lengths[i])
        prefetch(slots, np.int64(ring[i] & np.uint64(mask)))
    for i in range(len(starts)):
        p, m = starts[i], lengths[i]
        h = ring[i & (AHEAD - 1)]
        j = i + AHEAD
        if j < len(starts):
            hj = fnv1a64(buf, starts[j], starts[j] + lengths[j])
            ring[j & (AHEAD - 1)] = hj
            prefetch(slots, np.int64(hj & np.uint64(mask)))
        hh = np.int64(h)
        s = np.int64(h & np.uint64(mask))
        while slots[s, 1] != -1:
            if slots[s, 0] == hh:
                f = first[slots[s, 1]]
                if same(buf, p, p + m, buf, starts[f], starts[f] + lengths[f]):
                    break
            s = (s + 1) & mask
        if slots[s, 1] == -1:
            slots[s, 0] = hh
            slots[s, 1] = n
            first[n] = i
            n += 1
        count[slots[s, 1]] += weights[i]
    total = 0
    for d in range(n):
        total += lengths[first[d]]
    out = np.empty(total, np.uint8)
    out_len = np.empty(n, np.int64)
    o = 0
    for d in range(n):
        f = first[d]
        out[o:o + lengths[f]] = buf[starts[f]:starts[f] + lengths[f]]
        out_len[d] = lengths[f]
        o += lengths[f]
    return out, out_len, count[:n].copy()


@njit(cache=True, nogil=True)
def _chunk_words(buf, offsets, classes):
    """The distinct words of the documents buf[offsets[d]:offsets[d+1]]: (bytes side by
    side, lengths, counts), as _dedupe would give them (the pieces are distinct already,
    so they are only copied out, in the same order)."""
    starts, lengths, counts = _distinct_pieces(buf, offsets, classes)
    out = np.empty(lengths.sum(), np.uint8)
    o = 0
    for i in range(len(starts)):
        out[o:o + lengths[i]] = buf[starts[i]:starts[i] + lengths[i]]
        o += lengths[i]
    return out, lengths, counts


def unite_words(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]):
    """Several (bytes, lengths, counts) word lists as one, each word once."""
    if not parts:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(parts) == 1:
        return parts[0]
    buf = np.concatenate([p[0] for p in parts])
    lengths = np.concatenate([p[1] for p in parts])
    counts = np.concatenate([p[2] for p in parts])
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return _dedupe(buf, starts, lengths, counts)


class WordUnion:
    """Word lists (bytes, lengths, counts) united as they come: the newer parts are
    united with the oldest when they hold as many bytes as it does, so a word is copied
    a few times at most and the parts never hold much more than their union."""

    def __init__(self):
        self.parts: list = []

    def add(self, part) -> None:
        self.parts.append(part)
        if len(self.parts) > 1 and sum(len(p[0]) for p in self.parts[1:]) >= len(self.parts[0][0]):
            self.parts[:] = [unite_words(self.parts)]

    def result(self):
        return unite_words(self.parts)


def words_of(buf: np.ndarray, offsets: np.ndarray):
    """The distinct words of GPT-2's pattern in the UTF-8 documents
    buf[offsets[d]:offsets[d + 1]]: (their bytes side by side, lengths, counts)."""
    return _chunk_words(buf, offsets.astype(np.int64), codepoint_classes())


def count_words(batches: Iterable[list[str]], threads: int | None = None):
    """The training words: (their bytes side by side, lengths, counts) of every distinct
    piece of GPT-2's pattern in the texts, counted in chunks of WORD_CHUNK bytes on
    `threads` threads while the texts are read, and united as they come (WordUnion)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    classes = codepoint_classes()
    threads = max(1, int(threads or os.cpu_count() or 1))
    union = WordUnion()
    running: deque = deque()

    def collect(block: bool) -> None:
        while running and (block or running[0].done() or len(running) > threads):
            union.add(running.popleft().result())

    with ThreadPoolExecutor(threads) as pool:
        raw: list[bytes] = []
        size = 0

        def submit() -> None:
            offsets = np.zeros(len(raw) + 1, np.int64)
            np.cumsum([len(r) for r in raw], out=offsets[1:])
            buf = np.frombuffer(b"".join(raw), np.uint8)
            running.append(pool.submit(_chunk_words, buf, offsets, classes))
            collect(False)

        for batch in batches:
            for t in batch:
                raw.append(t.encode("utf-8"))
                size += len(raw[-1])
            if size >= WORD_CHUNK:
                submit()
                raw, size = [], 0
        if raw:
            submit()
        collect(True)
    return union.result()


def run_interruptibly(fn, *args):
    """fn(*args), a compiled function that releases the GIL, run on a thread of its own
    while this thread waits for it, so that Ctrl-C, SIGTERM and SIGHUP stop the stage at
    once, with its usual one line (pipeline.errors), even in a merge loop of minutes.

    Run on this thread instead, the loop would never let Python see a signal until it
    returned; and a KeyboardInterrupt raised while numba loaded the function from its
    cache (inside a callback from LLVM) killed the process with a segmentation fault.
    Here the exception is raised in this thread, never inside the loader. The thread is a
    daemon: a stage stopped meanwhile exits without waiting for it."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e

    worker = threading.Thread(target=target, name=getattr(fn, "__name__", "compiled"),
                              daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.25)   # a signal's handler runs between two waits
    if "error" in box:
        raise box["error"]
    return box["value"]


def train_fast(batches: Iterable[list[str]], vocab_size: int, min_frequency: int,
               special_tokens: list[str] = SPECIAL_TOKENS, threads: int | None = None):
    """The default trainer: BpeTrainer's training, compiled (the same tokenizer.json): the
    words counted on `threads` threads (count_words), then train_words."""
    return train_words(count_words(batches, threads), vocab_size, min_frequency, special_tokens)


def train_words(words, vocab_size: int, min_frequency: int,
                special_tokens: list[str] = SPECIAL_TOKENS):
    """BpeTrainer's training from the words already counted, (bytes side by side,
    lengths, counts) in any order: its merge loop (_train_merges), then the HF artefact
    (to_hf). train_tokenizer.py's sample tasks count the words as they draw the sample."""
    n_merges = vocab_size - 256 - len(special_tokens)
    if n_merges < 0:
        raise ValueError(f"vocab_size {vocab_size} below the 256 bytes and "
                         f"{len(special_tokens)} special tokens")
    wbuf, wlen, wcount = words
    del words
    order = np.array(hf_byte_order(), np.int64)      # symbol r < 256 is byte order[r]
    rank = np.empty(256, np.int32)
    rank[order] = np.arange(256, dtype=np.int32)
    wstart = np.zeros(len(wlen), np.int64)
    np.cumsum(wlen[:-1], out=wstart[1:])
    merges, _ = run_interruptibly(_train_merges, wbuf, rank, wstart, wlen, wcount, n_merges,
                                  max(int(min_frequency), 0))
    merges = np.where(merges < 256, order[np.minimum(merges, 255)], merges)  # byte values
    tokens = [bytes([b]) for b in range(256)]
    for a, b in merges.tolist():
        tokens.append(tokens[a] + tokens[b])
    return to_hf(tokens, merges, special_tokens)


# --------------------------------------------------------------------------------------
# The HF artefact.
# --------------------------------------------------------------------------------------

def hf_byte_order() -> list[int]:
    """The 256 bytes in BpeTrainer's order: sorted by their byte-level character."""
    return [b for _, b in sorted((c, b) for c, b in byte_decoder().items())]


def to_hf(tokens: list[bytes], merges: np.ndarray, special_tokens: list[str] = SPECIAL_TOKENS):
    """The HF tokenizer for byte-level BPE tokens (ids: bytes 0..255, then one per merge)
    and their merges, laid out as BpeTrainer lays it out: special tokens first (added,
    special), the 256 byte characters sorted, then the merged tokens in merge order."""
    from tokenizers import Tokenizer

    byte_char = {b: c for c, b in byte_decoder().items()}
    text = ["".join(byte_char[x] for x in t) for t in tokens]
    n_special = len(special_tokens)
    hf_id = np.zeros(len(tokens), np.int64)
    hf_id[hf_byte_order()] = np.arange(n_special, n_special + 256)
    hf_id[256:] = np.arange(n_special + 256, n_special + len(tokens))
    vocab = {t: i for i, t in enumerate(special_tokens)}
    for k in np.argsort(hf_id, kind="stable"):
        if text[k] in vocab:
            raise RuntimeError(f"token {text[k]!r} twice in the vocabulary")
        vocab[text[k]] = int(hf_id[k])
    spec = json.loads(new_tokenizer().to_str())
    spec["model"]["vocab"] = vocab
    spec["model"]["merges"] = [[text[a], text[b]] for a, b in merges.tolist()]
    spec["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True} for i, t in enumerate(special_tokens)]
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))


# --------------------------------------------------------------------------------------
# Distinct pieces: count_words' chunks (_chunk_words), and a word list united (_dedupe).
# --------------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _distinct_pieces(buf, offsets, classes):
    """The distinct pieces (GPT-2's pattern) of the documents buf[offsets[d]:offsets[d+1]]:
    (start, length, count) of each, the start being its first occurrence."""
    # one row per slot, its fields side by side (a probe reads one cache line): the start
    # of the piece in buf (-1: empty), its length, its hash and its count
    size = 1 << 12
    t = np.empty((size, 4), np.int64)
    t[:, 0] = -1
    n = 0
    ps = np.empty(SCAN, np.int64)
    qs = np.empty(SCAN, np.int64)
    hs = np.empty(SCAN, np.uint64)
    for d in range(len(offsets) - 1):
        head, end = offsets[d], offsets[d + 1]
        while head < end:
            # the pieces as the encoder reads them, every one hashed; the row of the
            # piece AHEAD places on is prefetched before a piece is counted
            k, head = scan_pieces(buf, head, end, classes, 0, end, ps, qs, hs)
            for i in range(min(AHEAD, k)):
                prefetch(t, np.int64(hs[i] & np.uint64(size - 1)))
            for i in range(k):
                if i + AHEAD < k:
                    prefetch(t, np.int64(hs[i + AHEAD] & np.uint64(size - 1)))
                p, q, h = ps[i], qs[i], hs[i]
                hh = np.int64(h)
                mask = size - 1
                s = np.int64(h & np.uint64(mask))
                while t[s, 0] != -1 and not (
                        t[s, 2] == hh and same(buf, p, q, buf, t[s, 0], t[s, 0] + t[s, 1])):
                    s = (s + 1) & mask
                if t[s, 0] == -1:
                    t[s, 0], t[s, 1], t[s, 2], t[s, 3] = p, q - p, hh, 0
                    n += 1
                t[s, 3] += 1
                if 2 * n > size:  # grow: rehash into twice the slots
                    size *= 2
                    t2 = np.empty((size, 4), np.int64)
                    t2[:, 0] = -1
                    for r in range(len(t)):
                        if t[r, 0] != -1:
                            u = np.int64(np.uint64(t[r, 2]) & np.uint64(size - 1))
                            while t2[u, 0] != -1:
                                u = (u + 1) & (size - 1)
                            t2[u] = t[r]
                    t = t2
    used = t[:, 0] != -1
    return t[used, 0].copy(), t[used, 1].copy(), t[used, 3].copy()


# --------------------------------------------------------------------------------------
# Comparing two tokenizers.
# --------------------------------------------------------------------------------------

def vocab_difference(tok_a, tok_b) -> int:
    """How many tokens of tok_a's vocabulary (added tokens included) are not in tok_b's."""
    a = set(tok_a.get_vocab(with_added_tokens=True))
    b = set(tok_b.get_vocab(with_added_tokens=True))
    return len(a - b)


# --------------------------------------------------------------------------------------
# Compression on held-out text (4.5), with the compiled encoder.
# --------------------------------------------------------------------------------------

def measure_compression_fast(tok, heldout) -> dict:
    """train_tokenizer.measure_compression's numbers (chars and bytes per token on the
    held-out English and Chinese documents of the table `heldout`: text, lang), with the
    compiled encoder algorithms.packing_fast.BpeEncoder (HF's ids, several times HF's speed) and
    the characters and bytes counted in Arrow. Falls back to HF's encoder for a
    tokenizer that is not a plain byte-level BPE."""
    import pyarrow.compute as pc

    from .arrays import strings
    from algorithms.packing_fast import BpeEncoder
    from algorithms.tokenizer_file import ordinary_tokenizer

    enc = BpeEncoder.from_tokenizer(tok)
    plain = None if enc is not None else ordinary_tokenizer(tok)
    out = {}
    for lang in ("en", "zh"):
        want = strings([lang])[0]   # an Arrow scalar: a str here would import pandas
        col = heldout.filter(pc.equal(heldout.column("lang"), want)).column("text")
        texts = col.to_pylist()
        if not texts:
            out[lang] = {"chars_per_token": None, "bytes_per_token": None, "docs": 0,
                         "chars": 0, "bytes": 0, "tokens": 0}
            continue
        if enc is not None:
            tokens = int(len(enc.pack(texts, 0)) - len(texts))   # one EOS per document
        else:
            tokens = sum(len(e.ids) for e in plain.encode_batch(texts, add_special_tokens=False))
        chars = int(pc.sum(pc.utf8_length(col)).as_py() or 0)
        nbytes = int(pc.sum(pc.binary_length(col)).as_py() or 0)
        out[lang] = {"chars_per_token": round(chars / tokens, 4),
                     "bytes_per_token": round(nbytes / tokens, 4),
                     "docs": len(texts), "chars": chars, "bytes": nbytes, "tokens": tokens}
    return out
