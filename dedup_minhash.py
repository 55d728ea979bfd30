"""Step 3b (tutorial sections 3.4 to 3.6): remove near-duplicates with MinHash and LSH.

    python dedup_minhash.py                      # data/dedup_exact -> data/dedup
    python dedup_minhash.py --threshold 0.85 --workers 8
    python dedup_minhash.py --bands 16 --rows 8 --num-perm 128 --ngram 5

What it does, in the tutorial's words:
  3.4  Each document becomes the set of its 5-character shingles (on the same normalised
       text as dedup_exact.py), compressed to a signature of k=128 minimum hash values.
       Two signatures agree in a position with probability equal to the Jaccard
       similarity of the two shingle sets.
  3.5  LSH: the signature is cut into b=16 bands of r=8 rows; two documents that agree
       on a whole band land in the same bucket and become a candidate pair, with
       probability P = 1 - (1 - s^r)^b. Only candidates are compared: a candidate is a
       duplicate only if its signatures agree in at least --threshold (0.8) of all 128
       positions. Short character shingles without this check let through about 5%
       false pairs; the rejected candidates are counted and reported.
  3.6  Duplicates are joined into connected components (union-find): A~B and B~C puts
       A, B and C in one cluster even when A and C differ more. Each cluster keeps
       exactly one document, the first in corpus order (smallest shard, then row), so
       the result depends neither on --workers nor on how documents were split into tasks.

Phases (parallel ones run through the datatrove executor, tasks fixed by the data: units
of at most --task-mb MB of text, see pipeline/units.py):
  1. signatures  one task per unit -> _work/sig/XXXXX.npy (n x k uint32) and the band
                 hashes _work/band/XXXXX.npy (b x n uint64), streamed batch by batch
  2. buckets     one task per band: sort the band hashes (no dict of Python objects);
                 equal neighbours are candidate pairs -> _work/pairs/XXX.npy
  3. verify      driver: unique candidates, similarity over all k values, >= threshold
  4. cluster     driver: union-find over the verified pairs, root = smallest index
  5. filter      one task per unit: copy the kept rows -> part-XXXXX.parquet

Reruns are cheap: the signatures, the band hashes and the candidate pairs are kept in
the output (signatures/, bands/, candidates/, and the rows removed, removed/, which lets
verify.py reuse the band hashes; --no-keep-signatures turns this off), keyed
by what they depend on (the input's fingerprint, --ngram, --num-perm, --seed; the bands
and candidates also --bands and --rows) and checked against their digests before use. The
candidates are kept with the number of signature positions each pair shares, so a rerun
with another --threshold redoes only the clusters and the filter; one with another
b x r and the same k also the buckets and verification. An output file whose rows do
not change is reused as it is. `--sweep threshold=0.7,0.8,0.9`
prints what each threshold would remove, and the pairs that change fate between
neighbouring values, without writing any output.

The algorithm is in algorithms/minhash.py: first in plain Python, line by line beside
sections 3.4 to 3.6, then the same at scale (signatures from numba kernels in
algorithms/minhash_fast.py, cached on disk after the first run; buckets by sorting;
union-find in numpy), tested to give the same numbers. Each of the k hash functions is
h_i(x) = ((a_i * x + b_i) mod 2^64) >> 32 on a 32-bit shingle hash x, once per distinct
shingle of a text. A text shorter than the shingle length is one shingle (the whole
text); a multi-megabyte text is normalised and hashed in pieces, in bounded memory.
Nothing is skipped.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from algorithms import minhash
from pipeline import layout
from pipeline.arrays import from_numpy
from pipeline.errors import StageError, run_stage
from pipeline.filter_phase import Picked, filter_phase
from pipeline.work_files import WORK, mapped_npy, save_npy
from pipeline import kept_store
from pipeline.kept_store import (keep_whole, load_array, load_whole, read_verified, side_store,
                                 write_index)
from pipeline.kept_store import entry as kept_entry
from pipeline.progress import task_progress
from pipeline.shards import link_or_copy, write_table
from pipeline.stage import Output, Run, Stage, unit_bytes_on_disk
from pipeline.sweep import SweepRun, carry_sweep_reports, parse_sweep
from pipeline.tables import human_bytes, markdown_table, pct, save_report, snippet, table
from pipeline.task_results import save_task_result
from pipeline.units import Unit, describe, fetch_rows, locate, read_unit, shard_rows_of

BATCH_ROWS = 2048
KIND = "signatures"   # the side store a sweep leaves: data/.dedup.signatures/


# --------------------------------------------------------------------------------------
# 3.4: the signature of every document, and (3.5) its band hashes, one task per unit.
# --------------------------------------------------------------------------------------

def signature_task(rank: int, world_size: int, units: list[dict], staging: str,
                   num_perm: int, ngram: int, seed: int, bands: int, band_rows: int,
                   sig_sources: list, band_sources: list) -> None:
    """Task `rank`: the signatures (_work/sig/RANK.npy, rows x k) and band hashes
    (_work/band/RANK.npy, b x rows) of unit `rank`; kept ones are reused when their
    digests check out, and then the unit's text is not read at all."""
    unit = Unit(**units[rank])
    work = Path(staging) / WORK
    for d in ("sig", "band"):
        (work / d).mkdir(parents=True, exist_ok=True)
    sig_path, band_path = work / "sig" / f"{rank:05d}.npy", work / "band" / f"{rank:05d}.npy"
    sig, pieces, notes = load_array(sig_sources[rank], unit.rows)
    if sig is not None:  # whole kept files only: they carry the unit's byte counts
        _save_or_link(sig, pieces, sig_path)
        nbytes = sum(p["extra"]["bytes"] for p in pieces)
        short = sum(p["extra"]["short"] for p in pieces)
        task_progress().add(unit.rows, nbytes)
    else:
        nbytes, short = compute_signatures(unit, minhash.MinHasher(num_perm, ngram, seed),
                                           sig_path)
        sig = np.load(sig_path, mmap_mode="r")
    band, bpieces, bnotes = load_array(band_sources[rank], unit.rows, axis=1)
    if band is not None:
        _save_or_link(band, bpieces, band_path)
    else:
        save_npy(band_path, minhash.band_hashes(np.asarray(sig), bands, band_rows))
    save_task_result(staging, "signatures", rank, {
        "docs": unit.rows, "bytes": nbytes, "short": short,
        "signatures_reused": bool(pieces), "bands_reused": bool(bpieces),
        "notes": notes + bnotes,
        "sig": kept_entry(sig_path, unit.shard, unit.row_start, unit.rows, bytes=nbytes,
                          short=short),
        "band": kept_entry(band_path, unit.shard, unit.row_start, unit.rows)})


def compute_signatures(unit: Unit, mh: minhash.MinHasher, sig_path: Path) -> tuple[int, int]:
    """Sign every document of a unit into sig_path (rows x k uint32), batch by batch.
    Returns (text bytes, texts shorter than one shingle)."""
    tmp = sig_path.with_name(sig_path.name.replace(".npy", ".tmp.npy"))
    sig = mapped_npy(tmp, np.uint32, (unit.rows, mh.k))   # ENOSPC here, not SIGBUS later
    start = nbytes = short = 0
    prog = task_progress()
    for batch in read_unit(unit, columns=["text"], batch_rows=BATCH_ROWS):
        texts = batch.column(0)
        s, lens = mh.signatures_of_column(texts)
        sig[start:start + len(texts)] = s
        start += len(texts)
        b = int(pc.sum(pc.binary_length(texts)).as_py() or 0)
        nbytes += b
        short += int((lens < mh.n).sum())
        prog.add(len(texts), b)
    if start != unit.rows:
        raise StageError(f"{unit.shard}: read {start} rows of a unit, footer says {unit.rows}")
    sig.flush()
    del sig
    tmp.replace(sig_path)
    return nbytes, short


# --------------------------------------------------------------------------------------
# 3.5: one band's buckets, grouped by sorting: equal neighbours are candidate pairs.
# --------------------------------------------------------------------------------------

def bucket_task(rank: int, world_size: int, units: int, staging: str) -> None:
    work = Path(staging) / WORK
    h = np.concatenate([np.load(work / "band" / f"{s:05d}.npy", mmap_mode="r")[rank]
                        for s in range(units)])
    pairs = minhash.bucket_pairs(h)
    save_npy(work / "pairs" / f"{rank:03d}.npy", pairs)
    save_task_result(staging, "buckets", rank, {"pairs": int(len(pairs))})


# --------------------------------------------------------------------------------------
# The stage: the steps in the tutorial's order, then the report.
# --------------------------------------------------------------------------------------

def run(run: Run) -> Output:
    args, out = run.args, run.output
    stores, src_notes = kept_sources(run)
    for line in src_notes:
        print(line, file=sys.stderr)
    work = run.staging / WORK

    sig_results = signature_phase(run, stores)                        # 3.4
    pairs, band_pairs, matches = candidates(run, candidate_deps(run))  # 3.5
    with run.phase("verify"):                                          # 3.5: compare
        sigs = Signatures(work / "sig", len(run.units), run.offsets)
        sims, ok, matches = minhash.verify(pairs, sigs, args.threshold, args.num_perm, matches)
        keep_candidates(work, pairs, matches)
    with run.phase("cluster"):                                         # 3.6: union-find
        root, removed, kept_of = minhash.clusters(run.total_docs, pairs, ok)
        removed_sims = (minhash.similarity(sigs.get(removed), sigs.get(kept_of))
                        if len(removed) else np.zeros(0))
        save_npy(work / "removed.npy", removed)

    to_show = shown_rows(root, removed)
    records = filter_phase(run, "removed.npy", pick=report_picks(to_show, removed, kept_of))
    counts = {
        "docs_in": run.total_docs, "docs_out": sum(r["rows"] for r in records),
        "bytes_in": sum(r["bytes"] for r in sig_results),
        "bytes_out": sum(r["text_bytes"] for r in records),
        "removed": {"near_duplicate": int(len(removed))},
        "band_pairs": int(band_pairs), "candidates": int(len(pairs)),
        "candidates_rejected": int((~ok).sum()), "clusters": int(len(np.unique(kept_of))),
        "short_texts": sum(r["short"] for r in sig_results),
    }
    cfg = run.staged.config
    with run.phase("report"):
        shown = report_rows(run.units, run.offsets, sigs, root, removed, kept_of, removed_sims,
                            to_show, run.staging)
        text = build_report(shown, sims, counts, run.staging, cfg)
    del sigs
    kept = {"tasks_reused": sum(r["signatures_reused"] for r in sig_results),
            "tasks": len(run.units), "notes": [n for r in sig_results for n in r["notes"]]}
    run.forget_tasks()   # the work files move or go below
    if not args.no_keep_signatures:
        kept.update(keep_store(work, run.staging, sig_results, run, band_pairs))
        kept["removed"] = keep_removed(work, run.staging, run)
        kept["bytes"] += kept["removed"]["bytes"]
    kept["output_files_reused"] = sum(bool(r.get("reused")) for r in records)
    shutil.rmtree(work, ignore_errors=True)
    carry_sweep_reports(out, run.staging)
    return Output(records, counts, extra={"kept": kept}, summary=[
        text, *(f"note: {line}" for line in kept["notes"][:5]), kept_line(kept, run.total_docs),
        f"wrote {out}/ ({len(records)} shards), {out}/report/ and {out}/manifest.json"])


def after_commit(run: Run) -> None:
    shutil.rmtree(side_store(run.output, KIND), ignore_errors=True)  # merged into the output's


# --------------------------------------------------------------------------------------
# Kept measurements: the signatures, band hashes and candidates a run keeps beside its
# output (signatures/, bands/, candidates/), so a rerun with another threshold measures
# nothing (pipeline.kept_store).
# --------------------------------------------------------------------------------------

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
    the unit's counts."""
    return kept_store.sources(run.output, KIND, {"signatures": (signature_deps(run), True),
                                              "bands": (band_deps(run), True)}, run.units)


def _save_or_link(arr: np.ndarray, pieces: list[dict], dst: Path) -> None:
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


def signature_phase(run, stores: dict) -> list[dict]:
    """3.4's phase. When everything is kept, the driver only checks digests and links
    files; otherwise one task per unit."""
    sig_src, band_src = stores["signatures"], stores["bands"]
    with run.phase("signatures"):
        got = link_kept(run.units, sig_src, band_src, run.staging / WORK)
    if got is not None:
        return got
    a = run.args
    run.parallel("signatures", signature_task, inline=all(sig_src) and all(band_src),
                 units=run.unit_dicts(), staging=str(run.staging), num_perm=a.num_perm,
                 ngram=a.ngram, seed=a.seed, bands=a.bands, band_rows=a.rows,
                 sig_sources=sig_src, band_sources=band_src)
    return run.results("signatures")


def kept_candidates(output: Path, deps: dict) -> tuple[np.ndarray | None, int, list[str]]:
    """Candidates kept by an earlier run (the output's, then a sweep's side store) for
    exactly these band hashes and signatures: (rows of [doc a, doc b, matching positions],
    band collisions, notes); (None, 0, notes) if none."""
    notes = []
    for where in (output, side_store(output, KIND)):
        data, extra, why = load_whole(where / "candidates", deps)
        if data is not None:
            kept = np.load(io.BytesIO(data))
            if kept.ndim == 2 and kept.shape[1] == 3 and "band_pairs" in extra:
                notes.append(f"candidates and their similarities reused from "
                             f"{where / 'candidates'}: buckets and verification skipped")
                return kept, int(extra["band_pairs"]), notes
            why = "not a candidate list"
        if why != "none kept":
            notes.append(f"kept candidates in {where / 'candidates'} not used: {why}")
    return None, 0, notes


def keep_candidates(work: Path, pairs: np.ndarray, matches: np.ndarray) -> None:
    """Leave the verified candidates in _work/candidates.npy, for keep_store."""
    small = len(pairs) == 0 or int(pairs.max()) < 2**31   # 12 bytes a candidate, not 24
    save_npy(work / "candidates.npy",
             np.column_stack([pairs, matches]).astype(np.int32 if small else np.int64))


def candidates(run, deps: dict) -> tuple[np.ndarray, int, np.ndarray | None]:
    """3.5's phase and the unique candidate pairs: (pairs, band collisions, their kept
    match counts or None). Candidates and their similarities depend only on the signatures
    and band hashes, so those kept for the same ones are reused: no buckets, no
    verification."""
    work = run.staging / WORK
    kept, band_pairs, notes = kept_candidates(run.output, deps)
    for line in notes:
        print(line, file=sys.stderr)
    if kept is not None:
        kept = kept.astype(np.int64)
        return np.ascontiguousarray(kept[:, :2]), band_pairs, kept[:, 2].copy()
    # sorting b arrays of 8 bytes per document: far less than a second per million
    # documents, so a worker pool would cost more than the work below a few million
    run.parallel("buckets", bucket_task, tasks=run.args.bands, sized=False,
                 units=len(run.units), staging=str(run.staging),
                 inline=run.total_docs < 4_000_000)
    band_pairs = sum(r["pairs"] for r in run.results("buckets", run.args.bands))
    pairs = minhash.unique_pairs([np.load(work / "pairs" / f"{j:03d}.npy")
                                  for j in range(run.args.bands)], run.total_docs)
    return pairs, band_pairs, None


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


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------

SIM_BINS = np.round(np.linspace(0.0, 1.0, 51), 4)   # verified-similarity histogram, 0.02 wide
CLUSTER_EXAMPLE_CHARS = 2000                         # text kept per member of an example cluster
EXAMPLES = 5                                         # removed documents shown


class Shown(NamedTuple):
    """What the report shows whole: the largest clusters (kept index, size), three
    members of each (the kept one first), and the rows to read: those members, then the
    first removed documents."""
    clusters: list[tuple[int, int]]
    members: list[np.ndarray]
    rows: np.ndarray


def shown_rows(root: np.ndarray, removed: np.ndarray) -> Shown:
    clusters_ = minhash.largest_clusters(root)
    members_of = [np.nonzero(root == k)[0][:3] for k, _ in clusters_]
    rows = np.concatenate([*members_of, removed[:EXAMPLES]]).astype(np.int64)
    return Shown(clusters_, members_of, rows)


def report_picks(shown: Shown, removed, kept_of) -> dict[str, np.ndarray]:
    """The global rows whose id and text the report shows, picked by the filter tasks
    (dedup_exact.filter_phase), which read every row anyway."""
    return {"id": np.concatenate([removed, kept_of, shown.rows]), "text": shown.rows}


def report_rows(units, offsets, sigs, root, removed, kept_of, sims, shown: Shown,
                staging: Path) -> dict:
    """What the report shows from the input: report/removed.parquet (every removed
    document, its cluster's kept one and their similarity) and the ids and texts of the
    largest clusters and of a few removed documents (report_picks)."""
    rep = staging / "report"
    rep.mkdir(exist_ok=True)
    ex_n = min(EXAMPLES, len(removed))
    id_of = Picked(staging, "id")
    ids, kept_ids = id_of.at(removed), id_of.at(kept_of)
    shown_ids = id_of.at(shown.rows).to_pylist()
    shown_text = Picked(staging, "text").at(shown.rows).to_pylist()
    size = np.bincount(root, minlength=len(root))
    s, r = shard_rows_of(units, offsets, removed)
    ks, kr = shard_rows_of(units, offsets, kept_of)
    write_table(rep / "removed.parquet", pa.table({
        "id": ids, "kept_id": kept_ids, "similarity": from_numpy(sims, pa.float64()),
        "shard": s, "row": from_numpy(r, pa.int64()),
        "kept_shard": ks, "kept_row": from_numpy(kr, pa.int64()),
        "cluster_size": from_numpy(size[kept_of], pa.int64())}))

    lines, md_clusters, js_clusters = [], [], []
    at = 0
    for rank, ((k, sz), members) in enumerate(zip(shown.clusters, shown.members), 1):
        texts = shown_text[at:at + len(members)]
        mids = shown_ids[at:at + len(members)]
        at += len(members)
        msims = minhash.similarity(sigs.get(members), sigs.get([k] * len(members)))
        lines.append(f"cluster {rank}: {sz} documents, kept {mids[0]}")
        entry = {"kept_id": mids[0], "size": sz, "members": []}
        for i, (mid, t, sm) in enumerate(zip(mids, texts, msims)):
            tag = "kept   " if i == 0 else f"sim {sm:.2f}"
            lines.append(f"  {tag} {mid}: {snippet(t, 90)}")
            entry["members"].append({"id": mid, "similarity": round(float(sm), 4),
                                     "text": (t or "")[:CLUSTER_EXAMPLE_CHARS]})
        js_clusters.append(entry)
        md_clusters.append([mids[0], sz, snippet(texts[0], 100)])
    ex_text = shown_text[at:]
    examples = [{"id": ids[i].as_py(), "kept_id": kept_ids[i].as_py(),
                 "similarity": round(float(sims[i]), 4),
                 "text": snippet(ex_text[i])} for i in range(ex_n)]
    return {"lines": lines, "md_clusters": md_clusters, "js_clusters": js_clusters,
            "examples": examples, "cluster_sizes": minhash.cluster_size_counts(kept_of)}


def build_report(shown: dict, cand_sims, counts, staging: Path, config: dict) -> str:
    """The stage's tables (text, report/dedup_minhash_stats.{json,md}) from the counts and
    report_rows()' examples."""
    rep = staging / "report"
    lines, md_clusters, js_clusters = shown["lines"], shown["md_clusters"], shown["js_clusters"]
    examples = shown["examples"]
    c = counts
    rows = [["documents", c["docs_in"], c["docs_out"], pct(c["docs_out"], c["docs_in"])],
            ["bytes", human_bytes(c["bytes_in"]), human_bytes(c["bytes_out"]),
             pct(c["bytes_out"], c["bytes_in"])]]
    head = ["dedup_minhash", "before", "after", "kept"]
    # every pair of a bucket up to 64 documents, a star and a chain past it (not every
    # collision then), summed over the bands, repeats included
    lsh = [["bucket pairs, all bands", c["band_pairs"]],
           ["candidate pairs (unique)", c["candidates"]],
           [f"rejected: similarity < {config['threshold']}", c["candidates_rejected"]],
           ["verified duplicate pairs", c["candidates"] - c["candidates_rejected"]],
           ["clusters (2+ documents)", c["clusters"]],
           ["removed: near_duplicate", c["removed"]["near_duplicate"]],
           [f"texts shorter than {config['ngram']} chars (one shingle)", c["short_texts"]]]
    text = table(head, rows) + "\n\n" + table(["LSH " + f"b={config['bands']} r={config['rows']}", "count"], lsh)
    if lines:
        text += "\n\nlargest clusters:\n" + "\n".join(lines)
    md = "# dedup_minhash\n\n" + markdown_table(head, rows) + "\n\n" + markdown_table(["LSH", "count"], lsh)
    if md_clusters:
        md += "\n\n## Largest clusters\n\n" + markdown_table(["kept id", "documents", "text"], md_clusters)
    if examples:
        md += "\n\n## Removed examples\n\n" + markdown_table(
            ["removed id", "kept id", "similarity", "text"],
            [[e["id"], e["kept_id"], f"{e['similarity']:.3f}", e["text"]] for e in examples])
    hist = np.histogram(np.clip(cand_sims, 0, 1), SIM_BINS)[0].tolist() if len(cand_sims) else []
    save_report(rep, "dedup_minhash_stats", {
        **c, "config": config, "largest_clusters": js_clusters, "examples": examples,
        "cluster_sizes": shown["cluster_sizes"],
        "candidate_similarity": {"bins": SIM_BINS.tolist(), "counts": hist,
                                 "threshold": config["threshold"]}}, md)
    return text


def kept_line(kept: dict, n_docs: int) -> str:
    reuse = (f"signatures reused for {kept['tasks_reused']} of {kept['tasks']} tasks; "
             f"{kept.get('output_files_reused', 0)} output files reused unchanged")
    if "bytes" not in kept:
        return reuse + "; signatures not kept (--no-keep-signatures)"
    per_doc = kept["bytes"] / n_docs if n_docs else 0
    return (f"{reuse}; kept signatures and band hashes: {human_bytes(kept['bytes'])} "
            f"({per_doc:.0f} bytes per document) in signatures/, bands/, candidates/ and "
            f"removed/")


# --------------------------------------------------------------------------------------
# Sweeps: removals, clusters and rejections at several thresholds, from one set of
# candidates and their similarities; nothing written but a report.
# --------------------------------------------------------------------------------------

def sweep_run(run: Run) -> int:
    """--sweep: candidates and their similarities once, then every threshold on them.
    The output, its manifest and the stages below are untouched; signatures it had to
    compute are kept in a hidden store beside the output for the next run."""
    args = run.args
    _, thresholds = parse_sweep(args.sweep, {"threshold": float}, check=_threshold_value)
    sw = SweepRun(run, KIND)
    stores, notes = kept_sources(run)
    print(f"sweep: thresholds {', '.join(f'{t:g}' for t in thresholds)} on "
          f"{describe(run.units)}", file=sys.stderr)
    for line in notes:
        print(line, file=sys.stderr)
    sig_results = signature_phase(sw, stores)
    pairs, band_pairs, matches = candidates(sw, candidate_deps(run))
    sims, _, matches = minhash.verify(pairs, Signatures(sw.staging / WORK / "sig",
                                                         len(run.units), run.offsets),
                                      1.0, args.num_perm, matches)
    keep_candidates(sw.staging / WORK, pairs, matches)
    text, data = sweep(run.total_docs, pairs, sims, thresholds, run.units, run.offsets)
    md = data.pop("markdown")
    data["seconds"] = sw.seconds
    data["signatures_reused"] = sum(r["signatures_reused"] for r in sig_results)
    data["config"] = {"ngram": args.ngram, "num_perm": args.num_perm, "bands": args.bands,
                      "rows": args.rows, "seed": args.seed}
    data["depends_on"] = band_deps(run)   # the input fingerprint and every setting it used
    measured = data["signatures_reused"] < len(run.units)
    if measured:
        keep_store(sw.staging / WORK, sw.kept, sig_results, run, band_pairs)
    wrote = sw.finish(data, md, keep_measured=measured)
    print(text)
    print(f"signatures reused for {data['signatures_reused']} of {len(run.units)} tasks; "
          f"{data['seconds']:.1f} s")
    print(wrote)
    return 0


def _threshold_value(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError("must be in (0, 1]")


def sweep(n_docs: int, pairs: np.ndarray, sims: np.ndarray, thresholds: list[float],
          units, offsets, examples: int = 5) -> tuple[str, dict]:
    """Per threshold: removed documents, clusters, candidates rejected; for neighbouring
    thresholds, the pairs accepted by the lower and rejected by the higher one."""
    rows, data = [], {"docs_in": n_docs, "candidates": int(len(pairs)), "thresholds": [],
                      "changes": []}
    for t in thresholds:
        ok = minhash.accepted(sims, t)
        _, removed, kept_of = minhash.clusters(n_docs, pairs, ok)
        d = {"threshold": t, "removed": int(len(removed)),
             "clusters": int(len(np.unique(kept_of))), "rejected": int((~ok).sum())}
        data["thresholds"].append(d)
        rows.append([f"{t:g}", d["removed"], pct(d["removed"], n_docs), d["clusters"], d["rejected"]])
    lines = [f"sweep threshold ({n_docs:,} documents, {len(pairs):,} candidate pairs)",
             table(["threshold", "removed", "share", "clusters", "rejected"], rows), ""]
    for a, b in zip(thresholds, thresholds[1:]):
        between = np.flatnonzero(minhash.accepted(sims, a) & ~minhash.accepted(sims, b))
        order = between[np.argsort(-sims[between], kind="stable")][:examples]
        da = next(x for x in data["thresholds"] if x["threshold"] == a)
        db = next(x for x in data["thresholds"] if x["threshold"] == b)
        change = {"from": a, "to": b, "pairs": int(len(between)),
                  "documents": da["removed"] - db["removed"], "examples": []}
        lines.append(f"threshold {a:g} -> {b:g}: {change['documents']:,} documents change fate; "
                     f"{len(between):,} pairs merged at {a:g} but not at {b:g}")
        if len(order):
            ia, ib = pairs[order, 0], pairs[order, 1]
            ta, tb = fetch_rows(units, offsets, ia, "text"), fetch_rows(units, offsets, ib, "text")
            ida, idb = fetch_rows(units, offsets, ia, "id"), fetch_rows(units, offsets, ib, "id")
            for k in range(len(order)):
                e = {"id": ida[k], "other_id": idb[k], "similarity": round(float(sims[order[k]]), 4),
                     "text": snippet(ta[k], 300), "other_text": snippet(tb[k], 300)}
                change["examples"].append(e)
                lines.append(f"  sim {e['similarity']:.3f}: {e['id']} {snippet(ta[k], 60)!r}")
                lines.append(f"             {e['other_id']} {snippet(tb[k], 60)!r}")
        data["changes"].append(change)
        lines.append("")
    md = ["# dedup_minhash.py --sweep", "", markdown_table(
        ["threshold", "removed", "clusters", "rejected"],
        [[f"{d['threshold']:g}", d["removed"], d["clusters"], d["rejected"]]
         for d in data["thresholds"]]), ""]
    for ch in data["changes"]:
        md += [f"## threshold {ch['from']:g} -> {ch['to']:g}: {ch['documents']:,} documents "
               f"change fate ({ch['pairs']:,} pairs)", ""]
        if ch["examples"]:
            md += [markdown_table(["similarity", "id", "text", "other id", "other text"],
                                  [[f"{e['similarity']:.3f}", e["id"], snippet(e["text"], 120),
                                    e["other_id"], snippet(e["other_text"], 120)]
                                   for e in ch["examples"]]), ""]
    return "\n".join(lines).rstrip(), {**data, "markdown": "\n".join(md)}


# --------------------------------------------------------------------------------------

MAX_NUM_PERM = 4096


def flags(p, argv) -> None:
    p.add_argument("--ngram", type=int, default=5, help="shingle length in characters (default 5)")
    p.add_argument("--num-perm", type=int, default=128, help="k, hash functions (default 128)")
    p.add_argument("--bands", type=int, default=16, help="b, LSH bands (default 16)")
    p.add_argument("--rows", type=int, default=8, help="r, rows per band (default 8); b*r must be k")
    p.add_argument("--threshold", type=float, default=0.8,
                   help="a candidate pair is a duplicate if its signatures agree on at least "
                        "this fraction of the k values (default 0.8)")
    p.add_argument("--seed", type=int, default=1, help="seed of the hash functions (default 1)")
    p.add_argument("--sweep", default=None, metavar="threshold=V1,V2,...",
                   help="print removed documents, clusters and rejected candidates at each "
                        "threshold, and the pairs that change fate between neighbours; writes "
                        "no output, only report/sweep.{json,md}")
    p.add_argument("--no-keep-signatures", action="store_true",
                   help="do not keep signatures and band hashes in the output (a rerun with "
                        "another --threshold then recomputes them)")


def check(args) -> None:
    if args.ngram < 1:
        raise StageError(f"--ngram {args.ngram}: must be at least 1")
    for flag, v in (("--num-perm", args.num_perm), ("--bands", args.bands), ("--rows", args.rows)):
        if v < 1:
            raise StageError(f"{flag} {v}: must be positive")
    if args.seed < 0:
        raise StageError(f"--seed {args.seed}: must be >= 0")
    if args.num_perm > MAX_NUM_PERM:   # each task holds a batch's signatures: rows x k x 4 B
        raise StageError(f"--num-perm {args.num_perm}: at most {MAX_NUM_PERM:,} (every "
                         f"document keeps 4 bytes a hash; the tutorial uses 128)")
    if args.bands * args.rows != args.num_perm:
        raise StageError(f"--bands {args.bands} x --rows {args.rows} = {args.bands * args.rows}, "
                         f"but --num-perm is {args.num_perm}: LSH needs b*r == k")
    if not 0.0 < args.threshold <= 1.0:
        raise StageError(f"--threshold {args.threshold}: must be in (0, 1]")


def config(run: Run) -> dict:
    a = run.args
    return {"normalise": "collapse whitespace, lowercase", "ngram": a.ngram,
            "num_perm": a.num_perm, "bands": a.bands, "rows": a.rows,
            "threshold": a.threshold, "seed": a.seed,
            "hash": "fnv1a+fmix64 shingle, (a*x+b)>>32 uint32", "verify": "signature",
            "task_mb": a.task_mb, "keep_signatures": not a.no_keep_signatures}


def space(run: Run) -> int:
    """At most a copy of the input, plus the signatures (4 bytes per hash) and band hashes
    (8 bytes per band) of every document, kept beside the output."""
    a = run.args
    return unit_bytes_on_disk(run.units) + run.total_docs * (4 * a.num_perm + 8 * a.bands + 16)


STAGE = Stage("dedup_minhash", __doc__, run, flags=flags, check=check, config=config,
              space=space, sweep=sweep_run, after_commit=after_commit, reads=layout.DEDUP_EXACT,
              compiled=lambda a: kept_store.nothing_kept(a.output, KIND, ("signatures", "bands")))


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
