"""dedup_minhash.py past one machine (--cluster tasks): 3.5's buckets, the verification
of every candidate and 3.6's connected components as phases of tasks on the executor,
each task holding about --task-mb, never something that grows with the corpus.

After the signatures (one task per unit, as in the driver's mode):

  band-order   one task per unit: each band's hashes sorted, with their rows
  buckets      one task per (band, range of hash values): that slice of every unit's
               sorted hashes, grouped as minhash.bucket_pairs groups a whole band (a
               bucket is one hash value, so it never spans two tasks); the pairs (a < b)
               go to the range of documents a falls in
  pairs        one task per range of documents: its candidates from every band, each
               once, each with the signature of a, sent to the range of b
  verify       one task per range of documents: those signatures against its own;
               (a, b, matching positions) sent back to the range of a
  candidates   one task per range of documents: its candidates sorted (the driver's
               order), counted and binned for the report; the accepted ones are the
               first round's edges
  components   the rounds of algorithms/components.py, then each leaf and its root

A signature is read twice (for the ranges of a and of b) and shipped once per candidate,
in a stream: no task reads a signature at random. The driver only reads each task's
counts, and copies the candidate files end to end into the kept store (same bytes as the
driver's mode); a rerun with another --threshold runs only the candidates phase, on
slices of that kept file.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from algorithms import components, minhash
from pipeline.component_files import read_partition, write_partitioned, write_ranges
from pipeline.minhash_report import SIM_BINS
from pipeline.task_results import save_task_result
from pipeline.work_files import WORK, mapped_npy, save_npy

HASH_SPACE = 1 << 64


def _folder(staging: str, name: str) -> Path:
    return Path(staging) / WORK / name


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
    save_task_result(staging, "band-order", rank, {"docs": int(h.shape[1])})


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
            hs.append(np.asarray(sh[a:b]))
            rows = np.load(src / f"{u:05d}.rows.npy", mmap_mode="r")[band, a:b]
            docs.append(rows.astype(np.int64) + offsets[u])
    h, d = np.concatenate(hs), np.concatenate(docs)
    order = np.argsort(h, kind="stable")           # units in order: ties stay in corpus order
    h, d = h[order], d[order]
    pairs = d[minhash.bucket_pairs(h)]
    write_ranges(_folder(staging, "buckets"), rank, pairs[:, 0], np.array(doc_starts),
                 **{"": pairs})
    save_task_result(staging, "buckets", rank, {"pairs": int(len(pairs)), "hashes": int(len(h))})


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
            out.append(np.asarray(s[a - offsets[u]:b - offsets[u]]))
    return np.concatenate(out) if out else np.zeros((0, 0), np.uint32)


def pairs_task(rank: int, world_size: int, staging: str, offsets: list[int], writers: int,
               doc_starts: list[int]) -> None:
    """Range `rank`: its candidates from every bucket task, each once, sorted; each sent
    with the signature of its first document to the range of its second."""
    e = read_partition(_folder(staging, "buckets"), writers, rank)
    if len(e):
        e = e[np.lexsort((e[:, 1], e[:, 0]))]
        e = e[np.r_[True, (e[1:] != e[:-1]).any(axis=1)]]
    lo, hi = doc_starts[rank], doc_starts[rank + 1]
    sig = signature_range(staging, offsets, lo, hi)
    write_ranges(_folder(staging, "join"), rank, e[:, 1], np.array(doc_starts),
                 **{"": e, ".sig": sig[e[:, 0] - lo] if len(e) else sig[:0]})
    save_task_result(staging, "pairs", rank, {"candidates": int(len(e))})


def verify_task(rank: int, world_size: int, staging: str, offsets: list[int], k: int,
                doc_starts: list[int]) -> None:
    """Range `rank`: the signatures sent with its candidates against its own; each
    candidate's matching positions, sent back to the range of its first document."""
    folder = _folder(staging, "join")
    e = read_partition(folder, world_size, rank)
    sig_a = read_partition(folder, world_size, rank, ".sig", np.zeros((0, k), np.uint32))
    lo, hi = doc_starts[rank], doc_starts[rank + 1]
    sig = signature_range(staging, offsets, lo, hi)
    m = (sig_a == sig[e[:, 1] - lo]).sum(axis=1) if len(e) else np.zeros(0, np.int64)
    rows = np.column_stack([e, m]).astype(np.int64)
    write_ranges(_folder(staging, "verified"), rank, e[:, 0], np.array(doc_starts),
                 **{"": rows})
    save_task_result(staging, "verify", rank, {"compared": int(len(e))})


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
        rows = np.asarray(mm[a:b], np.int64)
    else:
        rows = read_partition(_folder(staging, "verified"), world_size, rank, "",
                              np.zeros((0, 3), np.int64))
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    save_npy(_folder(staging, "cand") / f"{rank:05d}.npy", rows)
    sims = rows[:, 2] / k
    ok = minhash.accepted(sims, threshold)
    write_partitioned(_folder(staging, "components") / "r0", rank,
                      components.both_ways(rows[ok, :2]), cluster_parts)
    hist = np.histogram(np.clip(sims, 0, 1), SIM_BINS)[0]   # zeros when there are none
    save_task_result(staging, "candidates", rank, {
        "candidates": int(len(rows)), "rejected": int((~ok).sum()),
        "max_doc": int(rows[:, :2].max()) if len(rows) else -1,
        "histogram": [int(x) for x in hist]})


def concatenate_candidates(staging: Path, parts: int, results: list[dict], dest: Path) -> None:
    """The ranges' candidate files, end to end, as one (candidates, 3) array: int32 when
    every document index fits, as the driver's mode writes it."""
    total = sum(r["candidates"] for r in results)
    small = max((r["max_doc"] for r in results), default=-1) < 2**31
    dtype = np.int32 if small else np.int64
    if total == 0:
        save_npy(dest, np.zeros((0, 3), dtype))
        return
    tmp = dest.with_name(dest.name + ".tmp.npy")
    out = mapped_npy(tmp, dtype, (total, 3))
    at = 0
    for p in range(parts):
        rows = np.load(staging / WORK / "cand" / f"{p:05d}.npy", mmap_mode="r")
        out[at:at + len(rows)] = rows
        at += len(rows)
    out.flush()
    del out
    tmp.replace(dest)


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
        run.parallel("band-order", band_order_task, sized=False, staging=staging)
        hash_ranges = parts_for(16 * n, a.task_mb)
        tasks = a.bands * hash_ranges
        run.parallel("buckets", bucket_range_task, tasks=tasks, sized=False, staging=staging,
                     offsets=offsets, hash_ranges=hash_ranges, doc_starts=starts)
        band_pairs = sum(r["pairs"] for r in run.results("buckets", tasks))
        run.parallel("pairs", pairs_task, tasks=n_ranges, sized=False, staging=staging,
                     offsets=offsets, writers=tasks, doc_starts=starts)
        unique = sum(r["candidates"] for r in run.results("pairs", n_ranges))
        run.parallel("verify", verify_task, tasks=n_ranges, sized=False, staging=staging,
                     offsets=offsets, k=a.num_perm, doc_starts=starts)
    else:
        unique = int(np.load(kept_path, mmap_mode="r").shape[0])
    cluster_parts = parts_for(32 * unique, a.task_mb)
    run.parallel("candidates", candidates_task, tasks=n_ranges, sized=False, staging=staging,
                 doc_starts=starts, k=a.num_perm, threshold=a.threshold,
                 cluster_parts=cluster_parts, kept=kept_path)
    return Found(band_pairs, run.results("candidates", n_ranges), n_ranges, cluster_parts)


def component_task(rank: int, world_size: int, staging: str, src: str, dst: str,
                   writers: int, step: str, offsets: list[int] | None = None) -> None:
    """Task `rank` of one step of a round: its partition of the edges, whether it is a
    star already, and the step's new edges written to the partitions that read them next
    (step "roots": each leaf and its centre, the cluster's smallest index, sent to the
    unit the leaf is in)."""
    folder = _folder(staging, "components")
    edges = read_partition(folder / src, writers, rank)
    if step == "roots":
        leaf, centre = components.roots(edges)
        write_ranges(folder / dst, rank, leaf, np.array(offsets),
                     **{"": np.column_stack([leaf, centre])})
        save_task_result(staging, f"components-{dst}", rank, {"leaves": int(len(leaf))})
        return
    star = components.is_star_partition(edges)
    out = components.large_star(edges) if step == "large" else components.small_star(edges)
    write_partitioned(folder / dst, rank, out, world_size)
    save_task_result(staging, f"components-{dst}", rank, {"star": star, "edges": int(len(out))})


def cluster_in_tasks(run, found: Found) -> tuple[np.ndarray, np.ndarray]:
    """minhash.clusters' removed documents (sorted) and the document each was merged into,
    from rounds of tasks over the accepted candidates the candidates phase wrote, until
    every partition is a star; read unit by unit (no array of every document)."""
    folder = run.staging / WORK / "components"
    parts, staging = found.cluster_parts, str(run.staging)
    src, writers, r = "r0", found.ranges, 0
    while True:
        large = f"r{r}large"
        run.parallel(f"components-{large}", component_task, tasks=parts, sized=False,
                     staging=staging, src=src, dst=large, writers=writers, step="large")
        if all(x["star"] for x in run.results(f"components-{large}", parts)):
            break   # large-star leaves a star as it is: its output is the answer
        r += 1
        run.parallel(f"components-r{r}", component_task, tasks=parts, sized=False,
                     staging=staging, src=large, dst=f"r{r}", writers=parts, step="small")
        src, writers = f"r{r}", parts
    run.parallel("components-roots", component_task, tasks=parts, sized=False,
                 staging=staging, src=large, dst="roots", writers=parts, step="roots",
                 offsets=[int(x) for x in run.offsets])
    out = [np.zeros((0, 2), np.int64)]
    for u in range(len(run.units)):
        lc = read_partition(folder / "roots", parts, u)
        out.append(lc[np.argsort(lc[:, 0], kind="stable")])
    lc = np.concatenate(out)
    return lc[:, 0].copy(), lc[:, 1].copy()
