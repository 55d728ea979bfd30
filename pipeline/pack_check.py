"""pack_parallel.py's identity check: before any task, the fast encoder must give HF
tokenizers' ids on a sample of this corpus (the first documents of every shard), or the
stage warns and encodes with HF (--encoder auto), or stops (a fast encoder asked for by
name). HF encodes the sample in a thread of its own while the driver builds the fast
encoder and starts its pool, on the core that would otherwise wait."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from algorithms.packing import Encoder
from algorithms.tokenizer_file import encode_bounded, plain_text

from .shards import iter_batches


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
