"""Packing (tutorial section 5): every document's token ids, each followed by one EOS,
concatenated into one flat uint16 array, with the validation split made by document.

The tutorial's version (5.4, 5.5), which is the reference here (`pack_reference` below is
this loop with the second departure listed after it, run by the tests against the fast
path):

    ids = []
    for t in texts:
        ids.extend(tok.encode(t).ids)
        ids.append(eos)                   # every document ends with one EOS (5.3)
    arr = np.array(ids, dtype=np.uint16)  # 2 bytes a token: every id < 65536 (4.6)

    def split_train_val(docs, val_ratio=0.001, seed=42):   # 5.7: by document, seeded
        docs = list(docs); random.Random(seed).shuffle(docs)
        n_val = max(1, int(len(docs) * val_ratio))
        return docs[n_val:], docs[:n_val]

Departures, each one named where it is made:
- the split is decided per document by a seeded hash of its id (the n_val smallest
  hashes go to val), not by shuffling a list: the same documents whatever the number of
  workers or shards, and no list of the corpus in memory;
- document text is encoded as plain text (a literal "<|endoftext|>" in a web page is
  ordinary bytes, never the EOS id): the tokenizer with its added tokens dropped;
- the default encoder is algorithms/packing_fast.py, HF's byte-level BPE compiled with
  numba, used only after it gave HF's ids on a sample of the corpus (`first_difference`);
- the parts are concatenated in task order (5.5 leaves the order to convention: it is
  fixed here) and hashed on the way.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from .arrays import text_buffers
from pipeline.errors import StageError
from pipeline.shards import HashingFile, id_hashes, ids_with_hash, iter_batches

from .tokenizer_file import (added_all_special, byte_level_unsupported, encode_bounded, eos_id,
                             load_tokenizer, ordinary_tokenizer, plain_text, to_tiktoken)

DTYPE = np.uint16
CHUNK = 1 << 24  # 16 MB copy blocks when concatenating parts (5.5)


def pack_reference(tok, texts: list[str], eos: int) -> np.ndarray:
    """5.4's loop with the tokenizer `tok` (HF), as plain text: the reference."""
    plain = ordinary_tokenizer(tok)
    ids: list[int] = []
    for t in texts:
        ids.extend(plain.encode(t, add_special_tokens=False).ids)
        ids.append(eos)
    return np.array(ids, dtype=DTYPE)


# --------------------------------------------------------------------------------------
# 5.7: the validation split, by document, from a seeded hash of the document id.
# --------------------------------------------------------------------------------------

def n_val_docs(n_docs: int, val_ratio: float) -> int:
    """How many documents go to val.bin: at least one (5.7)."""
    return max(1, int(n_docs * val_ratio))


def val_threshold(shards: list[Path], val_ratio: float, seed: int) -> tuple[int, int, int]:
    """(threshold, n_docs, n_val): a document is in val iff its id hash <= threshold.

    Reads only the id column (8 bytes per document kept in memory), so it is cheap even
    for a large corpus, and it sees every shard: the split is global, not per shard. Ids
    must be unique among the chosen: every copy of an id goes the same way, so a repeated
    id would put more documents in val than asked (all of them, if every id is the same).
    """
    hashes = []
    for s in shards:
        for batch in iter_batches(s, columns=["id"], batch_rows=65536):
            hashes.append(id_hashes(batch.column(0).to_pylist(), seed))
    h = np.concatenate(hashes) if hashes else np.empty(0, np.uint64)
    n = len(h)
    if n < 2:
        raise StageError(f"{shards[0].parent}: {n} document(s); need at least 2 to split "
                         "train and val")
    k = n_val_docs(n, val_ratio)
    if k >= n:
        raise StageError(f"--val-ratio {val_ratio} would put all {n} documents in val")
    threshold = int(np.partition(h, k - 1)[k - 1])
    chosen = int(np.count_nonzero(h <= np.uint64(threshold)))
    if chosen > k:
        raise StageError(_repeated_ids(shards, seed, h, threshold, chosen, k))
    return threshold, n, k


def _repeated_ids(shards: list[Path], seed: int, h: np.ndarray, threshold: int, chosen: int,
                  k: int) -> str:
    """The error for ids that repeat among the ones chosen for val, naming one."""
    picked = np.sort(h[h <= np.uint64(threshold)])
    twice = int(picked[np.flatnonzero(picked[1:] == picked[:-1])[0]])
    found = ids_with_hash(shards, seed, twice)
    if found:
        name, n = max(found.items(), key=lambda kv: kv[1])
        return (f"{shards[0].parent}: the id {name!r} is not unique ({n} documents have it): "
                f"val would take {chosen} documents instead of {k}; 5.7 splits by id, "
                "so ids must be unique")
    return f"{shards[0].parent}: ids are not unique; 5.7 splits by id"


# --------------------------------------------------------------------------------------
# Encoding: a fast path (compiled BPE or tiktoken) or HF tokenizers; all give uint16 arrays,
# EOS after each document.
# --------------------------------------------------------------------------------------

FAST_ENCODERS = ("numba", "tiktoken")


def fast_encoder(tok, kind: str):
    """The tokenizer's vocabulary as a fast encoder of `kind`, or None when it does not
    convert (anything but a plain byte-level BPE)."""
    if kind == "numba":
        # imported here, not with this module: pack's driver starts its identity check's
        # thread first, which then runs beside numba's import (pack_parallel.build_encoders)
        from .packing_fast import BpeEncoder

        return BpeEncoder.from_tokenizer(tok)
    return to_tiktoken(tok)


class NotConvertible(StageError):
    """The tokenizer cannot be encoded with the fast encoder asked for; `why` says why."""

    def __init__(self, path: str, kind: str, why: str):
        super().__init__(f"{path}: does not convert for --encoder {kind} ({why})")
        self.why = why


class Encoder:
    """Encodes a batch of documents into one flat uint16 array, EOS after every document.

    kind "numba": algorithms/packing_fast.py, HF's byte-level BPE compiled (the default fast path).
    kind "tiktoken": the vocabulary converted to tiktoken (encode_to_numpy with no
    special tokens allowed: document text is always ordinary text).
    kind "hf": HF tokenizers with the added tokens removed, for the same reason.
    """

    def __init__(self, tokenizer_path: str, kind: str):
        tok = load_tokenizer(tokenizer_path)
        self.kind = kind
        self.built_by = os.getpid()   # a forked worker sees its parent's pid here
        self.eos = eos_id(tok, tokenizer_path)
        if kind in FAST_ENCODERS:
            self.fast = fast_encoder(tok, kind)
            if self.fast is None:
                raise NotConvertible(tokenizer_path, kind, byte_level_unsupported(tok)
                                     or "not a byte-level vocabulary")
        else:   # document text as plain text (plain_text when it encodes), or a copy
            # without the added tokens when some of them are not special
            self.hf = tok if added_all_special(tok) else ordinary_tokenizer(tok)

    def ids(self, text: str) -> np.ndarray:
        """One document's ids (no EOS)."""
        if self.kind == "numba":
            return self.fast.ids(text)
        if self.kind == "tiktoken":
            return self.fast.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
        with plain_text(self.hf) as plain:
            return np.asarray(plain.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    def ids_many(self, texts: list[str]) -> list[np.ndarray]:
        """ids() of each text; HF's in one encode_batch_fast call (the same ids, without
        the offsets encode computes: a quarter less CPU on pack's identity check)."""
        if self.kind in FAST_ENCODERS:
            return [self.ids(t) for t in texts]
        # long texts in pieces, cut where the split pattern cuts: HF holds ~150 bytes per
        # token of a call, 3 GB for one 20 MB document
        with plain_text(self.hf) as plain:
            return [np.asarray(ids, dtype=np.uint32) for ids in encode_bounded(plain, texts)]

    def pack(self, texts: list[str]) -> np.ndarray:
        """The documents' ids, each followed by one EOS, as one uint16 array."""
        if not texts:
            return np.empty(0, DTYPE)
        if self.kind == "numba":  # one compiled call for the whole batch, EOS included
            return self.fast.pack(texts, self.eos).astype(DTYPE)
        if self.kind == "tiktoken":
            docs = [self.ids(t) for t in texts]
        else:  # HF's fastest call (no offsets), memory bounded
            docs = self.ids_many(texts)
        eos = np.array([self.eos], dtype=np.uint32)
        pieces = []
        for d in docs:
            pieces.append(d)
            pieces.append(eos)
        # ids < 65536 was checked before any work, so the cast cannot wrap
        return np.concatenate(pieces).astype(DTYPE)

    def pack_rows(self, col, rows: np.ndarray) -> np.ndarray:
        """pack() of the documents at `rows` of the Arrow string column `col` (none of
        them null). The compiled encoder reads the column's own UTF-8 buffer: no Python
        string is made."""
        if self.kind != "numba":
            return self.pack((col.take(rows) if len(rows) < len(col) else col).to_pylist())
        if len(rows) == 0:
            return np.empty(0, DTYPE)
        buf, offsets = text_buffers(col)
        return self.fast.pack_bytes(buf, offsets[rows], offsets[rows + 1], self.eos).astype(DTYPE)


_ENCODERS: dict[tuple[str, str], Encoder] = {}


def get_encoder(tokenizer_path: str, kind: str) -> Encoder:
    """One Encoder per worker process (5.5: every worker loads the tokenizer itself)."""
    key = (tokenizer_path, kind)
    if key not in _ENCODERS:
        _ENCODERS[key] = Encoder(tokenizer_path, kind)
    return _ENCODERS[key]


def sample_texts(shards: list[Path], max_bytes: int, per_shard: int = 64) -> list[str]:
    """A fixed sample for the identity check: the first documents of every shard, taken
    round-robin (different sources are in different shards) until max_bytes of text or
    the end of the input; each shard is read per_shard documents at a time, as far as
    needed (with 64 documents a shard and no more, one shard gave 130 KB of a 1 MB
    check). A document longer than what is left of max_bytes is cut to it: HF encodes
    the sample whole, and one 20 MB document took 3 GB and 15 s against a 1 MB budget."""
    readers = [iter_batches(s, columns=["text"], batch_rows=per_shard) for s in shards]
    heads: list[list[str]] = [[] for _ in shards]   # each shard's next documents, reversed
    out, size = [], 0
    while size < max_bytes:
        for k, r in enumerate(readers):
            if r is not None and not heads[k]:
                batch = next(r, None)
                if batch is None:
                    readers[k] = None
                else:
                    heads[k] = [t for t in batch.column(0).to_pylist() if t is not None][::-1]
        if not any(heads) and all(r is None for r in readers):
            break
        for h in heads:   # one round: a document from every shard that has one
            if h and size < max_bytes:
                text = h.pop()[:max_bytes - size]   # characters: at most 4 bytes each
                out.append(text)
                size += len(text.encode("utf-8"))
    return out


def first_difference(got: list[np.ndarray], want: list[np.ndarray]) -> int | None:
    """Index of the first text whose ids differ between two encodings of the same texts
    (the fast encoder's and HF's), else None."""
    for i, (x, y) in enumerate(zip(got, want)):
        if not np.array_equal(x, y):
            return i
    return None


class SampleCheck:
    """The identity check's HF side, started early: in a thread of its own, the sample
    (sample_texts) is read and encoded by HF, with a tokenizer of the thread's own (the
    vocabulary's ids, its added tokens' strings as plain text), while the caller goes on.
    Arrow's reads and HF's encoding release the GIL, so the check takes a core that
    waits anyway: pack's driver builds its fast encoder and starts its pool meanwhile.

    join() waits for the thread (before a fork: nothing may run beside a fork);
    difference(enc) waits too, then gives the index of the first sample text on which
    `enc` gives other ids than HF (first_difference's answer), or None."""

    def __init__(self, shards: list[Path], max_bytes: int, tokenizer_path: str | os.PathLike):
        self.texts: list[str] = []
        self.hf_ids: list[np.ndarray] = []
        self.seconds = 0.0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="identity-check", daemon=True,
                                        args=(list(shards), max_bytes, str(tokenizer_path)))
        self._thread.start()

    def _run(self, shards: list[Path], max_bytes: int, tokenizer_path: str) -> None:
        t0 = time.time()
        try:
            from tokenizers import Tokenizer

            texts = sample_texts(shards, max_bytes)
            with plain_text(Tokenizer.from_file(tokenizer_path)) as plain:
                self.hf_ids = [np.asarray(ids, dtype=np.uint32)
                               for ids in encode_bounded(plain, texts)]
            self.texts = texts
        except BaseException as e:   # raised again where the caller waits for it
            self._error = e
        self.seconds = round(time.time() - t0, 3)

    def join(self) -> None:
        self._thread.join()

    def difference(self, enc: Encoder) -> int | None:
        self.join()
        if self._error is not None:
            raise self._error
        return first_difference(enc.ids_many(self.texts), self.hf_ids)


# --------------------------------------------------------------------------------------
# 5.5: the parts of every task, concatenated in order.
# --------------------------------------------------------------------------------------

# tokens per document: 0, then quarter-octave bins 1, 1.19, 1.41, ... 2^20 (rounded, unique)
TOKEN_BINS = np.unique(np.concatenate([[0], np.round(2 ** (np.arange(0, 81) / 4))])).astype(np.int64)


def doc_lengths(arr: np.ndarray, eos: int) -> np.ndarray:
    """Tokens of each document in a packed array (EOS excluded): document text never
    contains the EOS id, so the EOS positions are the boundaries."""
    ends = np.flatnonzero(arr == eos)
    return np.diff(np.concatenate([[-1], ends])) - 1


def concat_parts(parts: list[Path], out: Path) -> str:
    """Concatenate the parts of one split into `out`, in the order given (5.5: order is a
    convention nothing checks, so the caller fixes it, by task rank, not by directory
    listing). Returns out's digest, hashed on the way (the file is not read again)."""
    tmp = out.with_name(out.name + ".tmp")
    with HashingFile(tmp) as fout:
        for p in parts:
            if not p.exists():
                raise StageError(f"{p} is missing; rerun pack_parallel.py")
            with open(p, "rb") as fin:
                while chunk := fin.read(CHUNK):
                    fout.write(chunk)
    os.replace(tmp, out)
    return fout.hexdigest()
