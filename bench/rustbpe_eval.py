"""train_rustbpe: the tutorial's tokenizer (4.7) trained with rustbpe (nanochat's trainer, on
PyPI), evaluated first and kept for the benchmark's comparison (bench/bench_trainer.py)
and the tests (tests/test_bpe_trainer.py); the stage trains with algorithms/bpe_trainer.py.

Told to cut with GPT-2's pattern (its default is GPT-4's; its regex engine's letters,
numbers and spaces are HF's on every code point), rustbpe gives the same bytes/token as
BpeTrainer, its ties broken on byte values rather than BpeTrainer's ids (13 of 32,000
tokens differed on 37 MB). bench/bench_trainer.py measured it 2.7x and 3.6x BpeTrainer's
speed in CPU s on 37 and 200 MB of the benchmark corpus (2.2x and 3.9x in wall s),
against 5.6x and 8.9x (3.7x and 10x) for train_fast: its regex split (fancy-regex:
GPT-2's pattern has a look-ahead) and its pair counting take about half its time. It
keeps neither the merge list nor its counts, and has no min_frequency; this module
supplies them: recover_merges (a token's parts are what BPE makes of its bytes with the
earlier merges, as tiktoken vocabularies are turned back into merge lists), and
min_frequency from the count rustbpe logs for its last merge or, when that is too low,
from merge_counts, which replays every merge's count on the text and cuts the merges
before the first one seen too rarely (the counts never grow from one merge to the next).

merge_counts' kernel (_replay) is compiled by numba on first use (cached on disk), never
ahead of time: no stage runs it.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

import numpy as np

from algorithms.bpe_trainer import _distinct_pieces, set_threads, to_hf
from algorithms.jit import njit
from algorithms.packing_fast import ID_BITS, _merge_lookup, codepoint_classes, merge_table
from algorithms.tokenizer_file import GPT2_PATTERN, SPECIAL_TOKENS

RUSTBPE_LOGGER = "rustbpe"   # rustbpe's Rust log records arrive on this Python logger
ONE_SHOT_KEEP = 64 << 20     # text bytes kept from a one-shot stream for a second pass

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


# --------------------------------------------------------------------------------------
# Replaying the merges: how often each was seen when it was chosen.
# --------------------------------------------------------------------------------------

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
