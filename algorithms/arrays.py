"""Arrow arrays to and from numpy, without importing pandas.

`pa.array(...)` and `Array.to_numpy()` import pandas on their first call in a process
(pyarrow checks every input for a pandas type), which costs about 0.3 s of CPU: a tenth
of a stage rerun that only filters and writes. These helpers build and read the plain
arrays a stage needs (numbers, booleans, strings) from Arrow's buffers directly, which
is all those calls do for such arrays anyway.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

_TYPES = {np.dtype(np.bool_): pa.bool_(), np.dtype(np.int8): pa.int8(),
          np.dtype(np.int16): pa.int16(), np.dtype(np.int32): pa.int32(),
          np.dtype(np.int64): pa.int64(), np.dtype(np.uint8): pa.uint8(),
          np.dtype(np.uint16): pa.uint16(), np.dtype(np.uint32): pa.uint32(),
          np.dtype(np.uint64): pa.uint64(), np.dtype(np.float32): pa.float32(),
          np.dtype(np.float64): pa.float64()}


def _bits(values: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(values.astype(bool, copy=False), bitorder="little"))


def from_numpy(values, type: pa.DataType | None = None, mask=None) -> pa.Array:
    """A 1-d numpy array (booleans or numbers) as an Arrow array of `type` (default: the
    matching type); entries where `mask` is true are null."""
    values = np.asarray(values)
    if type is None:
        if values.dtype not in _TYPES:
            raise TypeError(f"no Arrow type for numpy {values.dtype}")
        type = _TYPES[values.dtype]
    n = len(values)
    valid = None
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            valid = _bits(~mask)
    if pa.types.is_boolean(type):
        data = _bits(values)
    else:
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=type.to_pandas_dtype()))
    return pa.Array.from_buffers(type, n, [valid, data],
                                 null_count=-1 if valid is not None else 0)


def strings(values: Sequence[str | None], max_bytes: int = 2**31 - 1
            ) -> pa.Array | pa.ChunkedArray:
    """A list of str (None for null) as an Arrow string array; as several, chunked, when
    the text is more than one string array holds (`max_bytes`, 2 GB; a longer single
    text is an error)."""
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    null = np.fromiter((v is None for v in values), bool, len(encoded))
    ends = np.zeros(len(encoded) + 1, dtype=np.int64)   # ends[i]: bytes before text i
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=ends[1:])
    chunks, start = [], 0
    while start < len(encoded) or not chunks:
        # as many texts as fit in max_bytes, at least one
        fit = int(np.searchsorted(ends, ends[start] + max_bytes, side="right")) - 1
        stop = min(max(start + 1, fit), len(encoded))
        offsets = ends[start:stop + 1] - ends[start]
        if offsets[-1] >= 2**31:
            raise ValueError(f"a text of {offsets[-1]:,} bytes is more than a string array holds")
        valid = _bits(~null[start:stop]) if null[start:stop].any() else None
        data = pa.py_buffer(b"".join(encoded[start:stop]))
        chunks.append(pa.Array.from_buffers(pa.string(), stop - start,
                                            [valid, pa.py_buffer(offsets.astype(np.int32)), data],
                                            null_count=-1 if valid is not None else 0))
        start = stop
    return chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks, pa.string())


def combine(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array. pyarrow's combine_chunks builds the empty array of a column
    with no chunks through pandas; this does not."""
    if isinstance(col, pa.Array):
        return col
    if col.num_chunks == 0:
        return pa.nulls(0, col.type)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def text_buffers(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A string column's UTF-8 bytes and its n + 1 offsets into them (int64), without a
    copy of the bytes: document d is data[offsets[d]:offsets[d + 1]]. Nulls are empty."""
    col = combine(col)
    n = len(col)
    if n == 0 or col.buffers()[2] is None:
        return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    off_type = np.int64 if pa.types.is_large_string(col.type) else np.int32
    offsets = np.frombuffer(col.buffers()[1], off_type)[col.offset:col.offset + n + 1]
    return np.frombuffer(col.buffers()[2], np.uint8), offsets.astype(np.int64)


def to_numpy(col: pa.Array | pa.ChunkedArray, null=None) -> np.ndarray:
    """A column of booleans or numbers as a numpy array (a copy). Nulls become `null`;
    a column with nulls and no `null` given is an error."""
    col = combine(col)
    n, off = len(col), col.offset
    validity, data = col.buffers()[:2]
    if pa.types.is_boolean(col.type):
        bits = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        out = np.unpackbits(bits, bitorder="little", count=off + n)[off:].astype(bool)
    else:
        dtype = np.dtype(col.type.to_pandas_dtype())
        if dtype.kind not in "biuf":
            raise TypeError(f"to_numpy: not a column of numbers: {col.type}")
        out = np.frombuffer(data, dtype, count=n, offset=off * dtype.itemsize).copy() if n else \
            np.zeros(0, dtype)
    if col.null_count:
        if null is None:
            raise ValueError(f"to_numpy: {col.null_count} nulls and no value given for them")
        ok = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little",
                           count=off + n)[off:].astype(bool)
        out = out.astype(np.result_type(out.dtype, np.asarray(null).dtype), copy=False)
        out[~ok] = null
    return out


def fill_empty(col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A string column with its nulls replaced by "" (`col.fill_null("")` would convert
    the "" through pandas)."""
    return col.fill_null(strings([""])[0]) if col.null_count else col
