"""dedup_minhash.py's kept measurements: the signatures, band hashes and candidate pairs a
run keeps beside its output (signatures/, bands/, candidates/, removed/), so that a rerun
with another --threshold measures nothing, and one with another b x r and the same k
redoes only the buckets and the verification.

Each store is pipeline.kept_store's (files, an index, digests), keyed by what it depends
on: the signatures by the input's fingerprint, --ngram, --num-perm and --seed
(signature_deps); the band hashes also by --bands and --rows (band_deps); the candidates
also by how a bucket is read (candidate_deps); the removed rows also by --threshold.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import numpy as np

from algorithms import minhash
from pipeline import kept_store
from pipeline.kept_store import keep_whole, load_whole, read_verified, side_store, write_index
from pipeline.kept_store import entry as kept_entry
from pipeline.shards import link_or_copy
from pipeline.units import Unit, locate
from pipeline.work_files import save_npy

KIND = "signatures"   # the side store a sweep leaves: data/.dedup.signatures/


def signature_deps(run) -> dict:
    """Everything a signature depends on: a change to any of these invalidates the kept ones."""
    a = run.args
    return {"version": minhash.SIGNATURE_VERSION, "input_fingerprint": run.input_fingerprint,
            "ngram": a.ngram, "num_perm": a.num_perm, "seed": a.seed}


def band_deps(run) -> dict:
    return {**signature_deps(run), "bands": run.args.bands, "rows": run.args.rows}


def candidate_deps(run) -> dict:
    """What the candidates and their match counts depend on: the signatures and band
    hashes, and how a bucket is read."""
    return {**band_deps(run), "all_pairs_max": minhash.ALL_PAIRS_MAX}


def kept_sources(run) -> tuple[dict, list[str]]:
    """For every unit, the kept signature and band files that cover it (the output's own,
    then a sweep's side store); whole files only (the same cut into units): they carry
    the unit's counts. The output's indexes are used only as its manifest recorded them:
    the counts they keep are covered by no file's digest."""
    return kept_store.sources(run.output, KIND, {"signatures": (signature_deps(run), True),
                                              "bands": (band_deps(run), True)}, run.units,
                              index_digests={n: kept_store.recorded_index_digest(
                                  run.output, "kept", n) for n in ("signatures", "bands")})


def save_or_link(arr: np.ndarray, pieces: list[dict], dst: Path) -> None:
    """Write a reused array into the staging folder; a whole kept file is hard-linked."""
    if len(pieces) == 1 and pieces[0]["whole"]:
        link_or_copy(pieces[0]["path"], dst)
    else:
        save_npy(dst, arr)


def keep_store(work: Path, dest: Path, results: list[dict], run, band_pairs: int) -> dict:
    """Move the signature and band files, and the candidate pairs, into `dest` as three
    kept stores; return what the manifest records (dependencies, files, bytes on disk)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, d, key, deps in (("signatures", "sig", "sig", signature_deps(run)),
                               ("bands", "band", "band", band_deps(run))):
        target = dest / name
        shutil.rmtree(target, ignore_errors=True)
        os.replace(work / d, target)
        out[name] = write_index(target, deps, [r[key] for r in results])
    target = dest / "candidates"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    os.replace(work / "candidates.npy", target / "pairs.npy")
    out["candidates"] = keep_whole(target, candidate_deps(run), "pairs.npy",
                                   band_pairs=int(band_pairs))
    out["bytes"] = sum(out[n]["bytes"] for n in ("signatures", "bands", "candidates"))
    return out


def removed_deps(run) -> dict:
    """What the removed rows depend on: the candidates, and the threshold."""
    return {**candidate_deps(run), "threshold": run.args.threshold}


def keep_removed(work: Path, dest: Path, run) -> dict:
    """Keep the rows this run removed (sorted global rows of its input) beside the band
    hashes: with both, verify.py has the band hashes of every document of this output
    instead of computing them again (pipeline.kept_bands)."""
    target = dest / "removed"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    os.replace(work / "removed.npy", target / "removed.npy")
    return keep_whole(target, removed_deps(run), "removed.npy")


def link_kept(units: list[Unit], sig_src: list, band_src: list, work: Path) -> list[dict] | None:
    """When every unit's signatures and band hashes are kept (whole files), check their
    digests and hard-link them into _work/: the signature phase's results, made in this
    process in milliseconds per unit. None if any file fails its check (the phase then
    runs its tasks, which recompute what failed)."""
    if not (all(sig_src) and all(band_src)):
        return None
    for d in ("sig", "band"):
        (work / d).mkdir(parents=True, exist_ok=True)
    results = []
    for rank, u in enumerate(units):
        linked = {}
        for key, sources in (("sig", sig_src[rank]), ("band", band_src[rank])):
            pieces = sources[0]
            if len(pieces) != 1 or not pieces[0]["whole"] or read_verified(pieces[0]) is None:
                return None
            dst = work / key / f"{rank:05d}.npy"
            link_or_copy(pieces[0]["path"], dst)
            linked[key] = kept_entry(dst, u.shard, u.row_start, u.rows, record=pieces[0],
                                     **pieces[0]["extra"])
        extra = linked["sig"]
        results.append({"docs": u.rows, "bytes": extra["bytes"], "short": extra["short"],
                        "signatures_reused": True, "bands_reused": True, "notes": [],
                        **linked})
    return results


def kept_candidates(output: Path, deps: dict) -> tuple[np.ndarray | None, int, list[str]]:
    """Candidates kept by an earlier run (the output's, then a sweep's side store) for
    exactly these band hashes and signatures: (rows of [doc a, doc b, matching positions],
    band collisions, notes); (None, 0, notes) if none."""
    def whole(folder: Path, recorded):
        data, extra, why = load_whole(folder, deps, recorded)
        if data is None:
            return None, extra, why
        kept = np.load(io.BytesIO(data))
        return (kept, kept), extra, why

    return _kept_candidates(output, whole)


def kept_candidate_file(output: Path, deps: dict) -> tuple[str | None, int, list[str]]:
    """kept_candidates for --cluster tasks: where the kept file is (its digest checked in
    chunks, never held whole), for the candidates tasks to read a slice each; (path, band
    collisions, notes), or (None, 0, notes)."""
    def located(folder: Path, recorded):
        piece, extra, why = kept_store.whole_piece(folder, deps, recorded)
        if piece is None:
            return None, extra, why
        if not kept_store.checks_out(piece):
            return None, extra, f"{Path(piece['path']).name}: digest mismatch"
        return (np.load(piece["path"], mmap_mode="r"), piece["path"]), extra, why

    return _kept_candidates(output, located)


def _kept_candidates(output: Path, take) -> tuple:
    """The output's kept candidates, then a sweep's side store's: take(folder, recorded
    index digest) gives ((array, what to return), extra, why not)."""
    notes = []
    recorded = kept_store.recorded_index_digest(output, "kept", "candidates")
    for where in (output, side_store(output, KIND)):
        got, extra, why = take(where / "candidates", recorded if where == output else None)
        if got is not None:
            arr, value = got
            if arr.ndim == 2 and arr.shape[1] == 3 and "band_pairs" in extra:
                notes.append(f"candidates and their similarities reused from "
                             f"{where / 'candidates'}: buckets and verification skipped")
                return value, int(extra["band_pairs"]), notes
            why = "not a candidate list"
        if why != "none kept":
            notes.append(f"kept candidates in {where / 'candidates'} not used: {why}")
    return None, 0, notes


def keep_candidates(work: Path, pairs: np.ndarray, matches: np.ndarray) -> None:
    """Leave the verified candidates in _work/candidates.npy, for keep_store."""
    small = len(pairs) == 0 or int(pairs.max()) < 2**31   # 12 bytes a candidate, not 24
    save_npy(work / "candidates.npy",
             np.column_stack([pairs, matches]).astype(np.int32 if small else np.int64))


class Signatures:
    """Random access to the per-unit signature files by global document index."""

    def __init__(self, folder: Path, tasks: int, offsets: np.ndarray):
        self.mm = [np.load(folder / f"{s:05d}.npy", mmap_mode="r") for s in range(tasks)]
        self.offsets = offsets

    def get(self, gidx: np.ndarray) -> np.ndarray:
        gidx = np.asarray(gidx, dtype=np.int64)
        k = self.mm[0].shape[1] if self.mm else 0
        out = np.empty((len(gidx), k), dtype=np.uint32)
        unit, row = locate(self.offsets, gidx)
        for s in np.unique(unit):
            sel = unit == s
            out[sel] = self.mm[s][row[sel]]
        return out

