"""Step 3a (tutorial section 3.2): remove documents that are exactly the same.

    python dedup_exact.py                                  # data/cleaned -> data/dedup_exact
    python dedup_exact.py --input data/cleaned --output data/dedup_exact --workers 8
    python dedup_exact.py --memory-budget 4GB              # spill to disk beyond 4 GB

Two documents are "the same" when their normalised texts are equal: whitespace runs
collapsed to one space and everything lowercased (section 3.2: otherwise one extra space
makes a reprinted page look new). Each normalised text is hashed to a 128-bit digest
(xxh3-128), kept as two uint64 integers, never as a hex string. Of each group of equal
digests the first occurrence is kept, in the corpus's defined order (shard order, then
row order), so the output does not depend on --workers.

The tutorial keeps digests in a Python set, about 100 bytes per document (1 GB per 10M
documents). Here the driver holds at most 32 bytes per document: digests as two uint64
columns plus the document's global index (24 bytes) and the sort permutation (8 bytes).
When that would exceed --memory-budget, the digests are hash-partitioned into spill files
on disk and each partition is deduplicated alone: equal digests always land in the same
partition, so the result is the same.

Phases (each runs through the datatrove executor, tasks fixed by the data: units of at
most --task-mb MB of text, see pipeline/units.py):
  1. hash      one task per unit: digest of every document -> _work/hash/XXXXX.npy
  2. select    driver: sort the digests, mark every occurrence after the first
  3. filter    one task per unit: copy the kept rows -> part-XXXXX.parquet

Clean runs before dedup (section 3.7): cleaning can turn two different pages into the
same text, and only a later dedup can catch that.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline import layout
from pipeline.arrays import combine, from_numpy, strings
from pipeline.errors import StageError, run_stage
from pipeline.executors import (add_executor_args, load_task_results, save_task_result,
                               start_pool_early)
from pipeline.progress import task_progress
from pipeline.tables import human_bytes, markdown_table, parse_size, pct, save_report, table
from pipeline.shards import list_shards, write_table
from pipeline.staging import StageRun
from pipeline.units import (Unit, describe, fetch_column, filter_recipe, filter_unit, locate,
                            plan_units, previous_files, read_unit, unit_offsets)

WORK = "_work"
BYTES_PER_DOC = 32          # hi + lo + global index (24) + sort permutation (8)
SNIPPET = 160


# --------------------------------------------------------------------------------------
# Normalisation and digests. normalise() is defined here, once; dedup_minhash imports it.
# --------------------------------------------------------------------------------------

def normalise(text: str | None) -> str:
    """Collapse every whitespace run to one space and lowercase (section 3.2)."""
    return " ".join((text or "").split()).lower()


def digest(text: str | None) -> bytes:
    """The 16-byte (128-bit) digest of a document's normalised text."""
    return xxhash.xxh3_128_digest(normalise(text).encode("utf-8"))


def digests_to_array(digests: list[bytes]) -> np.ndarray:
    """16-byte digests -> an (n, 2) uint64 array (hi, lo): two integers, never hex."""
    if not digests:
        return np.zeros((0, 2), dtype=np.uint64)
    return np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64).reshape(-1, 2)


# --------------------------------------------------------------------------------------
# Small helpers both dedup stages use.
# --------------------------------------------------------------------------------------

def save_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """np.save via a temporary name, so a killed task never leaves a half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)


def snippet(text: str | None, n: int = SNIPPET) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[:n] + "..."


# --------------------------------------------------------------------------------------
# Phase 1: digest every document of one shard.
# --------------------------------------------------------------------------------------

def hash_task(rank: int, world_size: int, units: list[dict], staging: str) -> None:
    """Task `rank`: the digest of every document of unit `rank`, streamed batch by batch."""
    out = Path(staging) / WORK / "hash" / f"{rank:05d}.npy"
    digests: list[bytes] = []
    nbytes = 0
    prog = task_progress()
    for batch in read_unit(units[rank], columns=["text"]):
        texts = batch.column(0).to_pylist()
        digests += [digest(t) for t in texts]
        b = int(pc.sum(pc.binary_length(batch.column(0))).as_py() or 0)
        nbytes += b
        prog.add(len(texts), b)
    save_npy(out, digests_to_array(digests))
    save_task_result(staging, "hash", rank, {"docs": len(digests), "bytes": nbytes})


# --------------------------------------------------------------------------------------
# Phase 2: first occurrence per digest, on the driver, in at most 32 bytes per document.
# --------------------------------------------------------------------------------------

def first_occurrences(hi: np.ndarray, lo: np.ndarray, idx: np.ndarray | None = None,
                      chunk: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """For records (hi, lo, idx) with idx increasing (idx None: the positions), return
    (dup_idx, kept_idx): every record whose digest was already seen, and the idx of that
    digest's first record.

    np.lexsort is stable, so within a run of equal digests the records stay in idx
    order and the run's first record is the first occurrence. The sorted order is then
    walked in chunks, so besides the keys only the permutation (8 bytes per document)
    and the duplicates found are held.
    """
    order = np.lexsort((lo, hi))
    dups, kept = [], []
    prev = None          # (hi, lo, kept idx) of the last record of the previous chunk
    for start in range(0, len(order), chunk):
        o = order[start:start + chunk]
        h, l = hi[o], lo[o]
        ix = o if idx is None else idx[o]
        same = np.empty(len(o), dtype=bool)
        same[1:] = (h[1:] == h[:-1]) & (l[1:] == l[:-1])
        same[0] = prev is not None and h[0] == prev[0] and l[0] == prev[1]
        # the first record of each run of equal digests is the kept one
        run_id = np.cumsum(~same) - 1
        firsts = ix[~same]
        if same[0]:  # this chunk continues the previous chunk's run
            firsts = np.concatenate([[prev[2]], firsts])
            run_id += 1
        d = np.nonzero(same)[0]
        dups.append(ix[d].astype(np.int64))
        kept.append(firsts[run_id[d]].astype(np.int64))
        prev = (h[-1], l[-1], firsts[run_id[-1]])
    del order
    if not dups:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(dups), np.concatenate(kept)


def partitions_needed(total_docs: int, budget: int) -> int:
    """How many hash partitions keep each one within the memory budget (with 2x slack)."""
    need = total_docs * BYTES_PER_DOC
    if need <= budget:
        return 1
    return 2 * math.ceil(need / budget)


def select_first(hash_files: list[Path], offsets: np.ndarray, budget: int,
                 spill_dir: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """All duplicates (global index) and the global index of the copy kept for each,
    sorted by duplicate index. Returns (dup, kept, partitions)."""
    total = int(offsets[-1])
    parts = partitions_needed(total, budget)
    if parts == 1:
        # 16 bytes per document: two contiguous uint64 columns (lexsort would copy strided ones)
        hi = _column(hash_files, 0)
        lo = _column(hash_files, 1)
        dup, kept = first_occurrences(hi, lo)
        del hi, lo
    else:
        dup, kept = _select_spilled(hash_files, offsets, parts, spill_dir)
    order = np.argsort(dup, kind="stable")
    return dup[order], kept[order], parts


def _column(hash_files: list[Path], j: int) -> np.ndarray:
    cols = [np.load(f, mmap_mode="r")[:, j] for f in hash_files]
    return np.concatenate(cols) if cols else np.zeros(0, np.uint64)


def _select_spilled(hash_files, offsets, parts, spill_dir: Path):
    """Hash-partition the digests into spill files, then dedup each partition alone.

    Each partition is three column files (hi, lo, global index), appended shard by
    shard, so inside a partition the index increases, and reading it back gives
    contiguous columns: 24 bytes per record, plus 8 for the sort.
    """
    shutil.rmtree(spill_dir, ignore_errors=True)
    spill_dir.mkdir(parents=True)
    cols = ("hi", "lo", "idx")
    files = {(q, c): open(spill_dir / f"part-{q:05d}.{c}", "wb") for q in range(parts) for c in cols}
    try:
        for s, f in enumerate(hash_files):
            hl = np.load(f, mmap_mode="r")
            data = {"hi": np.ascontiguousarray(hl[:, 0]), "lo": np.ascontiguousarray(hl[:, 1]),
                    "idx": np.arange(offsets[s], offsets[s + 1], dtype=np.int64)}
            p = (data["hi"] % np.uint64(parts)).astype(np.int64)
            order = np.argsort(p, kind="stable")   # keeps idx increasing inside a partition
            bounds = np.searchsorted(p[order], np.arange(parts + 1))
            for q in range(parts):
                sel = order[bounds[q]:bounds[q + 1]]
                for c in cols:
                    data[c][sel].tofile(files[(q, c)])
    finally:
        for fh in files.values():
            fh.close()
    dups, kept = [], []
    for q in range(parts):
        hi, lo, idx = (np.fromfile(spill_dir / f"part-{q:05d}.{c}", dtype=t)
                       for c, t in zip(cols, (np.uint64, np.uint64, np.int64)))
        d, k = first_occurrences(hi, lo, idx)
        dups.append(d)
        kept.append(k)
        del hi, lo, idx
        for c in cols:
            (spill_dir / f"part-{q:05d}.{c}").unlink()
    shutil.rmtree(spill_dir, ignore_errors=True)
    return np.concatenate(dups), np.concatenate(kept)


# --------------------------------------------------------------------------------------
# Phase 3: copy the kept rows of one shard.
# --------------------------------------------------------------------------------------

def keep_mask(dup: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Which of the documents lo..hi-1 (global indices) are not in the sorted array dup."""
    a, b = np.searchsorted(dup, [lo, hi])
    keep = np.ones(hi - lo, dtype=bool)
    keep[np.asarray(dup[a:b]) - lo] = False
    return keep


def filter_task(rank: int, world_size: int, units: list[dict], offsets: list[int],
                staging: str, drop: str = "dup.npy", input_fingerprint: str | None = None,
                previous: dict | None = None, pick: list[str] = ()) -> None:
    """Copy unit `rank` without the rows whose global index is in the sorted array
    _work/<drop> (dedup_minhash.py uses this task too, with its own list). A file of the
    previous output with the same recipe is reused (pipeline.units.filter_unit).

    For each column of `pick`, the values at the global rows _work/pick_<column>.npy that
    fall in this unit are saved for the report (Picked): the task reads them anyway."""
    work = Path(staging) / WORK
    dup = np.load(work / drop, mmap_mode="r")
    lo, hi = offsets[rank], offsets[rank + 1]
    unit = Unit(**units[rank])
    rows = {}
    for col in pick:
        want = np.load(work / f"pick_{col}.npy", mmap_mode="r")
        a, b = np.searchsorted(want, [lo, hi])
        rows[col] = np.asarray(want[a:b], np.int64) - lo
    rec = filter_unit(unit, Path(staging) / unit.name, keep_mask(dup, lo, hi), input_fingerprint,
                      (previous or {}).get(unit.name), pick=rows if pick else None)
    for col, values in rec.pop("picked", {}).items():
        save_arrow(work / "picked" / f"{col}-{rank:05d}.arrow", pa.table({col: values}))
    task_progress().add(hi - lo, rec["text_bytes"])
    save_task_result(staging, "filter", rank, rec)


def filter_phase(run: StageRun, args, units: list[Unit], offsets: np.ndarray,
                 drop: str, pick: dict[str, np.ndarray] | None = None) -> list[dict]:
    """The filter phase of both dedup stages: one task per unit, copying its kept rows.

    A rerun that changes no unit's rows (the previous output's recipes all match) only
    checks and links the previous files, in this process rather than in a worker pool.
    pick ({column: global rows}): the tasks also keep those rows' values, for the report
    to read with Picked instead of reading the input again."""
    staging = run.staging
    for col, rows in (pick or {}).items():
        save_npy(staging / WORK / f"pick_{col}.npy", np.unique(np.asarray(rows, np.int64)))
    previous = previous_files(run.output, run.input_fingerprint)
    dup = np.load(staging / WORK / drop, mmap_mode="r")
    unchanged = bool(previous) and all(
        (previous.get(u.name) or {}).get("recipe") == filter_recipe(
            u, keep_mask(dup, offsets[i], offsets[i + 1]), run.input_fingerprint)
        for i, u in enumerate(units))
    run.parallel("filter", filter_task, len(units), args, inline=unchanged,
                 total_docs=int(offsets[-1]), total_bytes=sum(u.text_bytes for u in units),
                 units=[u.to_dict() for u in units], offsets=[int(x) for x in offsets],
                 staging=str(staging), drop=drop, input_fingerprint=run.input_fingerprint,
                 previous=previous, pick=[] if unchanged else sorted(pick or {}))
    for col in pick or {}:   # one file per column, in the order of its rows
        parts = staging / WORK / "picked"
        if unchanged or not units:   # no task read the input: read those rows here
            values = fetch_column(units, offsets, np.load(staging / WORK / f"pick_{col}.npy"), col)
        else:
            values = pa.concat_tables([load_arrow(parts / f"{col}-{r:05d}.arrow")
                                       for r in range(len(units))]).column(col)
        save_arrow(parts / f"{col}.arrow", pa.table({col: values}))
    return load_task_results(staging, "filter", len(units))


def save_arrow(path: Path, table: pa.Table) -> None:
    """A small Arrow file (uncompressed, memory-mappable), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)


def load_arrow(path: Path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


class Picked:
    """The values of `column` that filter_phase picked, looked up by global row."""

    def __init__(self, staging: Path, column: str):
        work = Path(staging) / WORK
        self.rows = np.load(work / f"pick_{column}.npy")
        self.values = load_arrow(work / "picked" / f"{column}.arrow").column(column)

    def at(self, gidx) -> pa.Array:
        """The values at global rows `gidx` (any order, repeats allowed; each one picked)."""
        gidx = np.asarray(gidx, np.int64)
        pos = np.searchsorted(self.rows, gidx)
        if len(gidx) and (pos.max() >= len(self.rows) or (self.rows[pos] != gidx).any()):
            raise ValueError("rows asked for that the filter tasks did not pick")
        return combine(self.values.take(from_numpy(pos, pa.int64())))


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------

def largest_groups(kept: np.ndarray, n: int = 5) -> list[tuple[int, int]]:
    """(kept global index, copies including the kept one) of the n largest groups."""
    if len(kept) == 0:
        return []
    first, counts = np.unique(kept, return_counts=True)
    order = np.lexsort((first, -counts))[:n]  # biggest first, ties by corpus order
    return [(int(first[i]), int(counts[i]) + 1) for i in order]


def shard_rows_of(units: list[Unit], offsets: np.ndarray, gidx) -> tuple[pa.Array, np.ndarray]:
    """Global indices -> (input shard file name, as an Arrow string array; row within
    that shard)."""
    u, r = locate(offsets, gidx)
    names = strings([Path(x.shard).name for x in units]).take(from_numpy(u, pa.int64()))
    return names, np.array([x.row_start for x in units], np.int64)[u] + r


EXAMPLES = 5   # removed documents shown in the report


def report_picks(dup: np.ndarray, kept: np.ndarray) -> dict[str, np.ndarray]:
    """The global rows whose id and text the report shows, picked by the filter tasks."""
    shown = np.array([g for g, _ in largest_groups(kept)] + list(dup[:EXAMPLES]), np.int64)
    return {"id": np.concatenate([dup, kept, shown]), "text": shown}


def build_report(units, offsets, dup, kept, counts, staging: Path, partitions: int) -> str:
    """Save report/removed.parquet and report/dedup_exact_stats.{json,md}; return the text.
    Ids and texts come from the filter tasks (report_picks)."""
    rep = staging / "report"
    rep.mkdir(exist_ok=True)
    id_of, text_of = Picked(staging, "id"), Picked(staging, "text")
    ids, kept_ids = id_of.at(dup), id_of.at(kept)
    s, r = shard_rows_of(units, offsets, dup)
    write_table(rep / "removed.parquet", pa.table({
        "id": ids, "kept_id": kept_ids, "shard": s, "row": from_numpy(r, pa.int64())}))

    groups = largest_groups(kept)
    g_text = text_of.at([g for g, _ in groups]).to_pylist()
    g_ids = id_of.at([g for g, _ in groups]).to_pylist()
    group_rows = [[i, c, snippet(t, 70)] for (g, c), i, t in zip(groups, g_ids, g_text)]
    ex_n = min(EXAMPLES, len(dup))
    ex_text = text_of.at(dup[:ex_n]).to_pylist()
    examples = [{"id": ids[i].as_py(), "kept_id": kept_ids[i].as_py(), "text": snippet(ex_text[i])}
                for i in range(ex_n)]

    c = counts
    rows = [["documents", c["docs_in"], c["docs_out"], pct(c["docs_out"], c["docs_in"])],
            ["bytes", human_bytes(c["bytes_in"]), human_bytes(c["bytes_out"]),
             pct(c["bytes_out"], c["bytes_in"])]]
    head = ["dedup_exact", "before", "after", "kept"]
    text = table(head, rows)
    text += f"\nremoved {c['removed']['exact_duplicate']:,} exact duplicates " \
            f"({pct(c['removed']['exact_duplicate'], c['docs_in'])}) in {c['dup_groups']:,} groups"
    if partitions > 1:
        text += f"; digests spilled to disk in {partitions} hash partitions"
    if group_rows:
        text += "\n\nlargest duplicate groups:\n" + table(["kept id", "copies", "text"], group_rows)
    md = "# dedup_exact\n\n" + markdown_table(head, rows)
    md += f"\n\nRemoved {c['removed']['exact_duplicate']:,} exact duplicates in {c['dup_groups']:,} groups.\n"
    if group_rows:
        md += "\n## Largest duplicate groups\n\n" + markdown_table(["kept id", "copies", "text"], group_rows)
    if examples:
        md += "\n\n## Removed examples\n\n" + markdown_table(
            ["removed id", "kept id", "text"], [[e["id"], e["kept_id"], e["text"]] for e in examples])
    sizes = {}
    if len(kept):
        _, copies = np.unique(kept, return_counts=True)
        v, n = np.unique(copies + 1, return_counts=True)
        sizes = {str(int(a)): int(b) for a, b in zip(v, n)}
    save_report(rep, "dedup_exact_stats", {
        **c, "partitions": partitions, "group_sizes": sizes,
        "largest_groups": [{"kept_id": r[0], "copies": r[1], "text": r[2]} for r in group_rows],
        "examples": examples}, md)
    return text


# --------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=str(layout.CLEANED), help="default: data/cleaned")
    p.add_argument("--output", default=str(layout.DEDUP_EXACT), help="default: data/dedup_exact")
    p.add_argument("--memory-budget", default="2GB",
                   help="driver memory for digests (32 bytes/document); beyond it, spill "
                        "hash partitions to disk (default 2GB). Never changes the output")
    add_executor_args(p)
    args = p.parse_args(argv)
    start_pool_early(args)
    budget = parse_size(args.memory_budget, "--memory-budget")
    if args.workers < 1:
        raise StageError("--workers must be at least 1")
    inp, out = Path(args.input), Path(args.output)
    if inp.resolve() == out.resolve():
        raise StageError(f"--output {out} is the input folder; choose another")
    shards = list_shards(inp)
    units = plan_units(shards, args.task_mb)
    config = {"normalise": "collapse whitespace, lowercase", "digest": "xxh3_128",
              "task_mb": args.task_mb}
    run = StageRun("dedup_exact", out, config, input_manifest=inp / "manifest.json")
    if run.resumed:
        print(f"resuming in {run.staging}", file=sys.stderr)
    print(f"dedup_exact: {describe(units)}", file=sys.stderr)
    offsets = unit_offsets(units)
    staging = run.staging
    work = staging / WORK
    task_args = {"units": [u.to_dict() for u in units]}
    sizes = {"total_docs": int(offsets[-1]), "total_bytes": sum(u.text_bytes for u in units)}

    run.parallel("hash", hash_task, len(units), args, **sizes, **task_args, staging=str(staging))
    hashed = load_task_results(staging, "hash", len(units))

    with run.phase("select"):
        if (work / "dup.npy").exists() and (work / "kept.npy").exists():
            dup, kept = np.load(work / "dup.npy"), np.load(work / "kept.npy")
            partitions = int(np.load(work / "partitions.npy"))
        else:
            files = [work / "hash" / f"{i:05d}.npy" for i in range(len(units))]
            dup, kept, partitions = select_first(files, offsets, budget, work / "spill")
            save_npy(work / "kept.npy", kept)
            save_npy(work / "partitions.npy", np.array(partitions))
            save_npy(work / "dup.npy", dup)  # last: its presence marks the phase done

    records = filter_phase(run, args, units, offsets, "dup.npy", pick=report_picks(dup, kept))

    counts = {
        "docs_in": int(offsets[-1]), "docs_out": sum(r["rows"] for r in records),
        "bytes_in": sum(h["bytes"] for h in hashed), "bytes_out": sum(r["text_bytes"] for r in records),
        "removed": {"exact_duplicate": int(len(dup))},
        "dup_groups": int(len(np.unique(kept))),
    }
    with run.phase("report"):
        text = build_report(units, offsets, dup, kept, counts, staging, partitions)
    shutil.rmtree(work, ignore_errors=True)
    run.commit(records, counts)
    print(text)
    print(f"wrote {out}/ ({len(records)} shards), {out}/report/ and {out}/manifest.json")
    return 0


if __name__ == "__main__":
    run_stage(main)
