"""The sample's language mix counted in one compiled pass over the UTF-8 bytes.

`algorithms.tokenizer_sample.script_counts(texts)` is the definition: per document, the
lead bytes of Chinese characters (0xE4-0xE9) and the ASCII letters, found with a byte
table and counted with two running sums in numpy. The running sums are most of the
sample tasks' time outside word counting (0.84 CPU s of 4.2 on the 85 MB that
train_tokenizer samples from 256 MB of the benchmark corpus); here each document's bytes
are counted in one loop, with the same table:

    han, letters = script_counts(texts)   # == tokenizer_sample.script_counts(texts)

tests/test_train_tokenizer.py checks that both give the same counts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .arrays import text_buffers

from .jit import njit
from .tokenizer_sample import BYTE_CLASS


@njit(cache=True, nogil=True)
def _script_counts(data, offsets, byte_class, han, letters):
    for d in range(len(offsets) - 1):
        h = 0
        a = 0
        for i in range(offsets[d], offsets[d + 1]):
            c = byte_class[data[i]]
            h += c == 1
            a += c == 2
        han[d] = h
        letters[d] = a


def script_counts(texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Per document: Chinese characters and ASCII letters (null and empty texts: 0)."""
    data, offsets = text_buffers(texts)
    n = len(offsets) - 1
    han, letters = np.zeros(n, np.int64), np.zeros(n, np.int64)
    _script_counts(data, offsets, BYTE_CLASS, han, letters)
    return han, letters
