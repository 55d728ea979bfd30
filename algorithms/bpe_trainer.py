"""Training the byte-level BPE tokenizer of tutorial 4.7, two ways, one artefact.

- train_hf: the tutorial's own code, HF tokenizers' BpeTrainer (ByteLevel pre-tokenizer
  and decoder, all 256 bytes in the initial alphabet, the special tokens first).
- train_fast (the default): rustbpe, nanochat's trainer (Rust, on PyPI), told to cut
  words with GPT-2's pattern, the one HF's ByteLevel pre-tokenizer applies at encode time
  (rustbpe's default is GPT-4's). It splits and counts words on all threads and picks
  merges from a heap that it refreshes lazily. Its result becomes the tutorial's
  artefact: an HF tokenizer.json with the special tokens at ids 0..10, the 256 byte
  tokens (as HF's byte-to-unicode characters, in BpeTrainer's order), then one token per
  merge in merge order, and the merge list. Both give the same bytes/token on held-out
  English and Chinese (tests/test_bpe_trainer.py, bench/bench_trainer.py); their
  vocabularies differ in a few tokens, because ties between equally frequent pairs are
  broken differently (rustbpe: the smaller pair of byte values; BpeTrainer: the smaller
  pair of its own ids).

rustbpe keeps neither the merge list nor the counts it exposes, and it has no
min_frequency; this module supplies both:

- the merges: a token's two parts are what BPE makes of its bytes with the merges learnt
  before it (how tiktoken vocabularies are turned back into merge lists). Training
  applies each merge to every word in turn, which is exactly what BPE encoding with the
  earlier merges does to the token's bytes, so the parts are always two tokens, and
  anything else stops with an error;
- min_frequency: a pair seen fewer than min_frequency times is never merged. The count
  of the chosen pair never grows from one merge to the next (a new pair holds the newest
  token, which is rarer than any pair before it), so the merges to keep are a prefix of
  rustbpe's. rustbpe logs the count of its last merge; when that reaches min_frequency
  every merge does. Otherwise (a corpus too small for the vocabulary) the count of every
  merge is replayed on the text (merge_counts: each distinct word of GPT-2's pattern, BPE
  with the merges in order, counting each pair as it becomes the next to merge) and the
  merges are cut before the first one seen too rarely. The vocabulary then comes out
  short, as BpeTrainer's does, and train_tokenizer.py's check says so.

rustbpe's choice is deterministic: the heap orders pairs by (count, pair), a total order,
and a pair's count does not depend on the order in which the threads count; the result
does not depend on the number of threads (RAYON_NUM_THREADS, read when the first
parallel call starts its thread pool).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Iterable

import numpy as np
from numba import njit

from dataprep.bpe import (ID_BITS, _merge_lookup, _piece_end, codepoint_classes,
                          merge_table)
from dataprep.tokenizer import GPT2_PATTERN, SPECIAL_TOKENS, byte_decoder

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
# The fast trainer: rustbpe, then the HF artefact.
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


def train_fast(batches: Iterable[list[str]], vocab_size: int, min_frequency: int,
               special_tokens: list[str] = SPECIAL_TOKENS, threads: int | None = None):
    """The same tokenizer as train_hf (up to ties), with rustbpe; see the module docstring.

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

@njit(cache=True)
def _hash(buf, p, q):
    h = np.uint64(0xCBF29CE484222325)
    for i in range(p, q):
        h = (h ^ np.uint64(buf[i])) * np.uint64(0x100000001B3)
    return h


@njit(cache=True)
def _same(buf, p, q, r):
    for i in range(q - p):
        if buf[p + i] != buf[r + i]:
            return False
    return True


@njit(cache=True)
def _distinct_pieces(buf, offsets, classes):
    """The distinct pieces (GPT-2's pattern) of the documents buf[offsets[d]:offsets[d+1]]:
    (start, length, count) of each, the start being its first occurrence."""
    size = 1 << 12
    key = np.full(size, -1, np.int64)      # start of the piece in buf
    length = np.zeros(size, np.int64)
    hashes = np.zeros(size, np.uint64)
    count = np.zeros(size, np.int64)
    n = 0
    for d in range(len(offsets) - 1):
        p, end = offsets[d], offsets[d + 1]
        while p < end:
            q = _piece_end(buf, p, end, classes)
            h = _hash(buf, p, q)
            mask = size - 1
            s = np.int64(h & np.uint64(mask))
            while key[s] != -1 and not (hashes[s] == h and length[s] == q - p
                                         and _same(buf, p, q, key[s])):
                s = (s + 1) & mask
            if key[s] == -1:
                key[s], length[s], hashes[s] = p, q - p, h
                n += 1
            count[s] += 1
            if 2 * n > size:  # grow: rehash into twice the slots
                size *= 2
                k2 = np.full(size, -1, np.int64)
                l2 = np.zeros(size, np.int64)
                h2 = np.zeros(size, np.uint64)
                c2 = np.zeros(size, np.int64)
                for i in range(len(key)):
                    if key[i] != -1:
                        t = np.int64(hashes[i] & np.uint64(size - 1))
                        while k2[t] != -1:
                            t = (t + 1) & (size - 1)
                        k2[t], l2[t], h2[t], c2[t] = key[i], length[i], hashes[i], count[i]
                key, length, hashes, count = k2, l2, h2, c2
            p = q
    used = key != -1
    return key[used], length[used], count[used]


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
    compiled encoder dataprep.bpe.BpeEncoder (HF's ids, several times HF's speed) and
    the characters and bytes counted in Arrow. Falls back to HF's encoder for a
    tokenizer that is not a plain byte-level BPE."""
    import pyarrow.compute as pc

    from dataprep.bpe import BpeEncoder
    from dataprep.tokenizer import ordinary_tokenizer

    enc = BpeEncoder.from_tokenizer(tok)
    plain = None if enc is not None else ordinary_tokenizer(tok)
    out = {}
    for lang in ("en", "zh"):
        col = heldout.filter(pc.equal(heldout.column("lang"), lang)).column("text")
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
