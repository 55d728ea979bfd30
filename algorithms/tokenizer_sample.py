"""The tokenizer's training sample (tutorial 4.7 step 2): which documents it trains on,
which are held out to measure compression, and the language mix it keeps.

The tutorial's corpus_iter streams a dataset and takes every 20th row, in batches. Here
the sample's tasks draw each document by a seeded hash of its id (`choose_rows`: a
document is in the sample when its hash falls in the sample's share of the hash range),
so every part of the corpus gives the same share of its bytes whatever order, sharding
or number of workers; the held-out share (never trained on, 4.5's compression measured
on it) comes first. `corpus_iter` then streams the drawn texts to the trainer in batches,
as the tutorial's does. `script_counts` measures the mix on the UTF-8 bytes: Chinese
characters and ASCII letters per document.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import text_buffers

HELDOUT_MAX_SHARE = 0.10       # never hold out more than this share of the corpus
BATCH = 1000                   # texts per batch fed to the trainer (4.7: batches are faster)


def corpus_iter(paths: list, batch_size: int = BATCH):
    """4.7 step 2's corpus_iter: the sample's texts in batches of batch_size (the
    tokenizers library trains faster on batches), streamed file by file so the sample is
    never all in memory. paths: the sample's parquet files, in order (its tasks drew
    their documents by choose_rows, not every 20th row)."""
    import pyarrow.parquet as pq

    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=["text"]):
            yield batch.column(0).to_pylist()


def plan_sample(total: int, sample_ratio: float, min_bytes: int, max_bytes: int,
                heldout_bytes: int) -> tuple[int, int]:
    """(held-out bytes, training-sample bytes) to draw from a corpus of `total` bytes.

    Held out first (at most HELDOUT_MAX_SHARE of the corpus); the sample is
    sample_ratio of the corpus, at least min_bytes (all that is left when the corpus is
    smaller) and at most max_bytes.
    """
    heldout = min(heldout_bytes, int(total * HELDOUT_MAX_SHARE))
    rest = total - heldout
    want = min(max(int(total * sample_ratio), min_bytes), max_bytes)
    return heldout, min(want, rest)


HASH_RANGE = 2 ** 64


def share_cuts(heldout_share: float, train_share: float) -> tuple[int, int]:
    """Hash cut points: a document whose id hash h is below the first is held out; from
    the first to below the second, it is in the training sample."""
    held = min(HASH_RANGE, int(heldout_share * HASH_RANGE))
    return held, min(HASH_RANGE, held + int(train_share * HASH_RANGE))


def choose_rows(hashes: np.ndarray, lengths: np.ndarray, cuts: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (sorted) held out and sampled for training: disjoint, empty rows never.

    Decided per document by its seeded id hash alone (section 4.7 asks for a sample
    that keeps the corpus's mix): not by row position, task or worker."""
    held_cut, train_cut = cuts
    nonempty = lengths > 0
    if held_cut >= HASH_RANGE:
        held = nonempty
    else:
        held = nonempty & (hashes < np.uint64(held_cut))
    train = nonempty & ~held & (True if train_cut >= HASH_RANGE
                                else hashes < np.uint64(train_cut))
    return np.flatnonzero(held), np.flatnonzero(train)



# Byte classes for the language mix: 1 = lead byte of a Chinese character (CJK ideographs
# U+4000-U+9FFF, where nearly all Han text lives, are 3-byte sequences led by 0xE4-0xE9),
# 2 = an ASCII letter.
BYTE_CLASS = np.zeros(256, np.uint8)
BYTE_CLASS[0xE4:0xEA] = 1
BYTE_CLASS[ord("A"):ord("Z") + 1] = 2
BYTE_CLASS[ord("a"):ord("z") + 1] = 2
COUNT_CHUNK = 1 << 24  # bytes classified at once: bounds the temporary arrays


def script_counts(texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Per document: Chinese characters and ASCII letters, counted on the UTF-8 bytes.

    The bytes are classified with a lookup table and counted per document with a running
    sum read at the Arrow offsets, in chunks of about COUNT_CHUNK bytes. No document
    becomes a Python string; about ten times faster than counting with an Arrow regex
    (\\p{Han}). Null and empty texts count 0.
    """
    data, offsets = text_buffers(texts)
    n = len(offsets) - 1
    han, letters = np.zeros(n, np.int64), np.zeros(n, np.int64)
    i = 0
    while i < n:
        # documents i..j-1: about COUNT_CHUNK bytes, and at least one document
        j = int(np.searchsorted(offsets, offsets[i] + COUNT_CHUNK, side="right")) - 1
        j = min(max(j, i + 1), n)
        lo = offsets[i]
        cls = BYTE_CLASS[data[lo:offsets[j]]]
        running = np.zeros(cls.size + 1, np.int32 if cls.size < 2**31 else np.int64)
        for out, k in ((han, 1), (letters, 2)):
            np.cumsum(cls == k, out=running[1:])  # running[p] = matches before byte p
            out[i:j] = running[offsets[i + 1:j + 1] - lo] - running[offsets[i:j] - lo]
        i = j
    return han, letters


def doc_languages(han: np.ndarray, letters: np.ndarray) -> np.ndarray:
    """'zh' when Chinese characters are more than 60% of a document's Chinese characters
    and ASCII letters, 'en' when ASCII letters are more than 90%, '' otherwise: mixed text
    (Chinese prose full of commands and paths, say) or neither (numbers, symbols). The
    shares are verify.py's (script_of): a held-out document measures the compression of
    one language only when it is mostly that language."""
    total = han + letters
    return np.where(han * 10 > total * 6, "zh", np.where(letters * 10 > total * 9, "en", ""))


# The tasks count the distinct words (what the trainer's memory follows) on a fixed hash
# sample of them, one in 2**PIECE_SAMPLE_BITS (the same words in every task, so the
# samples unite).
PIECE_SAMPLE_BITS = 6


def unite_pieces(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Samples of distinct words (hashes, byte lengths) as one: each word once."""
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    h, first = np.unique(np.concatenate([p[0] for p in parts]), return_index=True)
    return h, np.concatenate([p[1] for p in parts]).astype(np.uint64)[first]
