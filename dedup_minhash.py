"""Step 3b (tutorial sections 3.4 to 3.6): remove near-duplicates with MinHash and LSH.

    python dedup_minhash.py                      # data/dedup_exact -> data/dedup
    python dedup_minhash.py --threshold 0.85
    python dedup_minhash.py --sweep threshold=0.7,0.8,0.9   # what each would remove
    python dedup_minhash.py --engine reference   # shingles, signature, find, as 3.4-3.6

  3.4  Each document becomes the set of its 5-character shingles (of the text normalised
       as dedup_exact.py does), compressed to a signature of k=128 minimum hash values.
  3.5  LSH: the signature is cut into b=16 bands of r=8 rows; two documents that agree on
       a whole band become a candidate pair. A candidate is a duplicate only if its
       signatures agree in at least --threshold (0.8) of the 128 positions; the rejected
       candidates are counted and reported.
  3.6  Duplicates are joined into connected components (union-find); each cluster keeps
       its first document in corpus order, so the result depends neither on --workers
       nor on how documents were split into tasks.

Phases: signatures (one task per unit, with the band hashes), buckets (one task per
band), verify and cluster (in this process), filter (one task per unit). With --cluster
tasks (auto from 50 million documents) the buckets, the verification and the clusters
are phases of tasks too, none holding more than about --task-mb (pipeline/minhash_tasks.py),
for the same bytes. The signatures, band hashes and candidates with their agreement are
kept beside the output, so a rerun with another --threshold redoes only the clusters and
the filter, and a sweep measures nothing again. More: docs/stages/dedup.md.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import shutil
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pyarrow.compute as pc

from algorithms import minhash
from algorithms.exact_dedup import normalise
from pipeline import kept_store, layout
from pipeline.errors import StageError, run_stage
from pipeline.filter_phase import filter_phase
from pipeline.kept_store import entry as kept_entry
from pipeline.kept_store import load_array, side_store
from pipeline.minhash_kept import (KIND, Signatures, band_deps, candidate_deps, keep_candidates,
                                   keep_removed, keep_store, kept_candidate_file,
                                   kept_candidates, kept_sources, link_kept, save_or_link)
from pipeline.minhash_report import (EXAMPLES, Shown, build_report, kept_line, report_picks,
                                     report_rows, shown_rows, similarity_histogram, sweep)
from pipeline.minhash_tasks import (candidates_in_tasks, cluster_in_tasks, concatenate_candidates,
                                    merged_roots, removed_in_tasks, report_rows_from_tasks)
from pipeline.progress import task_progress
from pipeline.stage import Output, Run, Stage, unit_bytes_on_disk
from pipeline.sweep import SweepRun, carry_sweep_reports, parse_sweep
from pipeline.task_results import save_task_result
from pipeline.units import Unit, describe, read_unit
from pipeline.work_files import WORK, mapped_npy, save_npy

BATCH_ROWS = 2048


# --------------------------------------------------------------------------------------
# 3.4: the signature of every document, and (3.5) its band hashes, one task per unit.
# --------------------------------------------------------------------------------------

def signature_task(rank: int, world_size: int, units: list[dict], staging: str,
                   num_perm: int, ngram: int, seed: int, bands: int, band_rows: int,
                   sig_sources: list, band_sources: list, engine: str = "fast") -> None:
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
        save_or_link(sig, pieces, sig_path)
        nbytes = sum(p["extra"]["bytes"] for p in pieces)
        short = sum(p["extra"]["short"] for p in pieces)
        task_progress().add(unit.rows, nbytes)
    else:
        nbytes, short = compute_signatures(unit, minhash.MinHasher(num_perm, ngram, seed),
                                           sig_path, reference=engine == "reference")
        sig = np.load(sig_path, mmap_mode="r")
    band, bpieces, bnotes = load_array(band_sources[rank], unit.rows, axis=1)
    if band is not None:
        save_or_link(band, bpieces, band_path)
    elif engine == "reference":   # 3.5's band_hash, band by band, document by document
        rows = np.asarray(sig).tolist()
        save_npy(band_path, np.array([[minhash.band_hash(r, j, band_rows) for r in rows]
                                      for j in range(bands)], np.uint64).reshape(bands, -1))
    else:
        save_npy(band_path, minhash.band_hashes(np.asarray(sig), bands, band_rows))
    save_task_result(staging, "signatures", rank, {
        "docs": unit.rows, "bytes": nbytes, "short": short,
        "signatures_reused": bool(pieces), "bands_reused": bool(bpieces),
        "notes": notes + bnotes,
        "sig": kept_entry(sig_path, unit.shard, unit.row_start, unit.rows, bytes=nbytes,
                          short=short),
        "band": kept_entry(band_path, unit.shard, unit.row_start, unit.rows)})


def compute_signatures(unit: Unit, mh: minhash.MinHasher, sig_path: Path,
                       reference: bool = False) -> tuple[int, int]:
    """Sign every document of a unit into sig_path (rows x k uint32), batch by batch;
    reference: with 3.4's signature(), one document at a time. Returns (text bytes,
    texts shorter than one shingle)."""
    tmp = sig_path.with_name(sig_path.name.replace(".npy", ".tmp.npy"))
    sig = mapped_npy(tmp, np.uint32, (unit.rows, mh.k))   # ENOSPC here, not SIGBUS later
    start = nbytes = short = 0
    prog = task_progress()
    for batch in read_unit(unit, columns=["text"], batch_rows=BATCH_ROWS):
        texts = batch.column(0)
        if reference:
            docs = [t or "" for t in texts.to_pylist()]
            s = np.array([minhash.signature(t, mh.a, mh.b, mh.n) for t in docs],
                         np.uint32).reshape(len(docs), mh.k)
            lens = np.array([len(normalise(t)) for t in docs], np.int64)
        else:
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
    sigs = Signatures(work / "sig", len(run.units), run.offsets)
    mode = cluster_mode(args, run.total_docs)
    # 3.5 (candidates, verified) and 3.6 (clusters): here, or as phases of tasks
    done = in_driver(run, sigs) if mode == "driver" else in_tasks(run, sigs)

    records = filter_phase(run, done.drop, pick=done.picks)
    counts = {
        "docs_in": run.total_docs, "docs_out": sum(r["rows"] for r in records),
        "bytes_in": sum(r["bytes"] for r in sig_results),
        "bytes_out": sum(r["text_bytes"] for r in records),
        "removed": {"near_duplicate": int(done.removed)},
        "band_pairs": int(done.band_pairs), "candidates": int(done.candidates),
        "candidates_rejected": int(done.rejected), "clusters": int(done.clusters),
        "short_texts": sum(r["short"] for r in sig_results),
    }
    cfg = run.staged.config
    with run.phase("report"):
        text = build_report(done.report_rows(), done.histogram, counts, run.staging, cfg)
    del sigs
    kept = {"tasks_reused": sum(r["signatures_reused"] for r in sig_results),
            "tasks": len(run.units), "notes": [n for r in sig_results for n in r["notes"]]}
    run.forget_tasks()   # the work files move or go below
    if not args.no_keep_signatures:
        kept.update(keep_store(work, run.staging, sig_results, run, done.band_pairs))
        kept["removed"] = keep_removed(work, run.staging, run)
        kept["bytes"] += kept["removed"]["bytes"]
    kept["output_files_reused"] = sum(bool(r.get("reused")) for r in records)
    shutil.rmtree(work, ignore_errors=True)
    carry_sweep_reports(out, run.staging)
    return Output(records, counts, extra={"kept": kept, "cluster": mode}, summary=[
        text, *(f"note: {line}" for line in kept["notes"][:5]), kept_line(kept, run.total_docs),
        f"wrote {out}/ ({len(records)} shards), {out}/report/ and {out}/manifest.json"])


class Done(NamedTuple):
    """What 3.5 and 3.6 leave for the filter and the report (_work/removed.npy: the
    removed documents' sorted global rows; drop: where the filter reads them)."""
    band_pairs: int
    candidates: int
    rejected: int
    histogram: list[int]   # of the candidates' similarities (similarity_histogram)
    removed: int
    clusters: int
    picks: dict            # the rows whose id and text the filter tasks keep for the report
    report_rows: Callable[[], dict]
    drop: str              # removed.npy, or a folder of one file a unit (filter_phase)


def in_driver(run: Run, sigs: Signatures) -> Done:
    """3.5 and 3.6 in this process: every candidate pair, verified, joined by union-find."""
    args, work = run.args, run.staging / WORK
    pairs, band_pairs, matches = candidates(run, candidate_deps(run))  # 3.5: buckets
    with run.phase("verify"):                                          # 3.5: compare
        if matches is None and args.engine == "reference":
            matches = reference_matches(pairs, sigs)
        sims, ok, matches = minhash.verify(pairs, sigs, args.threshold, args.num_perm, matches)
        keep_candidates(work, pairs, matches)
    with run.phase("cluster"):                                         # 3.6: union-find
        _, removed, kept_of = (reference_clusters(run.total_docs, pairs[ok])
                               if args.engine == "reference"
                               else minhash.clusters(run.total_docs, pairs, ok))
        save_npy(work / "removed.npy", removed)
    removed_sims = (minhash.match_counts(np.column_stack([removed, kept_of]), sigs)
                    / args.num_perm)   # in chunks: never every removed one's signature
    shown = shown_rows(removed, kept_of)
    return Done(band_pairs, len(pairs), int((~ok).sum()), similarity_histogram(sims),
                len(removed), len(np.unique(kept_of)), report_picks(shown, removed, kept_of),
                lambda: report_rows(run.units, run.offsets, sigs, removed, kept_of,
                                    removed_sims, shown, run.staging), "removed.npy")


def in_tasks(run: Run, sigs: Signatures) -> Done:
    """3.5 and 3.6 as phases of tasks (pipeline/minhash_tasks.py), no task holding more
    than about --task-mb and the driver nothing per document: the same bytes."""
    found = candidates_in_tasks(run, kept_candidate_file_noted(run))
    roots = cluster_in_tasks(run, found)
    clusters, removed, sizes, largest = merged_roots(roots)
    removed_in_tasks(run, len(roots))
    if not run.args.no_keep_signatures:
        concatenate_candidates(run.staging, found.ranges, found.results,
                               run.staging / WORK / "candidates.npy")
    first = np.load(run.staging / WORK / "removed.npy", mmap_mode="r")[:EXAMPLES]
    shown = Shown([(k, size) for k, size, _ in largest],
                  [np.array(m, np.int64) for _, _, m in largest],
                  np.concatenate([np.zeros(0, np.int64), *(m for _, _, m in largest),
                                  first]).astype(np.int64))
    return Done(found.band_pairs, found.candidates, found.rejected, found.histogram, removed,
                clusters, {"id": shown.rows, "text": shown.rows},
                lambda: report_rows_from_tasks(run, sigs, shown, sizes), "removed-rows")


def after_commit(run: Run) -> None:
    shutil.rmtree(side_store(run.output, KIND), ignore_errors=True)  # merged into the output's


# --------------------------------------------------------------------------------------
# The phases of 3.4 and 3.5, reusing what an earlier run kept beside its output
# (signatures/, bands/, candidates/: pipeline.minhash_kept) where they can, so a
# rerun with another threshold measures nothing.
# --------------------------------------------------------------------------------------


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
                 sig_sources=sig_src, band_sources=band_src, engine=a.engine)
    return run.results("signatures")


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
    if run.args.engine == "reference":   # 3.5's buckets, band by band, in this process
        with run.phase("buckets"):
            sigs = [row for s in range(len(run.units))
                    for row in np.load(work / "sig" / f"{s:05d}.npy").tolist()]
            per_band: list[int] = []
            found = minhash.candidate_pairs(sigs, run.args.bands, run.args.rows, per_band)
        return (np.array(sorted(found), np.int64).reshape(-1, 2), sum(per_band), None)
    # sorting b arrays of 8 bytes per document: far less than a second per million
    # documents, so a worker pool would cost more than the work below a few million
    run.parallel("buckets", bucket_task, tasks=run.args.bands, sized=False,
                 units=len(run.units), staging=str(run.staging),
                 inline=run.total_docs < 4_000_000)
    band_pairs = sum(r["pairs"] for r in run.results("buckets", run.args.bands))
    pairs = minhash.unique_pairs([np.load(work / "pairs" / f"{j:03d}.npy")
                                  for j in range(run.args.bands)], run.total_docs)
    return pairs, band_pairs, None


def reference_matches(pairs: np.ndarray, sigs: Signatures) -> np.ndarray:
    """The reference engine's comparison of every candidate (3.5's agreement)."""
    rows = [r.tolist() for r in sigs.get(np.unique(pairs))] if len(pairs) else []
    at = {int(d): i for i, d in enumerate(np.unique(pairs))}
    return np.array([minhash.agreement(rows[at[x]], rows[at[y]]) for x, y in pairs.tolist()],
                    np.int64)


def reference_clusters(n_docs: int, dups: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]:
    """The reference engine's 3.6: union-find with find(), as minhash.clusters answers:
    (root of every document, removed documents, the document each was merged into)."""
    root = np.array(minhash.components(n_docs, dups.tolist()), np.int64)
    removed = np.nonzero(root != np.arange(n_docs))[0]
    return root, removed, root[removed]


# --------------------------------------------------------------------------------------
# 3.5 and 3.6 past one machine (--cluster tasks): buckets by band and hash range, the
# verification as a stream join and the connected components in rounds of tasks
# (pipeline/minhash_tasks.py); the same candidates and roots, so the same bytes.
# --------------------------------------------------------------------------------------

CLUSTER_AUTO_DOCS = 50_000_000   # auto: the union-find in this process below this


def kept_candidate_file_noted(run) -> tuple[str | None, int]:
    """The kept candidates' file for the tasks to read, and its band collisions."""
    path, band_pairs, notes = kept_candidate_file(run.output, candidate_deps(run))
    for line in notes:
        print(line, file=sys.stderr)
    return path, band_pairs


def cluster_mode(args, n_docs: int) -> str:
    """driver or tasks: what --cluster asks, auto by the corpus's size."""
    if args.cluster != "auto":
        return args.cluster
    return "tasks" if n_docs >= CLUSTER_AUTO_DOCS and args.engine == "fast" else "driver"


# --------------------------------------------------------------------------------------
# Sweeps: removals, clusters and rejections at several thresholds, from one set of
# candidates and their similarities; nothing written but a report (its tables:
# pipeline.minhash_report).
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
    sigs = Signatures(sw.staging / WORK / "sig", len(run.units), run.offsets)
    if matches is None and args.engine == "reference":
        matches = reference_matches(pairs, sigs)
    sims, _, matches = minhash.verify(pairs, sigs, 1.0, args.num_perm, matches)
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
    p.add_argument("--cluster", choices=["driver", "tasks", "auto"], default="auto",
                   help="3.6's connected components: union-find in this process (driver), or "
                        "in rounds of tasks on the executor, each holding one partition of the "
                        "pairs (tasks); auto: tasks from 50 million documents. The same bytes "
                        "either way")
    p.add_argument("--no-keep-signatures", action="store_true",
                   help="do not keep signatures and band hashes in the output (a rerun with "
                        "another --threshold then recomputes them)")


def check(args) -> None:
    if args.ngram < 1:
        raise StageError(f"--ngram {args.ngram}: must be at least 1")
    if args.ngram >= 2 ** 64:   # the signature kernels take it as a 64-bit integer
        raise StageError(f"--ngram {args.ngram}: must be at most 2**64-1 (a text shorter "
                         "than a shingle is one shingle)")
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
    if args.engine == "reference" and args.cluster == "tasks":
        raise StageError("--cluster tasks is the fast engine's; --engine reference joins "
                         "clusters with 3.6's find, in this process")
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
              compiled=lambda a: a.engine == "fast" and kept_store.nothing_kept(
                  a.output, KIND, ("signatures", "bands")), engines=True)


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
