"""Exact deduplication (tutorial section 3.2): two documents are the same when their
normalised texts are; the first occurrence of each is kept.

`exact_dedup` below is the tutorial's code (3.2), run by the stage's reference engine,
with one change: the digest is xxh3-128, not sha256 (16 bytes is as safe from accidental
collisions at a few billion documents, about 1e-20, and it is ten times faster).

The fast engine, for scale, keeps the same documents:
- a digest is kept as two uint64 integers, never as hex;
- the set of seen digests becomes a sort (`first_occurrences`): the digests of every
  document, with their positions in corpus order, are sorted stably, and in each run of
  equal digests everything after the first is a duplicate. That needs at most 32 bytes
  per document (25.6 measured, docs/benchmarks.md) instead of the tutorial's set of
  sha256 digests (about 100 by its 3.2, "1 GB for 10 million"; 145-149 measured), and
  when even that is too much, the digests are hash-partitioned into files on disk and
  each partition is done alone (`select_first`): equal digests always land in the same
  partition.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import xxhash

BYTES_PER_DOC = 32          # hi + lo + global index (24) + sort permutation (8)


def normalise(text: str | None) -> str:
    """Collapse every whitespace run to one space and lowercase (section 3.2)."""
    return " ".join((text or "").split()).lower()


def digest(text: str | None) -> bytes:
    """The 16-byte (128-bit) digest of a document's normalised text (3.2: sha256)."""
    return xxhash.xxh3_128_digest(normalise(text).encode("utf-8"))


def exact_dedup(docs: Iterable[str | None], skipped: list | None = None) -> Iterator[str | None]:
    """Section 3.2's exact_dedup: the documents whose normalised text was not seen before,
    in order. The stage's reference engine runs it over the whole corpus.

    skipped: if given, (position of each document skipped, position of the first copy,
    which was kept) is appended to it, for the report; so the digests seen are kept with
    the position of their first copy (a dict, where the tutorial keeps a set). A null
    document is an empty one."""
    seen: dict[bytes, int] = {}
    for i, doc in enumerate(docs):
        norm = " ".join((doc or "").split()).lower()   # normalise first: one more space
        h = xxhash.xxh3_128_digest(norm.encode("utf-8"))   # is the same page (3.2: sha256)
        if h in seen:
            if skipped is not None:
                skipped.append((i, seen[h]))
            continue
        seen[h] = i
        yield doc


# --------------------------------------------------------------------------------------
# The same at scale: digests as integers, first occurrences by sorting.
# --------------------------------------------------------------------------------------

def digests_to_array(digests: list[bytes]) -> np.ndarray:
    """16-byte digests -> an (n, 2) uint64 array (hi, lo): two integers, never hex."""
    if not digests:
        return np.zeros((0, 2), dtype=np.uint64)
    return np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64).reshape(-1, 2)


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
    sorted by duplicate index, from the per-unit digest files (n x 2 uint64 each).
    Returns (dup, kept, partitions)."""
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


def largest_groups(kept: np.ndarray, n: int = 5) -> list[tuple[int, int]]:
    """(kept global index, copies including the kept one) of the n largest groups of equal
    documents, biggest first, ties in corpus order."""
    if len(kept) == 0:
        return []
    first, counts = np.unique(kept, return_counts=True)
    order = np.lexsort((first, -counts))[:n]
    return [(int(first[i]), int(counts[i]) + 1) for i in order]
