"""Packing (tutorial section 5): every document's token ids, each followed by one EOS,
concatenated into one flat uint16 array, with the validation split made by document.

The tutorial's code comes first. `pack` is 5.4's single-process version, for a notebook;
`pack_parallel.py --engine reference` runs 5.5: `encode_shard` (5.4's loop: HF
tokenizers' encode, one document at a time) in every task, `concat` in the driver. Departures, each named where it is made:
- the split (5.7) is decided per document by a seeded hash of its id (the n_val smallest
  hashes go to val), not by shuffling a list: the same documents whatever the number of
  workers or shards, and no list of the corpus in memory;
- document text is encoded as plain text (a literal "<|endoftext|>" in a web page is
  ordinary bytes, never the EOS id): the tokenizer's added tokens are not matched;
- the fast engine's encoder is algorithms/packing_fast.py, HF's byte-level BPE compiled
  with numba, used only after it gave HF's ids on a sample of the corpus
  (pipeline/pack_check.py);
- the parts are concatenated in task order (5.5 leaves the order to convention: it is
  fixed here).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .arrays import text_buffers

from .tokenizer_file import (added_all_special, byte_level_unsupported, encode_bounded, eos_id,
                             load_tokenizer, ordinary_tokenizer, plain_text, to_tiktoken)

DTYPE = np.uint16
CHUNK = 1 << 24  # 16 MB copy blocks when concatenating parts (5.5)


def pack(docs: list[str], out_path, total_tokens_estimate: int, tok, eos: int) -> int:
    """5.4's pack, in one process: every document's ids and an EOS into a uint16 memmap
    preallocated from 5.6's estimate; returns the tokens written (truncate the file to
    them). pack_parallel.py runs 5.5 instead (encode_shard in every task, then concat),
    which needs no estimate; this is the same loop, for a notebook. Where the tutorial's
    version crashes on an estimate too small, this raises ValueError first."""
    arr = np.memmap(out_path, dtype=DTYPE, mode="w+", shape=(total_tokens_estimate,))
    idx = 0
    for doc in docs:
        ids = tok.encode(doc, add_special_tokens=False).ids
        ids.append(eos)                       # every document ends with one EOS (5.3)
        if idx + len(ids) > total_tokens_estimate:
            raise ValueError(f"{out_path}: more than the estimated {total_tokens_estimate:,} "
                             "tokens; estimate again with more headroom (5.6)")
        arr[idx:idx + len(ids)] = ids
        idx += len(ids)
    arr.flush()
    return idx


def encode_shard(texts: list[str], tok, eos: int) -> np.ndarray:
    """5.5's encode_shard (5.4's loop): every text's ids, each followed by EOS, as one
    uint16 array (every id < 65536 was checked before: 4.6). tok: a tokenizers.Tokenizer
    that encodes its added tokens' strings as plain text (plain_text)."""
    ids: list[int] = []
    for t in texts:
        ids.extend(tok.encode(t, add_special_tokens=False).ids)
        ids.append(eos)                       # every document ends with one EOS (5.3)
    return np.array(ids, dtype=DTYPE)


def concat(parts: list[Path], fout) -> None:
    """5.5's concat: the parts' bytes, in the order given, into the open file fout (the
    order is a convention nothing checks, so the caller fixes it: by task rank, never by
    directory listing)."""
    for p in parts:
        with open(p, "rb") as fin:
            while chunk := fin.read(CHUNK):   # 16 MB a block
                fout.write(chunk)


# --------------------------------------------------------------------------------------
# 5.7: the validation split, by document, from a seeded hash of the document id.
# --------------------------------------------------------------------------------------

def n_val_docs(n_docs: int, val_ratio: float) -> int:
    """How many documents go to val.bin: at least one (5.7)."""
    return max(1, int(n_docs * val_ratio))


def val_threshold(hashes: np.ndarray, val_ratio: float) -> tuple[int, int, int]:
    """(threshold, n_docs, n_val): a document is in val iff its id hash <= threshold.

    hashes: the seeded hash of every document's id (algorithms.ids), 8 bytes a document,
    for the whole corpus: the split is global, not per shard. Ids must be unique among the
    chosen: every copy of an id goes the same way, so a repeated id would put more
    documents in val than asked (all of them, if every id is the same): RepeatedIds.
    """
    h = np.asarray(hashes, dtype=np.uint64)
    n = len(h)
    if n < 2:
        raise ValueError(f"{n} document(s); need at least 2 to split train and val")
    k = n_val_docs(n, val_ratio)
    if k >= n:
        raise ValueError(f"--val-ratio {val_ratio} would put all {n} documents in val")
    threshold = int(np.partition(h, k - 1)[k - 1])
    chosen = int(np.count_nonzero(h <= np.uint64(threshold)))
    if chosen > k:
        picked = np.sort(h[h <= np.uint64(threshold)])
        twice = int(picked[np.flatnonzero(picked[1:] == picked[:-1])[0]])
        raise RepeatedIds(twice, chosen, k)
    return threshold, n, k


class RepeatedIds(ValueError):
    """Ids repeat among the documents chosen for val; `hash` is one repeated id's hash."""

    def __init__(self, hash: int, chosen: int, wanted: int):
        super().__init__(f"ids are not unique: val would take {chosen} documents instead of "
                         f"{wanted}; 5.7 splits by id")
        self.hash, self.chosen, self.wanted = hash, chosen, wanted


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


class NotConvertible(ValueError):
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
    kind "reference": the same tokenizer through encode_shard, one document at a time.
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
        if self.kind == "reference":
            return [self.ids(t) for t in texts]
        # long texts in pieces, cut where the split pattern cuts: HF holds ~150 bytes per
        # token of a call, 3 GB for one 20 MB document
        with plain_text(self.hf) as plain:
            return [np.asarray(ids, dtype=np.uint32) for ids in encode_bounded(plain, texts)]

    def pack(self, texts: list[str]) -> np.ndarray:
        """The documents' ids, each followed by one EOS, as one uint16 array."""
        if not texts:
            return np.empty(0, DTYPE)
        if self.kind == "reference":
            with plain_text(self.hf) as plain:
                return encode_shard(texts, plain, self.eos)
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
