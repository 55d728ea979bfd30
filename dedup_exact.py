"""Step 3a (tutorial section 3.2): remove documents that are exactly the same.

    python dedup_exact.py                                  # data/cleaned -> data/dedup_exact
    python dedup_exact.py --memory-budget 4GB              # spill to disk beyond 4 GB
    python dedup_exact.py --engine reference               # 3.2's exact_dedup, as written

Two documents are "the same" when their normalised texts are equal: whitespace runs
collapsed to one space and everything lowercased (3.2: otherwise one extra space makes a
reprinted page look new). Of each group of equal documents the first in corpus order is
kept, so the output does not depend on --workers. The fast engine digests every document
in tasks (xxh3-128, two integers) and finds the first occurrences by sorting the digests
(at most 32 bytes a document, spilled to disk in hash partitions beyond
--memory-budget); --engine reference runs 3.2's exact_dedup, a set of digests, over the
corpus in order. Then a filter phase copies the kept rows. Clean runs before dedup (3.7):
cleaning can turn two different pages into the same text. More: docs/stages/dedup.md.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from algorithms import exact_dedup
from pipeline import layout
from algorithms.arrays import from_numpy
from pipeline.errors import StageError, run_stage
from pipeline.filter_phase import Picked, filter_phase
from pipeline.manifest import MANIFEST, read_manifest
from pipeline.work_files import WORK, save_npy
from pipeline.progress import task_progress
from pipeline.stage import Output, Run, Stage, unit_bytes_on_disk
from pipeline.tables import human_bytes, markdown_table, parse_size, pct, save_report, snippet, table
from pipeline.task_results import save_task_result
from pipeline.shards import write_table
from pipeline.units import read_unit, shard_rows_of


def hash_task(rank: int, world_size: int, units: list[dict], staging: str,
              kernel: bool = True) -> None:
    """Step 1, task `rank`: the digest of every document of unit `rank` (kernel: with the
    compiled kernel; else with exact_dedup.digest, the tutorial's normalisation as written)."""
    if kernel:
        from algorithms import exact_dedup_fast   # numba: only in a run that uses it
    digests: list[bytes] = []
    nbytes = 0
    prog = task_progress()
    for batch in read_unit(units[rank], columns=["text"]):
        if kernel:   # == [exact_dedup.digest(t) for t in texts], in one compiled pass
            digests += exact_dedup_fast.batch_digests(batch.column(0))
        else:
            digests += [exact_dedup.digest(t) for t in batch.column(0).to_pylist()]
        b = int(pc.sum(pc.binary_length(batch.column(0))).as_py() or 0)
        nbytes += b
        prog.add(batch.num_rows, b)
    save_npy(Path(staging) / WORK / "hash" / f"{rank:05d}.npy",
             exact_dedup.digests_to_array(digests))
    save_task_result(staging, "hash", rank, {"docs": len(digests), "bytes": nbytes})


def check_spill_files(total_docs: int, budget: int, flag: str) -> None:
    """The select step keeps 3 spill files open per partition: refuse, before any work, a
    budget that would need more open files than this process may have (ulimit -n)."""
    import math
    import resource

    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    parts = exact_dedup.partitions_needed(total_docs, budget)
    if parts == 1 or limit == resource.RLIM_INFINITY or 3 * parts + 64 <= limit:
        return
    halves = max(1, (limit - 64) // 3 // 2)     # partitions_needed() doubles ceil(need / budget)
    least = math.ceil(total_docs * exact_dedup.BYTES_PER_DOC / halves)
    # rounded up to what human_bytes shows (1,344 B shown as 1.3 KB was refused again)
    scale = 1000 ** max(0, min(4, int(math.log10(max(least, 1)) // 3)))
    step = scale / 10 if scale > 1 else 1
    shown = math.ceil(least / step) * step
    raise StageError(f"--memory-budget {flag}: {parts:,} spill partitions would keep "
                     f"{3 * parts:,} files open, more than this process may ({limit:,}, ulimit "
                     f"-n); raise --memory-budget to at least {human_bytes(shown)}")


def run(run: Run) -> Output:
    """The three steps, then the report."""
    work = run.staging / WORK
    if run.args.engine == "reference":   # 3.2's loop as the tutorial writes it, in this process
        with run.phase("select"):
            dup, kept, bytes_in = reference_select(run)
            partitions = 1
            save_npy(work / "dup.npy", dup)
    else:
        dup, kept, bytes_in, partitions = hash_and_select(run)

    records = filter_phase(run, "dup.npy", pick=report_picks(dup, kept))

    counts = {
        "docs_in": run.total_docs, "docs_out": sum(r["rows"] for r in records),
        "bytes_in": bytes_in,
        "bytes_out": sum(r["text_bytes"] for r in records),
        "removed": {"exact_duplicate": int(len(dup))},
        "dup_groups": int(len(np.unique(kept))),
    }
    with run.phase("report"):
        text = build_report(run, dup, kept, counts, partitions)
    return Output(records, counts, summary=[
        text, f"wrote {run.output}/ ({len(records)} shards), {run.output}/report/ and "
              f"{run.output}/manifest.json"])


def reference_select(run: Run) -> tuple[np.ndarray, np.ndarray, int]:
    """The reference engine: the tutorial's exact_dedup over every text, in corpus order.
    Returns every duplicate's global index, the index of the copy kept for each, and the
    input's text bytes."""
    skipped: list[tuple[int, int]] = []
    nbytes = 0

    def texts():
        nonlocal nbytes
        for u in run.units:
            for b in read_unit(u, columns=["text"]):
                nbytes += int(pc.sum(pc.binary_length(b.column(0))).as_py() or 0)
                yield from b.column(0).to_pylist()

    for _doc in exact_dedup.exact_dedup(texts(), skipped):   # the kept documents, in order
        pass
    pairs = np.array(skipped, np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1], nbytes


def hash_and_select(run: Run) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The fast engine: steps 1 and 2, the digests in tasks, then the first occurrences by
    sorting them (spilled to disk in hash partitions beyond --memory-budget). Returns the
    duplicates, the kept copy of each, the input's text bytes and the partitions."""
    work = run.staging / WORK
    budget = parse_size(run.args.memory_budget, "--memory-budget")
    check_spill_files(run.total_docs, budget, run.args.memory_budget)
    run.parallel("hash", hash_task, units=run.unit_dicts(), staging=str(run.staging),
                 kernel=use_kernel(run.args))
    nbytes = sum(h["bytes"] for h in run.results("hash"))
    with run.phase("select"):
        if (work / "dup.npy").exists() and (work / "kept.npy").exists():   # a resumed run
            dup, kept = np.load(work / "dup.npy"), np.load(work / "kept.npy")
            partitions = int(np.load(work / "partitions.npy"))
        else:
            files = [work / "hash" / f"{i:05d}.npy" for i in range(len(run.units))]
            dup, kept, partitions = exact_dedup.select_first(files, run.offsets, budget,
                                                             work / "spill")
            save_npy(work / "kept.npy", kept)
            save_npy(work / "partitions.npy", np.array(partitions))
            save_npy(work / "dup.npy", dup)  # last: its presence marks the step done
    return dup, kept, nbytes, partitions


# --------------------------------------------------------------------------------------
# The report: counts, the largest groups of equal documents, examples of removed ones.
# --------------------------------------------------------------------------------------

EXAMPLES = 5   # removed documents shown in the report


def report_picks(dup: np.ndarray, kept: np.ndarray) -> dict[str, np.ndarray]:
    """The global rows whose id and text the report shows, picked by the filter tasks."""
    shown = np.array([g for g, _ in exact_dedup.largest_groups(kept)] + list(dup[:EXAMPLES]),
                     np.int64)
    return {"id": np.concatenate([dup, kept, shown]), "text": shown}


def build_report(run: Run, dup, kept, counts, partitions: int) -> str:
    """Save report/removed.parquet and report/dedup_exact_stats.{json,md}; return the text.
    Ids and texts come from the filter tasks (report_picks)."""
    rep = run.staging / "report"
    rep.mkdir(exist_ok=True)
    id_of, text_of = Picked(run.staging, "id"), Picked(run.staging, "text")
    ids, kept_ids = id_of.at(dup), id_of.at(kept)
    s, r = shard_rows_of(run.units, run.offsets, dup)
    write_table(rep / "removed.parquet", pa.table({
        "id": ids, "kept_id": kept_ids, "shard": s, "row": from_numpy(r, pa.int64())}))

    groups = exact_dedup.largest_groups(kept)
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

def flags(p, argv) -> None:
    p.add_argument("--memory-budget", default="2GB",
                   help="driver memory for digests (32 bytes/document); beyond it, spill "
                        "hash partitions to disk (default 2GB). Never changes the output")


def check(args) -> None:
    parse_size(args.memory_budget, "--memory-budget")


def config(run: Run) -> dict:
    return {"normalise": "collapse whitespace, lowercase", "digest": "xxh3_128",
            "task_mb": run.args.task_mb}


def space(run: Run) -> int:
    """At most a copy of the input, and 16 bytes of digest per document while it runs."""
    return unit_bytes_on_disk(run.units) + 16 * run.total_docs


# Below this much text (the input manifest's), the digests are the readable version's
# (about 100 MB/s a core): setting numba up costs about 0.45 CPU s (its import, the
# kernel, its compiler context), more than the compiled kernel saves on less text.
KERNEL_FROM_BYTES = 64_000_000


def use_kernel(args) -> bool:
    """Whether this run digests with the compiled kernel: from KERNEL_FROM_BYTES of input
    text on, or when the input's size cannot be read (never with --engine reference). The
    digests are the same."""
    if args.engine == "reference":
        return False
    try:
        counts = read_manifest(Path(args.input) / MANIFEST).get("counts") or {}
        text = counts.get("bytes_out", counts.get("text_bytes"))   # clean's; download's
        return int(text) >= KERNEL_FROM_BYTES
    except (StageError, AttributeError, TypeError, ValueError):
        return True


def load_kernel(args) -> None:
    """Before the worker pool is forked: the digest kernel and its table, loaded once here
    so that the workers inherit them instead of each loading them."""
    if use_kernel(args):
        from algorithms import exact_dedup_fast

        exact_dedup_fast.load()


STAGE = Stage("dedup_exact", __doc__, run, flags=flags, check=check, config=config, space=space,
              reads=layout.CLEANED, compiled=use_kernel, prefork=load_kernel, engines=True)


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
