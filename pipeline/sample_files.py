"""The tokenizer's training sample on disk (train_tokenizer.py, 4.7 step 2): the files each
sample task writes into the staging folder's _sample/ (its held-out rows, its training
rows, their words and a hash sample of them), and the driver's readers of all of them."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from algorithms.arrays import fill_empty, from_numpy, strings, text_buffers, to_numpy
from algorithms.ids import id_hashes
from algorithms.tokenizer_sample import (BATCH, PIECE_SAMPLE_BITS, choose_rows, corpus_iter,
                                        doc_languages, unite_pieces)

from .manifest import MANIFEST, read_manifest
from .shards import ShardWriter, open_shard, read_table

SAMPLE_DIR = "_sample"         # per-unit sample files, in the folder a task writes to


class UnitSample:
    """One task's part of the sample (train_tokenizer.sample_unit): for each batch of the
    unit, the documents choose_rows draws by their seeded id hash, cropped to
    max_doc_chars characters, written to heldout-RANK.parquet (with each one's language)
    and train-RANK.parquet, and counted; close() writes the words (count_words) or a
    hash sample of them (pieces-RANK.npy) and returns the task's counts."""

    def __init__(self, staging: str | Path, rank: int, cuts: tuple[int, int], seed: int,
                 max_doc_chars: int, count_words: bool = False, train_rows: int | None = None):
        self.out = Path(staging) / SAMPLE_DIR
        self.out.mkdir(parents=True, exist_ok=True)
        self.rank, self.cuts, self.seed, self.max_chars = rank, cuts, seed, max_doc_chars
        self.held = SampleSplit(self.out / f"heldout-{rank:05d}.parquet",
                                pa.schema([("text", pa.string()), ("lang", pa.string())]))
        self.train = SampleSplit(self.out / f"train-{rank:05d}.parquet",
                                 pa.schema([("text", pa.string())]), write_rows=train_rows)
        self.pieces: list[tuple[np.ndarray, np.ndarray]] = []
        self.words = None
        if count_words:
            from algorithms.bpe_trainer import WordUnion
            self.words = WordUnion()
        self.c = dict.fromkeys(("docs_in", "bytes_in", "cropped_docs", "sample_bytes_before_crop",
                                "sample_chars", "null_docs", "heldout_cropped_docs"), 0)
        # CPU s counting words: it follows the sample's size, not the corpus's
        self.count_cpu = 0.0

    def add(self, batch: pa.RecordBatch) -> int:
        """Draw from one batch of (id, text); returns its text bytes."""
        from algorithms.packing_fast import sampled_pieces
        from algorithms.tokenizer_sample_fast import script_counts   # compiled, the same counts

        c = self.c
        c["null_docs"] += batch.column(1).null_count   # counted, then never sampled:
        col = fill_empty(batch.column(1))              # an empty document
        lengths = to_numpy(pc.binary_length(col)).astype(np.int64)
        h_idx, t_idx = choose_rows(id_hashes(batch.column(0).to_pylist(), self.seed), lengths,
                                   self.cuts)
        c["docs_in"] += len(lengths)
        c["bytes_in"] += int(lengths.sum())
        # held-out documents are cropped like the sample's: the checks and the compression
        # encode each whole (one 80 MB document held out took 15 GB in HF's encoder)
        h_text, cut = self.crop(col.take(from_numpy(h_idx, pa.int64())))
        c["heldout_cropped_docs"] += cut
        h_han, h_lat = script_counts(h_text)
        self.held.add(h_text, doc_languages(h_han, h_lat), h_han, h_lat)
        t_text, cut = self.crop(col.take(from_numpy(t_idx, pa.int64())))
        c["cropped_docs"] += cut
        c["sample_bytes_before_crop"] += int(lengths[t_idx].sum())
        c["sample_chars"] += int(pc.sum(pc.utf8_length(t_text)).as_py() or 0)
        self.train.add(t_text, None, *script_counts(t_text))
        if self.words is not None:
            from algorithms.bpe_trainer import words_of
            c0 = time.process_time()
            self.words.add(words_of(*text_buffers(t_text)))
            self.count_cpu += time.process_time() - c0
        else:
            self.pieces.append(sampled_pieces(*text_buffers(t_text), PIECE_SAMPLE_BITS))
        return int(lengths.sum())

    def crop(self, texts: pa.Array) -> tuple[pa.Array, int]:
        """The texts cut to max_doc_chars code points, and how many were cut."""
        n_chars = to_numpy(pc.utf8_length(texts))
        cut = int((n_chars > self.max_chars).sum())
        return (pc.utf8_slice_codeunits(texts, 0, self.max_chars) if cut else texts), cut

    def close(self) -> dict:
        from algorithms.packing_fast import sampled_words

        self.held.writer.close()
        self.train.writer.close()
        pieces = self.pieces
        if self.words is not None:
            c0 = time.process_time()
            wbuf, wlen, wcount = self.words.result()
            np.savez(self.out / f"words-{self.rank:05d}.npz", bytes=wbuf, lengths=wlen,
                     counts=wcount)
            pieces = [sampled_words(wbuf, wlen, PIECE_SAMPLE_BITS)]
            self.count_cpu += time.process_time() - c0
        np.save(self.out / f"pieces-{self.rank:05d}.npy", np.stack(unite_pieces(pieces)))
        c, train, held = self.c, self.train, self.held
        return {"docs_in": c["docs_in"], "null_docs": c["null_docs"], "bytes_in": c["bytes_in"],
                "sample_docs": train.docs,
                "sample_bytes_before_crop": c["sample_bytes_before_crop"],
                "sample_bytes": train.bytes, "sample_chars": c["sample_chars"],
                "cropped_docs": c["cropped_docs"], "han_chars": train.han,
                "ascii_letters": train.letters, "zh_docs": train.zh, "en_docs": train.en,
                "heldout_docs": held.docs, "heldout_bytes": held.bytes,
                "heldout_cropped_docs": c["heldout_cropped_docs"],
                "word_count_cpu_s": round(self.count_cpu, 3)}


class SampleSplit:
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


def sample_paths(staging: Path, tasks: int) -> list[Path]:
    """The training sample's files, in task order."""
    return [Path(staging) / SAMPLE_DIR / f"train-{rank:05d}.parquet" for rank in range(tasks)]


def iter_sample(staging: Path, tasks: int, batch: int = BATCH):
    """The training sample in task order, as lists of texts (corpus_iter over its files,
    each checked to be a readable shard with a text column first)."""
    paths = sample_paths(staging, tasks)
    for p in paths:
        open_shard(p, require=("text",))
    yield from corpus_iter(paths, batch)


def read_words(staging: Path, tasks: int):
    """The training sample's distinct words with their counts, united from the tasks'
    words-RANK.npz (sample_unit with count_words), in one pass over all of them: the
    tasks' words held at once take a fraction of what training takes next, and one pass
    costs less than uniting them task by task (a third less CPU on the 47 tasks of 1 GB
    of the benchmark corpus), which copies the words again at every step."""
    from algorithms.bpe_trainer import unite_words

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


def shard_text_bytes(input_dir: Path, shards: list[Path]) -> list[int]:
    """UTF-8 text bytes of each shard: from the input's manifest, else measured in Arrow."""
    recorded = {}
    m = input_dir / MANIFEST
    if m.exists():
        recorded = {f["name"]: f.get("text_bytes") for f in read_manifest(m).get("files", [])}
    out = []
    for s in shards:
        b = recorded.get(s.name)
        if b is None:
            col = read_table(s, columns=["text"]).column("text")
            b = int(pc.sum(pc.binary_length(col)).as_py() or 0)
        out.append(int(b))
    return out
