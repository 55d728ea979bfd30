"""Reading and writing the parquet shards that flow between stages.

A stage's input and output directories hold `*.parquet` shards (zstd) with at least the
columns `id` and `text`, written in row groups of bounded size. Later stages cut them
into tasks of a few row groups each (pipeline.units), read in record batches.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from algorithms.arrays import from_numpy, to_numpy
from algorithms.ids import id_hashes
from .errors import StageError
from .layout import script_for_dir, writer_of

TEXT = "text"
ID = "id"
COMPRESSION = "zstd"
ROW_GROUP_ROWS = 8192
ROW_GROUP_BYTES = 1 << 20  # text per row group: the finest cut of a task (pipeline.units)


def list_shards(input_dir: str | os.PathLike) -> list[Path]:
    """The input directory's parquet shards in their defined (sorted) order."""
    d = Path(input_dir)
    if not d.exists():
        from .lock import describe_holder, writer_of

        h = writer_of(d)   # its first run, under way: the folder appears when it commits
        if h is not None:
            raise StageError(f"input directory {d} does not exist yet: "
                             f"{describe_holder(h)} is writing it; wait for it to finish, "
                             "then rerun")
        old = d.parent / f".{d.name}.old"
        if old.is_dir():   # its stage was stopped between the two renames of its commit
            raise StageError(f"input directory {d} does not exist: a run of "
                             f"{script_for_dir(d)} was stopped while it swapped in its output "
                             f"({old} holds the previous one); rerun {script_for_dir(d)}, "
                             "which finishes the swap or undoes it")
        raise StageError(f"input directory {d} does not exist; run {script_for_dir(d)} first")
    if not d.is_dir():
        raise StageError(f"input {d} is not a directory")
    shards = sorted(p for p in d.glob("*.parquet") if p.is_file())
    if not shards:
        made = (d / "manifest.json").exists()   # a stage's output that kept no document
        raise StageError(f"input directory {d} holds no .parquet shards"
                         + (f": {writer_of(d)} kept no document; see its report" if made
                            else ""))
    return shards


def open_shard(path: str | os.PathLike, require=(ID, TEXT), stream: bool = False) -> pq.ParquetFile:
    """Open a shard, failing with one line that names the file when it is unreadable.

    stream: read column chunks through a 1 MB buffer, page by page, instead of whole. A
    file written elsewhere may hold one row group of gigabytes (pandas and pyarrow write
    a million rows per group by default); read whole, each column chunk would sit in
    memory compressed (476 MB for 1 GB of text in one group; 693 MB peak against 233)."""
    try:
        pf = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False) if stream \
            else pq.ParquetFile(path)
    except FileNotFoundError:
        raise StageError(f"{path}: file not found") from None
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{path}: not a readable parquet file ({_first_line(e)})") from None
    names = pf.schema_arrow.names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise StageError(f"{path}: the column name {twice[0]!r} is used twice "
                         f"(columns: {', '.join(names)})")
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
    w = ShardWriter(path, table.schema)
    w.write(table)
    return w.close()


def writer_options(schema: pa.Schema) -> dict:
    """How every shard is encoded. The text column is never dictionary-encoded (documents
    are unique: the attempt costs time and saves nothing) and keeps no min/max statistics."""
    small = [f.name for f in schema if f.name != TEXT]
    return {"compression": COMPRESSION, "use_dictionary": small,
            "write_statistics": small}


class ShardWriter:
    """Write a shard incrementally, batch by batch, in bounded memory.

    Rows are buffered into row groups of at most ROW_GROUP_ROWS rows and ROW_GROUP_BYTES
    of text (a longer document is a row group alone). Where a row group ends depends only
    on the rows written, not on how they were batched, so the file's bytes do not either.
    Row groups are the pieces a later stage's tasks are cut from (pipeline.units).
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.schema = schema
        self.sink = HashingFile(self.tmp)
        self.writer = pq.ParquetWriter(self.sink, schema, **writer_options(schema))
        self.rows = 0
        self.text_bytes = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        table = table.cast(self.schema) if table.schema != self.schema else table
        self.rows += table.num_rows
        if TEXT in table.column_names:
            self.text_bytes += text_bytes(table)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        """Write every complete row group buffered (all of them when final)."""
        if not self._pending_rows:
            return
        pending = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        sizes = _row_sizes(pending)
        start = 0
        n = pending.num_rows
        while start < n:
            stop = _group_end(sizes, start)
            if stop >= n and not final:
                break  # the group may still grow: wait for more rows
            # one contiguous chunk per row group: the page layout then depends on the
            # rows alone, not on how they arrived
            group = pending.slice(start, stop - start).combine_chunks()
            self.writer.write_table(group, row_group_size=stop - start)
            start = stop
        rest = pending.slice(start) if start < n else None
        self._pending = [rest] if rest is not None else []
        self._pending_rows = n - start

    def close(self) -> dict:
        self._flush(final=True)
        self.writer.close()
        self.sink.close()
        os.replace(self.tmp, self.path)
        return file_record(self.path, digest=self.sink.hexdigest(), rows=self.rows,
                           text_bytes=self.text_bytes)


class HashingFile:
    """A file being written that hashes its bytes (xxh3-128) as they pass, so that the
    digest a manifest records needs no second read of the file: Parquet's writer writes
    through it as through any Python file."""

    def __init__(self, path: str | os.PathLike):
        self._file = open(path, "wb")
        self._hash = xxhash.xxh3_128()

    def write(self, data) -> int:
        self._hash.update(data)
        return self._file.write(data)

    def tell(self) -> int:
        return self._file.tell()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def writable(self) -> bool:
        return True

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def __enter__(self) -> "HashingFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _row_sizes(table: pa.Table) -> np.ndarray:
    import pyarrow.compute as pc

    if TEXT not in table.column_names:
        return np.zeros(table.num_rows, np.int64)
    return to_numpy(pc.binary_length(table.column(TEXT)), null=0).astype(np.int64)


def _group_end(sizes: np.ndarray, start: int) -> int:
    """End of the row group that starts at `start`: as many rows as fit in ROW_GROUP_ROWS
    rows and ROW_GROUP_BYTES of text, and at least one."""
    stop = min(len(sizes), start + ROW_GROUP_ROWS)
    cum = np.cumsum(sizes[start:stop])
    fit = int(np.searchsorted(cum, ROW_GROUP_BYTES, side="right"))
    return start + max(1, fit)


def text_bytes(table: pa.Table | pa.RecordBatch) -> int:
    """UTF-8 bytes of the text column (nulls count 0)."""
    import pyarrow.compute as pc

    col = table.column(TEXT)
    total = pc.sum(pc.binary_length(col)).as_py()
    return int(total or 0)


def ids_with_hash(shards: list[Path], seed: int, h: int) -> dict[str, int]:
    """The ids whose id_hashes(., seed) is `h`, each with how many documents have it:
    a hash says that ids repeat, and this names them, by the ids themselves (one pass
    over the id column, in batches)."""
    found: dict[str, int] = {}
    for s in shards:
        for batch in iter_batches(s, columns=[ID], batch_rows=65536):
            ids = batch.column(0).to_pylist()
            for i in np.flatnonzero(id_hashes(ids, seed) == np.uint64(h)):
                found[str(ids[i])] = found.get(str(ids[i]), 0) + 1
    return found


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Put the file src at dst atomically: a hard link (no bytes copied) where the file
    system allows one, else a copy."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    if dst.exists() and os.path.samefile(src, dst):
        return   # already there (a rename of one link onto another of the same file
                 # does nothing, and left the .tmp link beside it)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def file_digest(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """xxh3-128 of a file's bytes, as hex (used only in manifests, never per document)."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def file_record(path: str | os.PathLike, digest: str | None = None, name: str | None = None,
                **extra) -> dict:
    """A file's manifest record: name (the file's own, unless a path relative to the
    output folder is given), size, xxh3-128 digest (read from the file unless the writer
    computed it while writing) and `extra`."""
    path = Path(path)
    return {"name": name or path.name, "size": path.stat().st_size,
            "xxh3_128": digest or file_digest(path), **extra}


def matches_record(path: str | os.PathLike, record: dict) -> bool:
    """Is the file at path still the one a record describes: there, with its size and
    xxh3-128 digest (the size first: a file that changed size is not read)."""
    path = Path(path)
    return (path.is_file() and path.stat().st_size == record["size"]
            and file_digest(path) == record["xxh3_128"])


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def filter_shard(src: str | os.PathLike, dst: str | os.PathLike, keep, batch_rows: int = 4096,
                 row_groups: range | None = None, pick: dict | None = None) -> dict:
    """Copy the rows of shard `src` (or of its row groups `row_groups`) whose entry in the
    boolean array `keep` is true, batch by batch; the schema is kept as it is. Returns
    the file record.

    pick ({column: sorted row numbers}, kept or not): also take those rows' values in the
    same pass, returned under the record's key "picked" ({column: Arrow array}), which a
    caller removes before the record goes into a manifest."""
    keep = np.asarray(keep, dtype=bool)
    pf = open_shard(src)
    md = pf.metadata
    groups = range(md.num_row_groups) if row_groups is None else row_groups
    rows = sum(md.row_group(i).num_rows for i in groups)
    if keep.shape[0] != rows:
        raise StageError(f"{src}: {rows} rows but a keep mask of {keep.shape[0]}")
    if keep.all() and groups == range(md.num_row_groups):
        return _copy_shard(src, dst, pf, pick)
    w = ShardWriter(dst, pf.schema_arrow)
    picked = Picker(pick)
    start = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=groups):
            picked.take(batch, start)
            m = keep[start:start + batch.num_rows]
            start += batch.num_rows
            if m.all():
                w.write(batch)
            elif m.any():
                w.write(batch.filter(from_numpy(m)))
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{src}: corrupt parquet data ({_first_line(e)})") from None
    rec = w.close()
    if pick is not None:
        rec["picked"] = picked.values(pf.schema_arrow)
    return rec


def _copy_shard(src: str | os.PathLike, dst: str | os.PathLike, pf: pq.ParquetFile,
                pick: dict | None) -> dict:
    """filter_shard when every row of the whole shard is kept: the shard itself is the
    output, copied byte for byte (the bytes the writer would make again from the same
    rows, for a shard it wrote), with its digest taken as it passes, instead of being
    compressed again. Its rows are still decoded first (the text lengths, the picked
    values, and a corrupt shard named before anything is written)."""
    picked = Picker(pick)
    nbytes = start = 0
    try:
        for batch in pf.iter_batches():
            picked.take(batch, start)
            start += batch.num_rows
            if TEXT in batch.schema.names:
                nbytes += text_bytes(batch)
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{src}: corrupt parquet data ({_first_line(e)})") from None
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    sink = HashingFile(tmp)
    with open(src, "rb") as f:
        while b := f.read(1 << 22):
            sink.write(b)
    sink.close()
    os.replace(tmp, dst)
    rec = file_record(dst, digest=sink.hexdigest(), rows=start, text_bytes=nbytes)
    if pick is not None:
        rec["picked"] = picked.values(pf.schema_arrow)
    return rec


class Picker:
    """Collects, batch by batch, the values of some columns at given row numbers."""

    def __init__(self, pick: dict | None):
        self.pick = {c: np.asarray(r, np.int64) for c, r in (pick or {}).items()}
        self.got: dict[str, list] = {c: [] for c in self.pick}

    def take(self, batch: pa.RecordBatch, start: int) -> None:
        """Take the wanted rows of `batch`, whose first row is row number `start`."""
        for col, rows in self.pick.items():
            a, b = np.searchsorted(rows, [start, start + batch.num_rows])
            if b > a:
                self.got[col].append(batch.column(col).take(from_numpy(rows[a:b] - start)))

    def values(self, schema: pa.Schema) -> dict[str, pa.Array]:
        out = {}
        for col, rows in self.pick.items():
            typ = schema.field(col).type
            got = pa.concat_arrays(self.got[col]) if self.got[col] else pa.nulls(0, typ)
            if len(got) != len(rows):
                raise ValueError(f"{col}: {len(got)} of {len(rows)} rows found (row numbers "
                                 "past the end?)")
            out[col] = got
        return out


def stage_shards(folder: str | os.PathLike) -> list[Path]:
    """list_shards of a stage's output folder, refusing a parquet file its manifest does
    not list: read as input, it would pass unchecked (and miscount the chain)."""
    from .layout import writer_of
    from .manifest import MANIFEST, read_manifest

    shards = list_shards(folder)
    try:
        listed = {f["name"] for f in read_manifest(Path(folder) / MANIFEST)["files"]}
    except StageError:   # no manifest, or a broken one: the input check says so
        return shards
    stray = [s for s in shards if s.name not in listed]
    if stray:
        raise StageError(f"{stray[0]}: in {folder} but not in its manifest ({len(stray)} such "
                         f"shard(s)); {writer_of(folder)} did not write it: move it out of "
                         "the folder")
    return shards
