"""dedup_minhash.py past one machine (--cluster tasks): 3.5's buckets, the verification
of every candidate and 3.6's connected components as phases of tasks on the executor,
each task holding about --task-mb of hashes, candidates or edges.

After the signatures (one task per unit, as in the driver's mode):

  band-order   one task per unit: each band's hashes sorted, with their rows
  buckets      one task per (band, range of hash values): that slice of every unit's
               sorted hashes, grouped as minhash.bucket_pairs groups a whole band (a
               bucket is one hash value, so it never spans two tasks); the pairs (a < b)
               go to the range of documents a falls in
  pairs        one task per range of documents: its candidates from every band, each
               once, sent to the range of b, with the signature of each a once per range
               it is sent to
  verify       one task per range of documents: those signatures against its own;
               (a, b, matching positions) sent back to the range of a
  candidates   one task per range of documents: its candidates sorted (the driver's
               order), counted and binned for the report; the accepted ones are the
               first round's edges
  components   the rounds of algorithms/components.py; then each cluster, whole in the
               partition of its smallest index, counted for the report
  kept-side    one task per unit: the id and signature of each kept document it holds,
               once, sent to the partition that holds its cluster
  kept-join    one task per partition of clusters: each kept document's id and
               signature sent to each unit holding members of its cluster, once a unit
  removed-rows one task per unit: its removed documents (the rows its filter task
               drops) and their rows of report/removed.parquet

No task reads a signature at random: each is read in the slices of a range or a unit.
The driver reads each task's counts, gathers each step's bounds into one file, and copies
the candidate files and the report's rows end to end into one file each (the driver's
mode's bytes); a rerun with another --threshold runs only the candidates phase, on
slices of the kept candidates.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from algorithms import components, minhash
from algorithms.arrays import from_numpy
from pipeline.component_files import (count, gather_bounds, moved, range_of, read_partition,
                                      read_table_partition, write_partitioned, write_ranges)
from pipeline.minhash_report import EXAMPLES, SIM_BINS, Shown, removed_table, shown_entries
from pipeline.shards import ShardWriter
from pipeline.units import Unit, fetch_column
from pipeline.task_results import save_task_result
from pipeline.work_files import WORK, load_arrow, mapped_npy, save_arrow, save_npy

HASH_SPACE = 1 << 64


def _folder(staging: str, name: str) -> Path:
    return Path(staging) / WORK / name


def _result(staging: str, phase: str, rank: int, result: dict) -> None:
    """A task's result, with the bytes it read and wrote through the exchange files."""
    save_task_result(staging, phase, rank, {**result, "moved": moved()})


def run_phase(run, phase: str, fn, tasks: int | None = None, drop: tuple[str, ...] = (),
              wrote: tuple[str, ...] = (), **kwargs) -> list[dict]:
    """A phase of tasks on the executor; its results, in rank order. The bytes its tasks
    moved go into the manifest beside its time and memory (resources.phases). drop: the
    exchange folders only this phase read, deleted once it is done (a resumed run skips a
    finished phase), so the disk holds about two steps' files at a time, not all of them.
    wrote: the folders it wrote, whose bounds are gathered for the next phase's readers."""
    run.parallel(phase, fn, tasks=tasks, sized=False, **kwargs)
    results = run.results(phase, tasks)
    for name in wrote:
        gather_bounds(run.staging / WORK / name, len(results))
    for name in drop:
        shutil.rmtree(run.staging / WORK / name, ignore_errors=True)
    res = run.staged.resources.get(phase)
    if res is not None:
        for key in ("read", "written"):
            res[f"bytes_{key}"] = sum(r["moved"][key] for r in results)
    return results


def ranges(n_items: int, parts: int) -> np.ndarray:
    """The starts of `parts` ranges of about equal size over 0..n_items, then n_items."""
    return np.array([i * n_items // parts for i in range(parts + 1)], np.int64)


def parts_for(nbytes: float, task_mb: float) -> int:
    return max(1, math.ceil(nbytes / (task_mb * 2**20)))


# --------------------------------------------------------------------------------------
# 3.5's buckets, by band and by range of hash values
# --------------------------------------------------------------------------------------

def band_order_task(rank: int, world_size: int, staging: str) -> None:
    """Unit `rank`'s band hashes, each band sorted (stable), with the row of each."""
    h = np.load(_folder(staging, "band") / f"{rank:05d}.npy")
    order = np.argsort(h, axis=1, kind="stable")
    out = _folder(staging, "border")
    save_npy(out / f"{rank:05d}.rows.npy", order.astype(np.uint32))
    save_npy(out / f"{rank:05d}.npy", np.take_along_axis(h, order, axis=1))
    count(read=h.nbytes, written=h.nbytes * 3 // 2)
    _result(staging, "band-order", rank, {"docs": int(h.shape[1])})


def bucket_range_task(rank: int, world_size: int, staging: str, offsets: list[int],
                      hash_ranges: int, doc_starts: list[int]) -> None:
    """Band rank // hash_ranges, hash values in range rank % hash_ranges: the slice of
    every unit's sorted hashes, in corpus order within a value; its candidate pairs, by
    the range of documents of their first."""
    band, r = divmod(rank, hash_ranges)
    lo, hi = (r * HASH_SPACE) // hash_ranges, ((r + 1) * HASH_SPACE) // hash_ranges
    src = _folder(staging, "border")
    hs, docs = [np.zeros(0, np.uint64)], [np.zeros(0, np.int64)]
    for u in range(len(offsets) - 1):
        sh = np.load(src / f"{u:05d}.npy", mmap_mode="r")[band]
        a = int(np.searchsorted(sh, np.uint64(lo)))
        b = len(sh) if hi == HASH_SPACE else int(np.searchsorted(sh, np.uint64(hi)))
        if b > a:
            hs.append(np.array(sh[a:b]))   # copies: a view would keep the map (and the
            # pages the search faulted in around it, 64 KB a fault) to the task's end
            rows = np.load(src / f"{u:05d}.rows.npy", mmap_mode="r")[band, a:b]
            docs.append(rows.astype(np.int64) + offsets[u])
            count(read=12 * (b - a))
    h, d = np.concatenate(hs), np.concatenate(docs)
    order = np.argsort(h, kind="stable")           # units in order: ties stay in corpus order
    h, d = h[order], d[order]
    pairs = d[minhash.bucket_pairs(h)]
    write_ranges(_folder(staging, "buckets"), rank, pairs[:, 0], np.array(doc_starts),
                 **{"": pairs})
    _result(staging, "buckets", rank, {"pairs": int(len(pairs)), "hashes": int(len(h))})


# --------------------------------------------------------------------------------------
# Verification: a stream join of the candidates with the signatures of both documents
# --------------------------------------------------------------------------------------

def signature_range(staging: str, offsets: list[int], lo: int, hi: int) -> np.ndarray:
    """The signatures of documents lo..hi-1, read in slices of the units that hold them."""
    out = []
    for u in range(len(offsets) - 1):
        a, b = max(lo, offsets[u]), min(hi, offsets[u + 1])
        if b > a:
            s = np.load(_folder(staging, "sig") / f"{u:05d}.npy", mmap_mode="r")
            out.append(np.array(s[a - offsets[u]:b - offsets[u]]))
            count(read=out[-1].nbytes)
    return np.concatenate(out) if out else np.zeros((0, 0), np.uint32)


def pairs_task(rank: int, world_size: int, staging: str, offsets: list[int], writers: int,
               doc_starts: list[int]) -> None:
    """Range `rank`: its candidates from every bucket task, each once, sorted, sent to the
    range of their second document; with them, the signature of each first document
    once per range it has candidates in (not once per candidate)."""
    e = read_partition(_folder(staging, "buckets"), writers, rank)
    if len(e):
        e = e[np.lexsort((e[:, 1], e[:, 0]))]
        e = e[np.r_[True, (e[1:] != e[:-1]).any(axis=1)]]
    lo, hi = doc_starts[rank], doc_starts[rank + 1]
    starts = np.array(doc_starts)
    write_ranges(_folder(staging, "join"), rank, e[:, 1], starts, **{"": e})
    q = range_of(e[:, 1], starts)
    qa = np.unique(np.column_stack([q, e[:, 0]]), axis=0) if len(e) else np.zeros((0, 2), np.int64)
    sig = signature_range(staging, offsets, lo, hi)
    write_ranges(_folder(staging, "join-sig"), rank, starts[qa[:, 0]], starts,
                 **{"": qa[:, 1].copy(), ".sig": sig[qa[:, 1] - lo] if len(qa) else sig[:0]})
    _result(staging, "pairs", rank, {"candidates": int(len(e)), "shipped": int(len(qa))})


def verify_task(rank: int, world_size: int, staging: str, offsets: list[int], k: int,
                doc_starts: list[int]) -> None:
    """Range `rank`: the signatures sent with its candidates against its own; each
    candidate's matching positions, sent back to the range of its first document."""
    e = read_partition(_folder(staging, "join"), world_size, rank)
    folder = _folder(staging, "join-sig")
    firsts = read_partition(folder, world_size, rank, "", np.zeros(0, np.int64))  # sorted
    sig_a = read_partition(folder, world_size, rank, ".sig", np.zeros((0, k), np.uint32))
    lo, hi = doc_starts[rank], doc_starts[rank + 1]
    sig = signature_range(staging, offsets, lo, hi)
    m = ((sig_a[np.searchsorted(firsts, e[:, 0])] == sig[e[:, 1] - lo]).sum(axis=1)
         if len(e) else np.zeros(0, np.int64))
    rows = np.column_stack([e, m]).astype(np.int64)
    write_ranges(_folder(staging, "verified"), rank, e[:, 0], np.array(doc_starts),
                 **{"": rows})
    _result(staging, "verify", rank, {"compared": int(len(e))})


def candidates_task(rank: int, world_size: int, staging: str, doc_starts: list[int],
                    k: int, threshold: float, cluster_parts: int, kept: str | None) -> None:
    """Range `rank`: its verified candidates (a, b, matches) in the driver's order (from
    the verify tasks, or the slice of a kept file); their count, rejections and
    similarity histogram; the accepted ones, both ways, as the first cluster round's
    edges."""
    lo, hi = doc_starts[rank], doc_starts[rank + 1]
    if kept:
        mm = np.load(kept, mmap_mode="r")
        first = mm[:, 0]
        a, b = np.searchsorted(first, [lo, hi])
        rows = np.array(mm[a:b], np.int64)
        count(read=(b - a) * mm.itemsize * 3)
    else:
        rows = read_partition(_folder(staging, "verified"), world_size, rank, "",
                              np.zeros((0, 3), np.int64))
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    save_npy(_folder(staging, "cand") / f"{rank:05d}.npy", rows)
    count(written=rows.nbytes)
    sims = rows[:, 2] / k
    ok = minhash.accepted(sims, threshold)
    write_partitioned(_folder(staging, "components") / "r0", rank,
                      components.both_ways(rows[ok, :2]), cluster_parts)
    hist = np.histogram(np.clip(sims, 0, 1), SIM_BINS)[0]   # zeros when there are none
    _result(staging, "candidates", rank, {
        "candidates": int(len(rows)), "rejected": int((~ok).sum()),
        "max_doc": int(rows[:, :2].max()) if len(rows) else -1,
        "histogram": [int(x) for x in hist]})


def npy_chunks(path: Path, rows: int = 1 << 20):
    """The rows of a .npy file, `rows` at a time, read (not mapped: a map's pages would
    stay in this process's memory until it is dropped)."""
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if major == 1
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(f)
        width = int(np.prod(shape[1:], dtype=np.int64))
        for at in range(0, shape[0], rows):
            n = min(rows, shape[0] - at)
            yield np.fromfile(f, dtype, n * width).reshape((n, *shape[1:]))


def concatenate(dest: Path, dtype, shape: tuple, files) -> None:
    """The arrays in `files`, end to end, as one .npy of `shape` (its first axis their
    rows): np.save's bytes, written a chunk at a time, in bounded memory."""
    if shape[0] == 0:
        save_npy(dest, np.zeros(shape, dtype))
        return
    tmp = dest.with_name(dest.name + ".tmp.npy")
    start = mapped_npy(tmp, dtype, shape).offset   # the header, and the blocks reserved
    with open(tmp, "r+b") as out:
        out.seek(start)
        for f in files:
            for chunk in npy_chunks(f):
                out.write(np.ascontiguousarray(chunk, dtype).tobytes())
    tmp.replace(dest)


def concatenate_candidates(staging: Path, parts: int, results: list[dict], dest: Path) -> None:
    """The ranges' candidate files, end to end, as one (candidates, 3) array: int32 when
    every document index fits, as the driver's mode writes it."""
    total = sum(r["candidates"] for r in results)
    small = max((r["max_doc"] for r in results), default=-1) < 2**31
    concatenate(dest, np.int32 if small else np.int64, (total, 3),
                (staging / WORK / "cand" / f"{p:05d}.npy" for p in range(parts)))


# --------------------------------------------------------------------------------------
# The driver's side: phases launched, counts summed, nothing held per document
# --------------------------------------------------------------------------------------

class Found:
    """What the candidates phase tells the driver: counts, the similarity histogram, and
    where the first cluster round's edges are."""

    def __init__(self, band_pairs: int, results: list[dict], ranges_: int, cluster_parts: int):
        self.band_pairs = band_pairs
        self.results = results
        self.candidates = sum(r["candidates"] for r in results)
        self.rejected = sum(r["rejected"] for r in results)
        self.histogram = ([sum(col) for col in zip(*(r["histogram"] for r in results))]
                          if self.candidates else [])   # as similarity_histogram gives it
        self.ranges = ranges_
        self.cluster_parts = cluster_parts


def candidates_in_tasks(run, kept: tuple[str | None, int]) -> Found:
    """3.5 as phases of tasks: buckets by band and hash range, the candidates verified in a
    stream join, ranges of documents of about --task-mb (the signatures of a range and as
    many again shipped with its candidates). kept: (path, band collisions) of kept
    candidates for these signatures (whose digest the driver checked), or (None, 0)."""
    a, n, staging = run.args, run.total_docs, str(run.staging)
    offsets = [int(x) for x in run.offsets]
    n_ranges = min(max(n, 1), parts_for(2 * 4 * a.num_perm * n, a.task_mb))
    starts = [int(x) for x in ranges(n, n_ranges)]
    kept_path, band_pairs = kept
    if kept_path is None:
        run_phase(run, "band-order", band_order_task, staging=staging)
        hash_ranges = parts_for(16 * n, a.task_mb)
        tasks = a.bands * hash_ranges
        band_pairs = sum(r["pairs"] for r in run_phase(
            run, "buckets", bucket_range_task, tasks, ("border",), ("buckets",), staging=staging,
            offsets=offsets, hash_ranges=hash_ranges, doc_starts=starts))
        unique = sum(r["candidates"] for r in run_phase(
            run, "pairs", pairs_task, n_ranges, ("buckets",), ("join", "join-sig"),
            staging=staging, offsets=offsets, writers=tasks, doc_starts=starts))
        run_phase(run, "verify", verify_task, n_ranges, ("join", "join-sig"), ("verified",),
                  staging=staging, offsets=offsets, k=a.num_perm, doc_starts=starts)
    else:
        unique = int(np.load(kept_path, mmap_mode="r").shape[0])
    cluster_parts = parts_for(32 * unique, a.task_mb)
    results = run_phase(run, "candidates", candidates_task, n_ranges, ("verified",),
                        ("components/r0",), staging=staging, doc_starts=starts, k=a.num_perm,
                        threshold=a.threshold, cluster_parts=cluster_parts, kept=kept_path)
    return Found(band_pairs, results, n_ranges, cluster_parts)


def component_task(rank: int, world_size: int, staging: str, src: str, dst: str,
                   writers: int, step: str, offsets: list[int] | None = None) -> None:
    """Task `rank` of one step of a round: its partition of the edges, whether it is a
    star already, and the step's new edges written to the partitions that read them next
    (step "roots": roots_of_partition)."""
    folder = _folder(staging, "components")
    edges = read_partition(folder / src, writers, rank)
    if step == "roots":
        roots_of_partition(staging, rank, folder / dst, edges, offsets)
        return
    star = components.is_star_partition(edges)
    out = components.large_star(edges) if step == "large" else components.small_star(edges)
    write_partitioned(folder / dst, rank, out, world_size)
    _result(staging, f"components-{dst}", rank, {"star": star, "edges": int(len(out))})


def cluster_in_tasks(run, found: Found) -> list[dict]:
    """3.6's clusters from rounds of tasks over the accepted candidates the candidates
    phase wrote, until every partition is a star; then each cluster whole, in the
    partition of its smallest index (roots_of_partition). Returns the roots tasks' counts."""
    parts, staging = found.cluster_parts, str(run.staging)
    src, writers, r = "r0", found.ranges, 0
    while True:
        large = f"r{r}large"
        if all(x["star"] for x in run_phase(run, f"components-{large}", component_task, parts,
                                            (f"components/{src}",), (f"components/{large}",),
                                            staging=staging, src=src, dst=large,
                                            writers=writers, step="large")):
            break   # large-star leaves a star as it is: its output is the answer
        r += 1
        run_phase(run, f"components-r{r}", component_task, parts, (f"components/{large}",),
                  (f"components/r{r}",), staging=staging, src=large, dst=f"r{r}",
                  writers=parts, step="small")
        src, writers = f"r{r}", parts
    return run_phase(run, "components-roots", component_task, parts, (f"components/{large}",),
                     ("components/roots", "components/asks"), staging=staging,
                     src=large, dst="roots", writers=parts, step="roots",
                     offsets=[int(x) for x in run.offsets])


def roots_of_partition(staging: str, rank: int, dst: Path, edges: np.ndarray,
                       offsets: list[int]) -> None:
    """The clusters whose centre (smallest index) is in this partition, whole: each
    leaf with its centre and the cluster's size, sent to the unit of the leaf; each
    centre, once, sent to its own unit (which answers with its id and signature:
    kept_side_task), and beside it, kept here, the units each centre's leaves are in
    (kept_join_task); and for the report, the number of clusters, their sizes and the
    largest ones' first members."""
    centre, leaf = components.star_edges(edges)
    first = np.flatnonzero(np.r_[True, centre[1:] != centre[:-1]]) if len(centre) else \
        np.zeros(0, np.int64)
    centres = centre[first]
    sizes = np.diff(np.r_[first, len(centre)]) + 1
    starts = np.array(offsets)
    write_ranges(dst, rank, leaf, starts,
                 **{"": np.column_stack([leaf, centre, np.repeat(sizes, sizes - 1)])})
    write_ranges(dst.with_name("asks"), rank, centres, starts,
                 **{"": np.column_stack([centres, np.full(len(centres), rank)])})
    units = np.unique(np.column_stack([centre, range_of(leaf, starts)]), axis=0) if len(
        centre) else np.zeros((0, 2), np.int64)
    save_npy(dst.with_name("units") / f"{rank:05d}.npy", units)
    count(written=units.nbytes)
    top = np.lexsort((centres, -sizes))[:TOP_CLUSTERS]
    size_values, counts = np.unique(sizes, return_counts=True)
    _result(staging, "components-roots", rank, {
        "clusters": int(len(centres)), "removed": int(len(leaf)),
        "sizes": {str(int(a)): int(b) for a, b in zip(size_values, counts)},
        "largest": [[int(centres[i]), int(sizes[i]),
                     [int(centres[i]), *leaf[first[i]:first[i] + min(2, sizes[i] - 1)].tolist()]]
                    for i in top]})


TOP_CLUSTERS = 5   # the report shows the five largest (pipeline.minhash_report)


def merged_roots(results: list[dict]) -> tuple[int, int, dict, list]:
    """The roots tasks' counts as one: (clusters, removed, {size: clusters} in order of
    size, the largest clusters as (kept index, size, first members), ties by index)."""
    sizes: dict[int, int] = {}
    for r in results:
        for k, v in r["sizes"].items():
            sizes[int(k)] = sizes.get(int(k), 0) + v
    largest = sorted((x for r in results for x in r["largest"]), key=lambda x: (-x[1], x[0]))
    return (sum(r["clusters"] for r in results), sum(r["removed"] for r in results),
            {str(k): sizes[k] for k in sorted(sizes)}, largest[:TOP_CLUSTERS])


# --------------------------------------------------------------------------------------
# Each removed document to its unit: the kept one's id and signature joined on the way
# --------------------------------------------------------------------------------------

def kept_side_task(rank: int, world_size: int, staging: str, units: list[dict],
                   offsets: list[int], writers: int) -> None:
    """Unit `rank`, for the clusters kept at one of its documents: the kept document's id
    and signature, once, sent to the partition holding its cluster (at most the unit's
    rows, however many units the cluster spans)."""
    asks = read_partition(_folder(staging, "components") / "asks", writers, rank)
    us = [Unit(**u) for u in units]
    kept_ids = fetch_column(us, np.array(offsets), asks[:, 0], "id")
    sig = np.load(_folder(staging, "sig") / f"{rank:05d}.npy", mmap_mode="r")
    count(read=len(asks) * sig.shape[1] * 4)
    write_ranges(_folder(staging, "kept-side"), rank, asks[:, 1], np.arange(writers + 1),
                 table=pa.table({"kept_id": kept_ids}),
                 **{"": asks[:, 0].copy(), ".sig": np.array(sig[asks[:, 0] - offsets[rank]])})
    _result(staging, "kept-side", rank, {"rows": int(len(asks))})


def kept_join_task(rank: int, world_size: int, staging: str, offsets: list[int],
                   units: int, k: int) -> None:
    """Partition `rank` of the clusters: each kept document's id and signature (from
    kept_side_task), once for each unit that holds removed members of its cluster, sent
    to that unit (at most the partition's removed documents: the cluster is whole here)."""
    folder = _folder(staging, "kept-side")
    centres = read_partition(folder, units, rank, "", np.zeros(0, np.int64))   # sorted
    sig = read_partition(folder, units, rank, ".sig", np.zeros((0, k), np.uint32))
    ids = read_table_partition(folder, units, rank)
    asks = np.load(_folder(staging, "components") / "units" / f"{rank:05d}.npy")
    count(read=asks.nbytes)
    at = np.searchsorted(centres, asks[:, 0])
    starts = np.array(offsets)
    write_ranges(_folder(staging, "kept-join"), rank, starts[asks[:, 1]], starts,
                 table=ids.take(from_numpy(at, pa.int64())) if ids is not None else None,
                 **{"": asks[:, 0].copy(), ".sig": sig[at]})
    _result(staging, "kept-join", rank, {"rows": int(len(asks))})


def removed_rows_task(rank: int, world_size: int, staging: str, units: list[dict],
                      offsets: list[int], k: int, writers: int) -> None:
    """Unit `rank`'s removed documents, sorted: the rows the filter drops, and their rows
    of report/removed.parquet (ids, similarity to the kept one, where both are)."""
    rec = read_partition(_folder(staging, "components") / "roots", writers, rank, "",
                         np.zeros((0, 3), np.int64))
    rec = rec[np.argsort(rec[:, 0], kind="stable")]
    folder = _folder(staging, "kept-join")
    centres = read_partition(folder, writers, rank, "", np.zeros(0, np.int64))
    sig_c = read_partition(folder, writers, rank, ".sig", np.zeros((0, k), np.uint32))
    kept_ids = read_table_partition(folder, writers, rank)
    by_centre = np.argsort(centres)        # each partition's rows are sorted, not all
    at = by_centre[np.searchsorted(centres, rec[:, 1], sorter=by_centre)] if len(rec) else \
        np.zeros(0, np.int64)
    sig = np.load(_folder(staging, "sig") / f"{rank:05d}.npy", mmap_mode="r")
    matches = (np.array(sig[rec[:, 0] - offsets[rank]]) == sig_c[at]).sum(axis=1)
    us = [Unit(**u) for u in units]
    ids = fetch_column(us, np.array(offsets), rec[:, 0], "id")
    kid = (kept_ids.column("kept_id").take(from_numpy(at, pa.int64()))
           if kept_ids is not None else ids.slice(0, 0))
    table = removed_table(us, np.array(offsets), rec[:, 0], rec[:, 1], ids, kid, matches / k,
                          rec[:, 2])
    save_arrow(_folder(staging, "removed-rows") / f"{rank:05d}.arrow", table)
    save_npy(_folder(staging, "removed-rows") / f"{rank:05d}.npy", rec[:, 0].copy())
    count(read=len(rec) * k * 4, written=table.nbytes + 8 * len(rec))
    _result(staging, "removed-rows", rank, {"removed": int(len(rec))})


def removed_in_tasks(run, roots_tasks: int) -> int:
    """The removed documents, unit by unit (kept-side, kept-join, then removed-rows), and
    _work/removed.npy, their global rows end to end (for the kept store; the filter tasks
    read their unit's file in _work/removed-rows/)."""
    staging, offsets = str(run.staging), [int(x) for x in run.offsets]
    run_phase(run, "kept-side", kept_side_task, None, ("components/asks",), ("kept-side",),
              staging=staging, units=run.unit_dicts(), offsets=offsets, writers=roots_tasks)
    run_phase(run, "kept-join", kept_join_task, roots_tasks, ("kept-side", "components/units"),
              ("kept-join",), staging=staging, offsets=offsets, units=len(run.units),
              k=run.args.num_perm)
    total = sum(r["removed"] for r in run_phase(
        run, "removed-rows", removed_rows_task, None, ("components", "kept-join"),
        staging=staging, units=run.unit_dicts(), offsets=offsets, k=run.args.num_perm,
        writers=roots_tasks))
    folder = run.staging / WORK / "removed-rows"
    concatenate(run.staging / WORK / "removed.npy", np.int64, (total,),
                (folder / f"{u:05d}.npy" for u in range(len(run.units))))
    return total


def report_rows_from_tasks(run, sigs, shown: Shown, sizes: dict) -> dict:
    """minhash_report.report_rows from what the tasks left: report/removed.parquet
    streamed unit by unit (the bytes of one write: pipeline.shards.ShardWriter), the first
    removed documents from its head."""
    rep = run.staging / "report"
    rep.mkdir(exist_ok=True)
    writer, head = None, []
    for u in range(len(run.units)):
        part = load_arrow(run.staging / WORK / "removed-rows" / f"{u:05d}.arrow")
        writer = writer or ShardWriter(rep / "removed.parquet", part.schema)
        writer.write(part)
        if sum(t.num_rows for t in head) < EXAMPLES:
            head.append(part.slice(0, EXAMPLES))
    if writer is not None:
        writer.close()
    first = pa.concat_tables(head).slice(0, EXAMPLES) if head else None
    return shown_entries(sigs, shown, first, run.staging, sizes)
