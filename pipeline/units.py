"""Work units: the input cut into pieces of at most --task-mb MB of text, fixed by the data.

A stage's parallel phases run one task per unit. A unit is a run of consecutive row
groups of one input shard, so a task reads only its own part of a file and a single
large shard still keeps every core busy. The cut depends only on the files (their
parquet footers) and --task-mb, never on --workers, so the output does not either.

    units = plan_units(list_shards("data/raw"), task_mb=32)
    for batch in read_unit(units[3], columns=["id", "text"]):
        ...

Units are listed in corpus order (shard, then row): unit i's rows come before unit i+1's.
Row groups are written at most ROW_GROUP_BYTES of text each (pipeline.shards), which
is the finest cut a unit can make.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from algorithms.arrays import combine, from_numpy
from .errors import StageError
from .shards import TEXT, _first_line, open_shard

DEFAULT_TASK_MB = 32.0
BATCH_ROWS = 1024


@dataclass(frozen=True)
class Unit:
    """Rows [row_start, row_start + rows) of `shard`: its row groups [rg_start, rg_stop)."""
    index: int
    shard: str
    shard_index: int
    rg_start: int
    rg_stop: int
    row_start: int
    rows: int
    text_bytes: int       # from the footer (uncompressed text column): an estimate

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        """The file name of this unit's output shard."""
        return f"part-{self.index:05d}.parquet"


def _group_rows(md) -> np.ndarray:
    """Rows of every row group, from a shard's footer."""
    return np.array([md.row_group(i).num_rows for i in range(md.num_row_groups)], np.int64)


def _row_group_sizes(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(rows, text bytes) of every row group of a shard, from its footer alone."""
    pf = open_shard(path)
    md = pf.metadata
    col = pf.schema_arrow.get_field_index(TEXT)
    rows = _group_rows(md)
    size = np.array([md.row_group(i).column(col).total_uncompressed_size
                     for i in range(md.num_row_groups)], np.int64)
    return rows, size


def split_row_groups(sizes: np.ndarray, task_bytes: float) -> list[tuple[int, int]]:
    """Cut a shard's row groups into ceil(total / task_bytes) runs of about equal size.

    Each run is [start, stop) of row group indices and holds at least one row group.
    The n-th cut goes at the row-group boundary nearest to n/units of the bytes, so a
    50 MB shard at 32 MB becomes two units of ~25 MB rather than 32 + 18.
    """
    n = len(sizes)
    if n == 0:
        return []
    total = float(sizes.sum())
    units = max(1, min(n, math.ceil(total / task_bytes)))
    if units == 1:
        return [(0, n)]
    ends = np.cumsum(sizes, dtype=np.float64)
    cuts = []
    for k in range(1, units):
        target = total * k / units
        j = int(np.searchsorted(ends, target))           # first group ending at/after target
        if j > 0 and target - ends[j - 1] < ends[j] - target:
            j -= 1                                      # the boundary before is nearer
        cuts.append(j + 1)
    bounds = sorted(set([0] + [c for c in cuts if 0 < c < n] + [n]))
    return list(zip(bounds[:-1], bounds[1:]))


def plan_units(shards: list[Path], task_mb: float = DEFAULT_TASK_MB) -> list[Unit]:
    """Every shard's row groups cut into units of at most about task_mb MB of text.

    A shard without rows gives no unit; a row group larger than task_mb is a unit alone.
    """
    if not 0 < task_mb < float("inf"):
        raise StageError(f"--task-mb {task_mb}: must be a positive number (a value above the "
                         "largest shard gives one task per shard)")
    out: list[Unit] = []
    for si, shard in enumerate(shards):
        rows, size = _row_group_sizes(shard)
        first_row = np.concatenate([[0], np.cumsum(rows)])
        for a, b in split_row_groups(size, task_mb * 1e6):
            out.append(Unit(index=len(out), shard=str(shard), shard_index=si, rg_start=a,
                            rg_stop=b, row_start=int(first_row[a]),
                            rows=int(first_row[b] - first_row[a]),
                            text_bytes=int(size[a:b].sum())))
    return out


def read_unit(unit: Unit | dict, columns: list[str] | None = None,
              batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """A unit's rows as record batches of at most batch_rows rows (bounded memory)."""
    u = unit if isinstance(unit, Unit) else Unit(**unit)
    pf = open_shard(u.shard)
    try:
        yield from pf.iter_batches(batch_size=batch_rows, columns=columns,
                                   row_groups=range(u.rg_start, u.rg_stop))
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{u.shard}: corrupt parquet data ({_first_line(e)})") from None


def read_unit_lazily(unit: Unit | dict, column: str, lazy: str, batch_rows: int = BATCH_ROWS
                     ) -> Iterator[tuple[pa.Table, Callable[[], pa.ChunkedArray]]]:
    """A unit's `column` in batches of whole row groups, about batch_rows rows each, with
    a function that reads the same rows' `lazy` column when first called: a pass that
    needs the text of only a few batches reads only those."""
    u = unit if isinstance(unit, Unit) else Unit(**unit)
    pf = open_shard(u.shard)
    md = pf.metadata

    def read(groups: list[int], name: str) -> pa.Table:
        try:
            return pf.read_row_groups(groups, columns=[name])
        except (pa.ArrowException, OSError) as e:
            raise StageError(f"{u.shard}: corrupt parquet data ({_first_line(e)})") from None

    groups: list[int] = []
    rows = 0
    for rg in range(u.rg_start, u.rg_stop):
        groups.append(rg)
        rows += md.row_group(rg).num_rows
        if rows < batch_rows and rg + 1 < u.rg_stop:
            continue
        got: list = []

        def later(groups=groups, got=got) -> pa.ChunkedArray:
            if not got:
                got.append(read(groups, lazy).column(lazy))
            return got[0]
        yield read(groups, column), later
        groups, rows = [], 0


def unit_offsets(units: list[Unit]) -> np.ndarray:
    """offsets[i] = global index (corpus order) of unit i's first row; offsets[-1] = total."""
    off = np.zeros(len(units) + 1, dtype=np.int64)
    np.cumsum([u.rows for u in units], out=off[1:])
    return off


def describe(units: list[Unit]) -> str:
    """'12 units of <= 32 MB from 3 shards' for a stage's first line."""
    shards = len({u.shard for u in units})
    big = max((u.text_bytes for u in units), default=0)
    return f"{len(units)} tasks from {shards} shard{'s' * (shards != 1)} (largest {big / 1e6:.1f} MB)"


def locate(offsets: np.ndarray, gidx) -> tuple[np.ndarray, np.ndarray]:
    """Global indices -> (unit, row within the unit)."""
    gidx = np.asarray(gidx, dtype=np.int64)
    unit = np.searchsorted(offsets, gidx, side="right") - 1
    return unit, gidx - offsets[unit]


def shard_rows_of(units: list[Unit], offsets: np.ndarray, gidx) -> tuple[pa.Array, np.ndarray]:
    """Global indices -> (input shard file name, as an Arrow string array; row within
    that shard), for reports that point at a document in the input."""
    from algorithms.arrays import strings

    u, r = locate(offsets, gidx)
    names = strings([Path(x.shard).name for x in units]).take(from_numpy(u, pa.int64()))
    return names, np.array([x.row_start for x in units], np.int64)[u] + r


def fetch_column(units: list[Unit], offsets: np.ndarray, gidx, column: str) -> pa.ChunkedArray:
    """The values of `column` at the given global indices, in their order, as Arrow
    (no Python object per value), reading only the row groups that hold them: each
    shard's footer once, each row group once (a report's examples never load a shard)."""
    gidx = np.asarray(gidx, dtype=np.int64)
    if len(gidx) == 0:
        typ = open_shard(units[0].shard).schema_arrow.field(column).type if units else pa.string()
        return pa.chunked_array([], type=typ)
    unit, local = locate(offsets, gidx)
    row = np.array([u.row_start for u in units], np.int64)[unit] + local
    shard_ids = {}
    shard_of = np.array([shard_ids.setdefault(u.shard, len(shard_ids)) for u in units])[unit]
    pieces, where = [], []
    for shard, sid in shard_ids.items():
        at = np.flatnonzero(shard_of == sid)
        if len(at) == 0:
            continue
        pf = open_shard(shard)
        starts = np.concatenate([[0], np.cumsum(_group_rows(pf.metadata))])
        rg = np.searchsorted(starts, row[at], side="right") - 1
        groups = np.unique(rg)
        try:   # the needed row groups, one after another in one table
            col = pf.read_row_groups(groups.tolist(), columns=[column]).column(column)
        except (pa.ArrowException, OSError) as e:
            raise StageError(f"{shard}: corrupt parquet data ({_first_line(e)})") from None
        sizes = starts[groups + 1] - starts[groups]
        begin = np.concatenate([[0], np.cumsum(sizes)[:-1]])   # where each group starts in col
        pos = begin[np.searchsorted(groups, rg)] + (row[at] - starts[rg])
        pieces.append(col.take(from_numpy(pos, pa.int64())))
        where.append(at)
    got = pa.chunked_array([c for p in pieces for c in p.chunks], type=pieces[0].type)
    order = np.empty(len(gidx), np.int64)      # got's i-th value belongs at where[i]
    order[np.concatenate(where)] = np.arange(len(gidx))
    return got.take(from_numpy(order))


def fetch_rows(units: list[Unit], offsets: np.ndarray, gidx, column: str) -> list:
    """fetch_column as a list of Python values."""
    return fetch_column(units, offsets, gidx, column).to_pylist()


WRITER = f"pyarrow {pa.__version__}, shards v1"  # what decides a written shard's bytes


def filter_recipe(unit: Unit, keep: np.ndarray, input_fingerprint: str | None) -> str:
    """A digest of everything that decides a filtered unit's bytes: the input, the rows,
    which of them are kept, and the writer. Equal recipes give byte-identical files."""
    import json

    import xxhash

    h = xxhash.xxh3_128()
    h.update(json.dumps([input_fingerprint, Path(unit.shard).name, unit.rg_start, unit.rg_stop,
                         unit.rows, WRITER]).encode())
    h.update(np.packbits(np.asarray(keep, dtype=bool)).tobytes())
    return h.hexdigest()


def previous_files(output: str | os.PathLike, input_fingerprint: str | None,
                   manifest_name: str = "manifest.json") -> dict[str, dict]:
    """The files of an output's current manifest that carry a recipe, by name, when that
    output was made from the same input: candidates for reuse by a rerun."""
    import json

    m = Path(output) / manifest_name
    try:
        man = json.loads(m.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if (man.get("input") or {}).get("fingerprint") != input_fingerprint:
        return {}
    return {f["name"]: {**f, "path": str(Path(output) / f["name"])}
            for f in man.get("files", []) if f.get("recipe")}


def filter_unit(unit: Unit | dict, dst: str | os.PathLike, keep,
                input_fingerprint: str | None = None, previous: dict | None = None,
                pick: dict | None = None) -> dict:
    """Copy the rows of a unit whose entry in `keep` is true into the shard `dst`.

    When `previous` (a file record of the output being replaced) has the same recipe and
    its bytes still match their digest, it is hard-linked instead of rewritten: a rerun
    that changes a few units rewrites only those. The record says which happened.
    pick: as filter_shard's (row numbers within the unit), whichever happened."""
    from .shards import filter_shard, link_or_copy, matches_record

    u = unit if isinstance(unit, Unit) else Unit(**unit)
    recipe = filter_recipe(u, keep, input_fingerprint)
    dst = Path(dst)
    if previous and previous.get("recipe") == recipe and matches_record(previous["path"],
                                                                         previous):
        link_or_copy(previous["path"], dst)
        rec = {k: v for k, v in previous.items() if k != "path"}
        if pick is not None:
            rec["picked"] = pick_rows(u, pick)
        return {**rec, "name": dst.name, "recipe": recipe, "reused": True}
    rec = filter_shard(u.shard, dst, keep, row_groups=range(u.rg_start, u.rg_stop), pick=pick)
    return {**rec, "recipe": recipe, "reused": False}


def pick_rows(unit: Unit | dict, pick: dict) -> dict[str, pa.Array]:
    """The values of some columns at given rows of a unit ({column: sorted row numbers}),
    as filter_shard's `pick` returns them, reading only the row groups that hold them."""
    u = unit if isinstance(unit, Unit) else Unit(**unit)
    at = np.array([0, u.rows], np.int64)
    return {col: combine(fetch_column([u], at, rows, col)) for col, rows in pick.items()}
