"""Reading a corpus from local files (.parquet, .jsonl, .jsonl.gz, .txt) and writing it as
the sharded parquet every stage reads: pyarrow tables with at least `id` and `text`.

Null or non-string texts are counted and skipped, never passed on silently; a bad record
(invalid UTF-8, not JSON, a text that is not a string) stops the run with one line naming
it, or is counted, named and skipped (Skips).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from algorithms.arrays import from_numpy, strings, to_numpy
from .errors import StageError
from .shards import ShardWriter, open_shard, text_bytes

LOCAL_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".json.gz", ".txt")
BATCH_ROWS = 4096

BAD_RECORDS_IN_MANIFEST = 100   # the manifest names this many; report/bad_records.jsonl all


class Skips:
    """Records a reader skipped: counts by reason, and every bad record by file and place.

    A null text is a missing document: counted and skipped. An empty text is a document
    (clean.py's too_short rule counts it), except the empty pieces of a .txt file cut by
    --txt-delimiter, which are counted as "empty text" and skipped. A bad record -- a line
    that is not valid UTF-8 or not JSON, an object without a text field, a text that is
    not a string -- stops the run with one line naming it (--on-bad-record error, the
    default), or is counted, named and skipped (--on-bad-record skip): one bad line need
    not stop a 30 GB run, and none is dropped without a trace.
    """

    def __init__(self, on_bad: str = "error"):
        self.on_bad = on_bad
        self.counts: dict[str, int] = {}
        self.bad_records: list[dict] = []

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts[reason] = self.counts.get(reason, 0) + n

    def bad(self, path: Path | str, where: str, reason: str) -> None:
        """A bad record at `where` ("line 12", "row 3", "byte 40") of file `path`."""
        if self.on_bad != "skip":
            raise StageError(f"{path}:{where.split()[-1]}: {reason} ({where}); "
                             "--on-bad-record skip counts and skips such records")
        self.add(reason.split(" (")[0])
        self.bad_records.append({"file": str(path), "where": where, "reason": reason})

    def merge(self, other: dict) -> None:
        for k, v in other.get("skipped", {}).items():
            self.add(k, v)
        self.bad_records += other.get("bad_records", [])


class Meter:
    """Progress of a download: input bytes read (of the known total, for the rate and the
    ETA), documents and text MB written. A bar only when a person is watching."""

    def __init__(self, total_bytes: int | None, enabled: bool | None = None):
        from tqdm import tqdm

        from pipeline.progress import show_progress

        self.docs = self.text_bytes = self.base = 0
        self.bar = tqdm(total=total_bytes, desc="download", unit="B", unit_scale=True,
                        unit_divisor=1000, leave=False,
                        disable=not (show_progress() if enabled is None else enabled))

    def at(self, pos_in_file: int) -> None:
        """The reader has read pos_in_file bytes of the current input file."""
        self.bar.update(max(0, self.base + pos_in_file - self.bar.n))

    def file_done(self, size: int) -> None:
        self.base += size
        self.at(0)

    def wrote(self, docs: int, nbytes: int) -> None:
        self.docs += docs
        self.text_bytes += nbytes
        self.bar.set_postfix_str(f"{self.docs:,} docs, {self.text_bytes / 1e6:,.1f} MB text",
                                 refresh=False)

    def close(self) -> None:
        self.bar.close()


def expand_inputs(spec: str) -> list[Path]:
    """Files named by a path, a directory or a glob, in sorted order."""
    p = Path(spec)
    if p.is_dir():
        files = [f for f in p.rglob("*") if f.is_file() and f.name.endswith(LOCAL_SUFFIXES)]
    elif p.is_file():
        files = [p]
    else:
        files = [Path(f) for f in glob.glob(spec, recursive=True) if Path(f).is_file()]
    if not files:
        raise StageError(f"--input {spec}: no such file, directory or matching files")
    bad = [f for f in files if not f.name.endswith(LOCAL_SUFFIXES)]
    if bad:
        raise StageError(f"{bad[0]}: unsupported file type (use {', '.join(LOCAL_SUFFIXES)})")
    return sorted(files)


def check_id_type(path: Path, schema: pa.Schema) -> None:
    """A parquet input's id column, when it has one, must hold strings or integers."""
    if "id" not in schema.names:
        return
    t = schema.field("id").type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
            or pa.types.is_binary(t)):
        raise StageError(f"{path}: column 'id' has type {t}; ids must be strings or "
                         "integers (or leave the column out: FILE#ROW ids are made)")


# a null string, made without pa.scalar(None, ...): a Python object given to Arrow (None,
# or a 0 to compare with) imports pandas (algorithms.arrays), 0.25 CPU s in each process
# that converts a parquet file
NO_ID = pa.nulls(1, pa.string())[0]


def read_parquet(path: Path, source: str, skips: Skips, keep: list[str],
                 meter: Meter | None = None) -> Iterator[pa.Table]:
    import pyarrow.compute as pc

    pf = open_shard(path, require=("text",), stream=True)
    has_id = "id" in pf.schema_arrow.names
    check_id_type(path, pf.schema_arrow)   # (local files were checked before any task)
    size, total_rows = path.stat().st_size, max(1, pf.metadata.num_rows)
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS):
            t = pa.Table.from_batches([batch])
            n = t.num_rows
            ids = pc.cast(t.column("id"), pa.string()) if has_id else None
            if ids is not None:   # an empty id is no id (a length cast to bool: no 0)
                empty = pc.invert(pc.cast(pc.binary_length(ids), pa.bool_()))
                ids = pc.if_else(empty, NO_ID, ids)
            if ids is None or ids.null_count:   # no id, or none for some rows: file#row
                made = strings([f"{source}#{i}" for i in range(row, row + n)])
                ids = made if ids is None else pc.if_else(pc.is_valid(ids), ids, made)
            out = pa.table({"id": ids, "text": t.column("text"),
                            "source": strings([source] * n),
                            **{k: t.column(k) for k in keep}})
            # Arrow does not check UTF-8 on read: every string column is checked, the
            # text, the id and the metadata carried to data/raw/
            bad = {}
            for name in out.column_names:
                if pa.types.is_string(out.schema.field(name).type) or \
                        pa.types.is_large_string(out.schema.field(name).type):
                    for i in invalid_utf8_rows(out.column(name)):
                        bad.setdefault(i, name)
            bad = sorted(bad.items())
            for i, name in bad:
                skips.bad(path, f"row {row + i}", "invalid UTF-8" + (
                    "" if name == "text" else f" in column '{name}'"))
            bad = [i for i, _ in bad]
            if len(bad):
                mask = np.ones(n, bool)
                mask[bad] = False
                out = out.filter(from_numpy(mask))
            nulls = out.column("text").null_count
            if nulls:
                skips.add("null text", nulls)
                out = out.filter(pc.is_valid(out.column("text")))
            row += n
            if meter:
                meter.at(size * row // total_rows)
            yield out
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{path}: corrupt parquet data ({str(e).splitlines()[0]})") from None


def invalid_utf8_rows(col: pa.ChunkedArray) -> list[int]:
    """Rows of a parquet string column that are not valid UTF-8 (Arrow does not check on
    read). The full check is one pass in C; rows are located only when it fails."""
    try:
        col.validate(full=True)
        return []
    except pa.ArrowInvalid:
        bad = []
        for i, v in enumerate(col.cast(pa.binary()).to_pylist()):
            if v is not None:
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    bad.append(i)
        return bad


def _open_text(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def read_jsonl(path: Path, source: str, skips: Skips, text_field: str = "text",
               meter: Meter | None = None) -> Iterator[pa.Table]:
    ids, texts = [], []
    try:
        with _open_text(path) as f:
            raw_file = getattr(f, "fileobj", f)  # gzip: the compressed file's position
            for lineno, raw in enumerate(f, 1):
                try:   # a byte-order mark opening the file (Windows editors write one)
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    skips.bad(path, f"line {lineno}", f"invalid UTF-8 (at byte {e.start})")
                    continue
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    skips.bad(path, f"line {lineno}", f"invalid JSON ({e.msg})")
                    continue
                except (ValueError, RecursionError) as e:   # an integer of 5,000 digits,
                    # arrays nested 100,000 deep: JSON, but not what Python loads
                    skips.bad(path, f"line {lineno}", f"JSON that cannot be loaded "
                                                      f"({type(e).__name__}: {str(e)[:80]})")
                    continue
                if not isinstance(rec, dict):
                    skips.bad(path, f"line {lineno}", f"not a JSON object (a {type(rec).__name__})")
                    continue
                if text_field not in rec:
                    skips.bad(path, f"line {lineno}", f"no '{text_field}' field")
                    continue
                text = rec[text_field]
                if text is None:
                    skips.add("null text")
                    continue
                if not isinstance(text, str):
                    skips.bad(path, f"line {lineno}", f"non-string text ({type(text).__name__})")
                    continue
                rid = rec.get("id")
                if isinstance(rid, (dict, list, bool)):   # str() would make "True", "['a']"
                    skips.bad(path, f"line {lineno}", f"an id that is a {type(rid).__name__} "
                                                      "(ids are strings or numbers)")
                    continue
                # no id, or an empty one (no id at all downstream): file#line
                rid = str(rid) if rid not in (None, "") else f"{source}#{lineno}"
                if "\\u" in line and not _encodable(text, rid):
                    # an escape of a lone surrogate ("\ud800") is valid JSON, but no
                    # UTF-8 text: the only way a line that decoded can hold one
                    skips.bad(path, f"line {lineno}", "a lone surrogate escape (\\ud800-"
                                                      "\\udfff): not Unicode text")
                    continue
                ids.append(rid)
                texts.append(text)
                if len(texts) >= BATCH_ROWS:
                    if meter:
                        meter.at(raw_file.tell())
                    yield _table(ids, texts, source)
                    ids, texts = [], []
    except (OSError, EOFError) as e:
        raise StageError(f"{path}: cannot read ({e})") from None
    if texts:
        yield _table(ids, texts, source)


def _encodable(*values: str) -> bool:
    try:
        for v in values:
            v.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def read_txt(path: Path, source: str, skips: Skips, delimiter: str | None) -> Iterator[pa.Table]:
    """A .txt file is one document, or several split on --txt-delimiter."""
    data = path.read_bytes()
    try:   # without a byte-order mark opening the file (Windows editors write one)
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        skips.bad(path, f"byte {e.start}", "invalid UTF-8 (the whole file is one record)")
        return
    docs = text.split(delimiter) if delimiter else [text]
    docs = [d.strip() for d in docs]
    empty = sum(1 for d in docs if not d)
    skips.add("empty text", empty)
    ids, texts = [], []
    for i, d in enumerate(docs):
        if d:
            ids.append(f"{source}#{i}")
            texts.append(d)
    if texts:
        yield _table(ids, texts, source)


def _table(ids: list[str], texts: list[str], source: str) -> pa.Table:
    return pa.table({"id": strings(ids), "text": strings(texts),
                     "source": strings([source] * len(ids))})


def common_metadata(paths: list[Path]) -> list[str]:
    """Metadata columns (beyond id/text) that every parquet input has with one type; each
    file's id column is checked on the way (check_id_type)."""
    parquet = [p for p in paths if p.suffix == ".parquet"]
    schemas = [open_shard(p, require=("text",)).schema_arrow for p in parquet]
    for p, s in zip(parquet, schemas):
        check_id_type(p, s)   # before any task: a bad id column is one line, nothing started
    if not schemas or len(schemas) != len(paths):
        return []
    keep = []
    for f in schemas[0]:
        if f.name in ("id", "text", "source"):
            continue
        if all(f.name in s.names and s.field(f.name).type == f.type for s in schemas):
            keep.append(f.name)
    return keep


def read_sources(paths: list[Path], skips: Skips, txt_delimiter: str | None = None,
                 root: Path | None = None, meter: Meter | None = None,
                 keep: list[str] | None = None) -> Iterator[pa.Table]:
    """The documents of `paths` as tables (id, text, source and the metadata columns
    `keep`, by default those every parquet file of `paths` has)."""
    if keep is None:
        keep = common_metadata(paths)
    for p in paths:
        source = str(p.relative_to(root)) if root and p.is_relative_to(root) else p.name
        if p.suffix == ".parquet":
            tables = read_parquet(p, source, skips, keep, meter)
        elif p.name.endswith((".jsonl", ".jsonl.gz", ".json.gz")):
            tables = read_jsonl(p, source, skips, meter=meter)
        else:
            tables = read_txt(p, source, skips, txt_delimiter)
        for t in tables:
            if meter:
                meter.wrote(t.num_rows, text_bytes(t))
            yield t
        if meter:
            meter.file_done(p.stat().st_size)


# --------------------------------------------------------------------------------------
# Writing bounded shards.
# --------------------------------------------------------------------------------------

def write_shards(tables: Iterable[pa.Table], out_dir: Path, prefix: str,
                 max_rows: int, max_bytes: int) -> list[dict]:
    """Re-shard a stream of tables into files of at most max_rows rows and max_bytes of text
    (a single document larger than max_bytes gets a shard of its own)."""
    import numpy as np
    import pyarrow.compute as pc

    records: list[dict] = []
    writer = None
    for t in tables:
        start = 0
        sizes = np.cumsum(to_numpy(pc.binary_length(t.column("text")), null=0))
        while start < t.num_rows:
            if writer is None:
                writer = ShardWriter(out_dir / f"{prefix}-{len(records):05d}.parquet", t.schema)
            before = sizes[start - 1] if start else 0
            room_bytes = max_bytes - writer.text_bytes
            fit = int(np.searchsorted(sizes[start:] - before, room_bytes, side="right"))
            n = min(max_rows - writer.rows, fit, t.num_rows - start)
            if n == 0 and writer.rows == 0:
                n = 1  # one oversized document: it still gets written
            if n > 0:
                writer.write(t.slice(start, n))
                start += n
            if writer.rows >= max_rows or n == 0 or writer.text_bytes >= max_bytes:
                records.append(writer.close())
                writer = None
    if writer is not None:
        records.append(writer.close())
    return records


# -- ids: each document's key for the later stages (pack splits val by id) ----------------

ID_HASH_SEED = 0


def save_id_hashes(shards: list[Path], dest: Path) -> None:
    """The 64-bit hash of every id of `shards`, in one .npy file (8 bytes a document):
    what repeated_ids() reads to find ids that are not unique, without holding the ids."""
    import numpy as np

    from algorithms.ids import id_hashes

    from .shards import read_table

    parts = [id_hashes(read_table(s, columns=["id"]).column("id").to_pylist(), ID_HASH_SEED)
             for s in shards]
    tmp = dest.with_name(dest.name + ".tmp.npy")
    np.save(tmp, np.concatenate(parts) if parts else np.empty(0, np.uint64))
    os.replace(tmp, dest)


def repeated_ids(hash_files: list[Path], shards: list[Path]) -> tuple[int, str | None, int]:
    """(documents whose id another document also has, the most repeated id, how many
    documents have it); (0, None, 0) when every id is unique."""
    import numpy as np

    from .shards import ids_with_hash

    h = np.concatenate([np.load(f) for f in hash_files]) if hash_files else np.empty(0, np.uint64)
    values, counts = np.unique(h, return_counts=True)
    if len(values) == len(h):
        return 0, None, 0
    # the id itself, and its count by the ids (not only by their hashes)
    found = ids_with_hash(shards, ID_HASH_SEED, int(values[np.argmax(counts)]))
    name, n = max(found.items(), key=lambda kv: kv[1])
    return int(counts[counts > 1].sum()), name, n
