"""Reading and writing the parquet shards that flow between stages.

A stage's input and output directories hold `*.parquet` shards (zstd) with at least the
columns `id` and `text`. Later stages parallelise by shard: task i reads shard i.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from .errors import StageError
from .layout import script_for_dir

TEXT = "text"
ID = "id"
COMPRESSION = "zstd"
ROW_GROUP_ROWS = 8192


def list_shards(input_dir: str | os.PathLike) -> list[Path]:
    """The input directory's parquet shards in their defined (sorted) order."""
    d = Path(input_dir)
    if not d.exists():
        raise StageError(f"input directory {d} does not exist; run {script_for_dir(d)} first")
    if not d.is_dir():
        raise StageError(f"input {d} is not a directory")
    shards = sorted(p for p in d.glob("*.parquet") if p.is_file())
    if not shards:
        raise StageError(f"input directory {d} holds no .parquet shards")
    return shards


def open_shard(path: str | os.PathLike, require=(ID, TEXT)) -> pq.ParquetFile:
    """Open a shard, failing with one line that names the file when it is unreadable."""
    try:
        pf = pq.ParquetFile(path)
    except FileNotFoundError:
        raise StageError(f"{path}: file not found") from None
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{path}: not a readable parquet file ({_first_line(e)})") from None
    names = pf.schema_arrow.names
    for col in require:
        if col not in names:
            raise StageError(f"{path}: no '{col}' column (columns: {', '.join(names)})")
    if TEXT in require:
        t = pf.schema_arrow.field(TEXT).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise StageError(f"{path}: column 'text' has type {t}, expected a string column")
    return pf


def iter_batches(path: str | os.PathLike, columns: list[str] | None = None,
                 batch_rows: int = 4096) -> Iterator[pa.RecordBatch]:
    """Stream a shard in record batches (bounded memory), naming the file on corruption."""
    pf = open_shard(path)
    try:
        yield from pf.iter_batches(batch_size=batch_rows, columns=columns)
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{path}: corrupt parquet data ({_first_line(e)})") from None


def read_table(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    pf = open_shard(path)
    try:
        return pf.read(columns=columns)
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{path}: corrupt parquet data ({_first_line(e)})") from None


def write_table(path: str | os.PathLike, table: pa.Table) -> dict:
    """Write one shard (zstd) via a temporary name; return its file record for the manifest."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    os.replace(tmp, path)
    return file_record(path, rows=table.num_rows,
                       text_bytes=text_bytes(table) if TEXT in table.column_names else 0)


class ShardWriter:
    """Write a shard incrementally, batch by batch, in bounded memory."""

    def __init__(self, path: str | os.PathLike, schema: pa.Schema):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.schema = schema
        self.writer = pq.ParquetWriter(self.tmp, schema, compression=COMPRESSION)
        self.rows = 0
        self.text_bytes = 0

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        self.writer.write_table(table.cast(self.schema), row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows
        if TEXT in table.column_names:
            self.text_bytes += text_bytes(table)

    def close(self) -> dict:
        self.writer.close()
        os.replace(self.tmp, self.path)
        return file_record(self.path, rows=self.rows, text_bytes=self.text_bytes)


def text_bytes(table: pa.Table | pa.RecordBatch) -> int:
    """UTF-8 bytes of the text column (nulls count 0)."""
    import pyarrow.compute as pc

    col = table.column(TEXT)
    total = pc.sum(pc.binary_length(col)).as_py()
    return int(total or 0)


def file_digest(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """xxh3-128 of a file's bytes, as hex (used only in manifests, never per document)."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def file_record(path: str | os.PathLike, **extra) -> dict:
    path = Path(path)
    return {"name": path.name, "size": path.stat().st_size, "xxh3_128": file_digest(path), **extra}


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def filter_shard(src: str | os.PathLike, dst: str | os.PathLike, keep, batch_rows: int = 4096) -> dict:
    """Copy the rows of shard `src` whose entry in the boolean array `keep` is true.

    Streams batch by batch; the schema is kept as it is. Returns the file record.
    """
    import numpy as np

    keep = np.asarray(keep, dtype=bool)
    pf = open_shard(src)
    if keep.shape[0] != pf.metadata.num_rows:
        raise StageError(f"{src}: {pf.metadata.num_rows} rows but a keep mask of {keep.shape[0]}")
    w = ShardWriter(dst, pf.schema_arrow)
    start = 0
    for batch in iter_batches(src, batch_rows=batch_rows):
        m = keep[start:start + batch.num_rows]
        start += batch.num_rows
        if m.all():
            w.write(batch)
        elif m.any():
            w.write(batch.filter(pa.array(m)))
    return w.close()
