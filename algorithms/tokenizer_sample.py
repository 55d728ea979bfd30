"""The tokenizer's training sample (tutorial 4.7 step 2): which documents it trains on,
which are held out to measure compression, and the language mix it keeps.

The tutorial's version takes every 20th row of a stream:

    def corpus_iter(paths, sample_ratio=0.05, batch_size=1000):
        ds = load_dataset("parquet", data_files=paths, split="train", streaming=True)
        for i, row in enumerate(ds):
            if i % int(1 / sample_ratio) != 0:
                continue
            ...

and asks that the sample keep the final corpus's mix of English and Chinese. Here a
document is in the sample when a seeded hash of its id falls in the sample's share of
the hash range (`choose_rows`), so every part of the corpus gives the same share of its
bytes whatever order, sharding or number of workers; the held-out share (never trained
on, 4.5's compression measured on it) comes first. `script_counts` measures the mix on
the UTF-8 bytes: Chinese characters and ASCII letters per document.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import fill_empty, from_numpy, strings, text_buffers, to_numpy
from pipeline.shards import ShardWriter, open_shard
from pipeline.task_results import save_task_result

HELDOUT_MAX_SHARE = 0.10       # never hold out more than this share of the corpus
SAMPLE_DIR = "_sample"         # per-unit sample files, in the folder a task writes to
BATCH = 1000                   # texts per batch fed to the trainer (4.7: batches are faster)


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


# --------------------------------------------------------------------------------------
# The sample, drawn by one task per unit of the input.
# --------------------------------------------------------------------------------------

def sample_unit(rank: int, world_size: int, units: list[dict], staging: str,
                heldout_share: float, train_share: float, seed: int,
                max_doc_chars: int, count_words: bool = False,
                train_rows: int | None = None) -> None:
    """Task `rank`: write the held-out and training rows of unit `rank` into staging.
    count_words: also count the training rows' words (the compiled trainer's input,
    words-RANK.npz), read straight from the Arrow buffers. train_rows: write only the
    first train_rows training rows (all are counted): the compiled trainer reads the
    words, and only the checks read texts of the sample (None: every row, for
    BpeTrainer)."""
    from .packing_fast import sampled_pieces, sampled_words
    from .tokenizer_sample_fast import script_counts   # == script_counts above, compiled
    from pipeline.progress import task_progress
    from pipeline.shards import id_hashes
    from pipeline.units import read_unit

    out = Path(staging) / SAMPLE_DIR
    out.mkdir(parents=True, exist_ok=True)
    cuts = share_cuts(heldout_share, train_share)
    held = _SampleSplit(out / f"heldout-{rank:05d}.parquet",
                        pa.schema([("text", pa.string()), ("lang", pa.string())]))
    train = _SampleSplit(out / f"train-{rank:05d}.parquet", pa.schema([("text", pa.string())]),
                         write_rows=train_rows)
    prog = task_progress()
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    if count_words:
        from .bpe_trainer import WordUnion, words_of
        words = WordUnion()
    docs_in = bytes_in = cropped = before_crop = chars = nulls = held_cropped = 0
    count_cpu = 0.0   # CPU s counting words: it follows the sample's size, not the corpus's
    for batch in read_unit(units[rank], columns=["id", "text"]):
        nulls += batch.column(1).null_count   # counted, then never sampled:
        col = fill_empty(batch.column(1))     # an empty document
        lengths = to_numpy(pc.binary_length(col)).astype(np.int64)
        h_idx, t_idx = choose_rows(id_hashes(batch.column(0).to_pylist(), seed),
                                                    lengths, cuts)
        docs_in += len(lengths)
        bytes_in += int(lengths.sum())

        # held-out documents are cropped like the sample's: the checks and the compression
        # encode each whole (one 80 MB document held out took 15 GB in HF's encoder)
        h_text = col.take(from_numpy(h_idx, pa.int64()))
        h_chars = to_numpy(pc.utf8_length(h_text))
        if (h_chars > max_doc_chars).any():
            held_cropped += int((h_chars > max_doc_chars).sum())
            h_text = pc.utf8_slice_codeunits(h_text, 0, max_doc_chars)
        h_han, h_lat = script_counts(h_text)
        held.add(h_text, doc_languages(h_han, h_lat), h_han, h_lat)

        t_text = col.take(from_numpy(t_idx, pa.int64()))
        n_chars = to_numpy(pc.utf8_length(t_text))
        if (n_chars > max_doc_chars).any():
            cropped += int((n_chars > max_doc_chars).sum())
            t_text = pc.utf8_slice_codeunits(t_text, 0, max_doc_chars)  # codepoints, not bytes
        before_crop += int(lengths[t_idx].sum())
        chars += int(pc.sum(pc.utf8_length(t_text)).as_py() or 0)
        train.add(t_text, None, *script_counts(t_text))
        if count_words:
            c0 = time.process_time()
            words.add(words_of(*text_buffers(t_text)))
            count_cpu += time.process_time() - c0
        else:
            pieces.append(sampled_pieces(*text_buffers(t_text), PIECE_SAMPLE_BITS))
        prog.add(len(lengths), int(lengths.sum()))
    held.writer.close()
    train.writer.close()
    if count_words:
        c0 = time.process_time()
        wbuf, wlen, wcount = words.result()
        np.savez(out / f"words-{rank:05d}.npz", bytes=wbuf, lengths=wlen, counts=wcount)
        pieces = [sampled_words(wbuf, wlen, PIECE_SAMPLE_BITS)]
        count_cpu += time.process_time() - c0
    np.save(out / f"pieces-{rank:05d}.npy", np.stack(unite_pieces(pieces)))
    save_task_result(staging, "sample", rank, {
        "docs_in": docs_in,
        "null_docs": nulls,
        "bytes_in": bytes_in,
        "sample_docs": train.docs,
        "sample_bytes_before_crop": before_crop,
        "sample_bytes": train.bytes,
        "sample_chars": chars,
        "cropped_docs": cropped,
        "han_chars": train.han,
        "ascii_letters": train.letters,
        "zh_docs": train.zh,
        "en_docs": train.en,
        "heldout_docs": held.docs,
        "heldout_bytes": held.bytes,
        "heldout_cropped_docs": held_cropped,
        "word_count_cpu_s": round(count_cpu, 3),
    })


class _SampleSplit:
    """The held-out or the training part of one unit: a shard file and its counts."""

    def __init__(self, path: Path, schema: pa.Schema, write_rows: int | None = None):
        self.writer = ShardWriter(path, schema)
        self.write_rows = write_rows   # None: write every row; else only the first ones
        self.docs = self.bytes = self.han = self.letters = self.zh = self.en = 0

    def add(self, texts: pa.Array, lang: np.ndarray | None, han: np.ndarray,
            letters: np.ndarray) -> None:
        n = len(texts) if self.write_rows is None else \
            max(0, min(len(texts), self.write_rows - self.docs))
        if n:
            cols = {"text": texts.slice(0, n).cast(pa.string())}
            if lang is not None:
                cols["lang"] = strings(list(lang[:n]))
            self.writer.write(pa.table(cols))
        langs = doc_languages(han, letters)
        self.docs += len(texts)
        self.bytes += int(pc.sum(pc.binary_length(texts)).as_py() or 0)
        self.han += int(han.sum())
        self.letters += int(letters.sum())
        self.zh += int((langs == "zh").sum())
        self.en += int((langs == "en").sum())


def iter_sample(staging: Path, tasks: int, batch: int = BATCH):
    """The training sample in shard order, as lists of texts (the trainer's input)."""
    for rank in range(tasks):
        pf = open_shard(staging / SAMPLE_DIR / f"train-{rank:05d}.parquet", require=("text",))
        for b in pf.iter_batches(batch_size=batch, columns=["text"]):
            yield b.column(0).to_pylist()


def read_words(staging: Path, tasks: int):
    """The training sample's distinct words with their counts, united from the tasks'
    words-RANK.npz (sample_unit with count_words), in one pass over all of them: the
    tasks' words held at once take a fraction of what training takes next, and one pass
    costs less than uniting them task by task (a third less CPU on the 47 tasks of 1 GB
    of the benchmark corpus), which copies the words again at every step."""
    from .bpe_trainer import unite_words

    parts = []
    for rank in range(tasks):
        with np.load(staging / SAMPLE_DIR / f"words-{rank:05d}.npz") as z:
            parts.append((z["bytes"], z["lengths"], z["counts"]))
    return unite_words(parts)


def read_heldout(staging: Path, tasks: int) -> pa.Table:
    parts = [open_shard(staging / SAMPLE_DIR / f"heldout-{r:05d}.parquet", require=("text",))
             .read(columns=["text", "lang"]) for r in range(tasks)]
    if not parts:
        return pa.table({"text": strings([]), "lang": strings([])})
    return pa.concat_tables(parts)


def distinct_words(staging: Path, tasks: int) -> tuple[int, int]:
    """(distinct words, their bytes) of the whole training sample, estimated from the
    tasks' hash samples: a word any task saw counts once."""
    h, n = unite_pieces(
        [tuple(np.load(staging / SAMPLE_DIR / f"pieces-{r:05d}.npy")) for r in range(tasks)])
    bits = PIECE_SAMPLE_BITS
    return len(h) << bits, int(n.sum()) << bits
