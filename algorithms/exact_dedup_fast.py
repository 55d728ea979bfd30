"""dedup_exact's digests for a whole batch, normalised in one compiled pass.

`algorithms.exact_dedup.digest(text)` is the definition (tutorial section 3.2):
xxh3-128 of `" ".join(text.split()).lower()` in UTF-8. In Python the normalising is
the stage's whole cost (about 70 MB/s per core; the hash runs at several GB/s). Here it
is done straight from the batch's Arrow UTF-8 buffer:

    digests = batch_digests(batch.column("text"))   # == [digest(t) for t in texts]

Each code point goes through the table MinHash's normaliser uses
(`algorithms.minhash_fast`: whitespace, exactly the characters str.split() splits on,
becomes a space; any other character its str.lower() when that is one character that
does not depend on context), runs of spaces collapse to one, and the leading and
trailing ones go. A document holding a character the table cannot lower alone (capital
sigma, whose lowercase depends on the next letter, and U+0130, which lowers to two) is
left to `digest()` itself. The normalised bytes are then hashed with xxhash, one call
per document, as `digest()` hashes them: the digests are the same bytes, tested on the
sample, on every code point and on strings built to catch the corner cases.
"""

from __future__ import annotations

import numpy as np
import xxhash

from .arrays import fill_empty, from_numpy, text_buffers

from . import exact_dedup
from .jit import njit
from .kernels import utf8_char
from .minhash_fast import SPECIAL, _char_map


@njit(cache=True, inline="always")
def _encode(out, o, c):
    """Write code point c as UTF-8 at out[o]; returns the new o."""
    if c < 0x80:
        out[o] = c
        return o + 1
    if c < 0x800:
        out[o] = 0xC0 | (c >> 6)
        out[o + 1] = 0x80 | (c & 0x3F)
        return o + 2
    if c < 0x10000:
        out[o] = 0xE0 | (c >> 12)
        out[o + 1] = 0x80 | ((c >> 6) & 0x3F)
        out[o + 2] = 0x80 | (c & 0x3F)
        return o + 3
    out[o] = 0xF0 | (c >> 18)
    out[o + 1] = 0x80 | ((c >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((c >> 6) & 0x3F)
    out[o + 3] = 0x80 | (c & 0x3F)
    return o + 4


@njit(cache=True)
def _normalise_docs(data, offsets, char_map, out, out_off, special):
    """out[out_off[d]:out_off[d + 1]] = normalise(document d) in UTF-8, for the documents
    data[offsets[d]:offsets[d + 1]]; special[d] is set when the table cannot lower the
    document alone (its bytes here are then not used)."""
    o = 0
    for d in range(len(offsets) - 1):
        out_off[d] = o
        space = True            # no space before the first word
        sp = False
        p, end = offsets[d], offsets[d + 1]
        while p < end:
            c, n = utf8_char(data, p)
            p += n
            m = np.int64(char_map[c])
            if m == 32:
                if not space:
                    out[o] = 32
                    o += 1
                    space = True
            elif m == SPECIAL:
                sp = True
            else:
                o = _encode(out, o, m)
                space = False
        if o > out_off[d] and out[o - 1] == 32:   # no space after the last word
            o -= 1
        special[d] = sp
    out_off[len(offsets) - 1] = o


def batch_digests(col) -> list[bytes]:
    """[exact_dedup.digest(t) for t in col.to_pylist()] for an Arrow string column (a
    null is the empty text, as in digest())."""
    data, offsets = text_buffers(fill_empty(col))
    n = len(offsets) - 1
    # lowering never more than doubles a character's UTF-8 (2 bytes -> 3 at most)
    out = np.empty(2 * (int(offsets[-1]) - int(offsets[0])) + 8, np.uint8)
    out_off = np.empty(n + 1, np.int64)
    special = np.zeros(n, np.bool_)
    _normalise_docs(data, offsets, _char_map(), out, out_off, special)
    view = memoryview(out)
    bounds = out_off.tolist()
    digests = [xxhash.xxh3_128_digest(view[bounds[d]:bounds[d + 1]]) for d in range(n)]
    rows = np.flatnonzero(special)
    if len(rows):
        # indices as an Arrow array: take() given numpy imports pandas (0.4 s a process)
        for d, text in zip(rows.tolist(), col.take(from_numpy(rows.astype(np.int64))).to_pylist()):
            digests[d] = exact_dedup.digest(text)
    return digests


def load() -> None:
    """Load (or compile) the kernel and build its table now, on one tiny document made
    of numpy arrays (building an Arrow array from Python objects would import pandas)."""
    out = np.empty(8, np.uint8)
    _normalise_docs(np.frombuffer(b"A", np.uint8), np.array([0, 1], np.int64), _char_map(),
                    out, np.empty(2, np.int64), np.zeros(1, np.bool_))
