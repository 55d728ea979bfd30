"""The exchange files of dedup_minhash's phases past one machine (--cluster tasks), under
the staging folder's work directory: one folder a step, one file a task (and one more
per extra array), its rows sorted by the partition that reads them, with the bounds of
each partition's slice beside it. A task of the next step reads its slice of every file
of the step before (memory-mapped): it holds one partition, never the whole corpus.

Two ways to cut: the cluster rounds' edges by a hash of their first node
(algorithms.components.partition_of, `write_partitioned`), and the candidates by ranges
of document indices (`write_ranges`), so that a task reads the signatures of one range."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from algorithms.arrays import from_numpy
from algorithms.components import by_partition
from pipeline.work_files import load_arrow, mapped_npy, save_arrow, save_npy


MOVED = {"read": 0, "written": 0}   # bytes this process's task read and wrote here


def moved(reset: bool = True) -> dict:
    """What the current task moved through exchange files so far (then zeroed)."""
    out = dict(MOVED)
    if reset:
        MOVED.update(read=0, written=0)
    return out


def count(read: int = 0, written: int = 0) -> None:
    MOVED["read"] += int(read)
    MOVED["written"] += int(written)


def write_partitioned(folder: Path, rank: int, edges: np.ndarray, parts: int) -> None:
    """Task `rank`'s edges, by the partition of their first node."""
    ordered, bounds = by_partition(edges, parts)
    save_npy(folder / f"{rank:05d}.bounds.npy", bounds)
    save_npy(folder / f"{rank:05d}.npy", ordered)
    count(written=ordered.nbytes + bounds.nbytes)


def gather_bounds(folder: Path, writers: int) -> None:
    """After a step: every writer's bounds in one file, a row a partition (the driver,
    a block of writers at a time), so that a reader opens one file for them, not one a
    writer: with W writers and R readers, R opens instead of R x W."""
    if writers == 0 or not (folder / "00000.bounds.npy").exists():
        return
    parts = len(np.load(folder / "00000.bounds.npy"))
    tmp = folder / "bounds.tmp.npy"
    out = mapped_npy(tmp, np.int64, (parts, writers))
    block = max(1, (1 << 24) // parts)
    for w0 in range(0, writers, block):
        ws = range(w0, min(writers, w0 + block))
        out[:, ws.start:ws.stop] = np.stack([np.load(folder / f"{w:05d}.bounds.npy")
                                             for w in ws], axis=1)
    out.flush()
    del out
    tmp.replace(folder / "bounds.npy")


def _bounds(folder: Path, writers: int, rank: int) -> np.ndarray:
    """(2, writers): where partition `rank`'s slice of each writer's file starts and ends."""
    gathered = folder / "bounds.npy"
    if gathered.exists():
        return np.array(np.load(gathered, mmap_mode="r")[rank:rank + 2])
    return np.stack([np.load(folder / f"{w:05d}.bounds.npy")[rank:rank + 2]
                     for w in range(writers)], axis=1).reshape(2, writers)


def read_partition(folder: Path, writers: int, rank: int, name: str = "",
                   empty: np.ndarray | None = None) -> np.ndarray:
    """Partition `rank`'s slice of the files the `writers` tasks of a step wrote (name:
    which of each task's arrays; empty: its shape when nobody wrote a row)."""
    out = [np.zeros((0, 2), np.int64) if empty is None else empty]
    b = _bounds(folder, writers, rank)
    for w in np.flatnonzero(b[1] > b[0]):
        a = np.load(folder / f"{w:05d}{name}.npy", mmap_mode="r")
        out.append(np.array(a[b[0, w]:b[1, w]]))
        count(read=out[-1].nbytes)
    return np.concatenate(out)


def range_of(docs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The range each document index falls in; starts: the ranges' first indices, then
    the end of the last."""
    return np.searchsorted(starts, docs, side="right") - 1


def write_ranges(folder: Path, rank: int, key: np.ndarray, starts: np.ndarray,
                 table: pa.Table | None = None, **arrays: np.ndarray) -> None:
    """Task `rank`'s rows, by the range of documents `key` falls in (stable: rows keep
    their order within a range); `arrays`: name -> rows ("" the first file); `table`:
    Arrow columns of the same rows (strings, say), kept as RANK.arrow."""
    part = range_of(key, starts)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(len(starts)))
    for name, a in arrays.items():
        save_npy(folder / f"{rank:05d}{name}.npy", a[order])
        count(written=a.nbytes)
    if table is not None:
        save_arrow(folder / f"{rank:05d}.arrow", table.take(from_numpy(order, pa.int64())))
        count(written=table.nbytes)
    save_npy(folder / f"{rank:05d}.bounds.npy", bounds)


def read_table_partition(folder: Path, writers: int, rank: int) -> pa.Table | None:
    """Partition `rank`'s slice of the Arrow files write_ranges left (None: no rows)."""
    out = []
    b = _bounds(folder, writers, rank)
    for w in np.flatnonzero(b[1] > b[0]):
        t = load_arrow(folder / f"{w:05d}.arrow")
        out.append(t.slice(int(b[0, w]), int(b[1, w] - b[0, w])))
        count(read=out[-1].nbytes)
    return pa.concat_tables(out) if out else None
