"""Section 6 of the tutorial: the acceptance checklist, run against data/.

    python verify.py                     # checks data/, writes data/verify_report.md
    python verify.py --data-dir /big/data --windows 20

Each of the ten items prints PASS or FAIL with its figures; the report is also written
as Markdown; the exit status is 1 if any item fails, 2 for bad arguments or when verify.py
cannot write its own files (its work folder, the report: a full disk, a size limit, a
read-only folder), which is one line and keeps the previous report. A FAIL names
its likely cause and the stage to rerun, as the table in section 7 does:

   1  train.bin / val.bin exist, size = 2 bytes x manifest tokens, and the token count is
      within --size-tolerance of the estimate (input bytes / bytes per token on a sample,
      5.6, without its 5% headroom for preallocation)
   2  N random windows decode to readable text (replacement characters and byte-level
      artefacts below --max-bad-char-rate)
   3  the tokenizer round trip is lossless on English, Chinese and emoji
   4  EOS count in each .bin = documents packed into it; EOS density reported
   5  the cleaning stats table is present; a rule removing > 30% is flagged
   6  document and byte counts before and after both dedup stages
   7  compression (characters per token) on English and Chinese text: fixed paragraphs,
      the documents train_tokenizer.py held out, and the val documents
   8  no validation document in train: exact (normalised hash) and near-duplicate
      (MinHash signatures of dedup_minhash.py, Jaccard >= 0.8)
   9  the same pipeline ran end to end on the smoke data set (sample or TinyStories)
  10  nothing lost: the manifests chain from raw to packed and every count adds up

The .bin files are read in memmap chunks (--chunk-tokens), so they may exceed RAM.
A check whose stage has not run yet fails with the stage to run.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import os
import shutil
import time
from functools import partial
from pathlib import Path

from pipeline.disk import report_write_failed
from pipeline.errors import StageError, refusal, run_stage
from pipeline.lock import FolderLock
from pipeline.stage import ReportOutput, ReportRun, ReportStage
from pipeline import eval_sets, kept_store
from pipeline.verify.contamination import check_eval_sets
from pipeline.verify.context import PACK_MANIFEST, Context, Item, Missing
from pipeline.verify.decoded import check_eos, check_round_trip, check_windows
from pipeline.verify.leakage import check_val_overlap
from pipeline.verify.lost import check_nothing_lost
from pipeline.verify.packed import check_files
from pipeline.verify.report import (REPORT_HEAD, REPORT_NAME, own_write_failed,
                                    render_markdown, render_terminal, report_data)
from pipeline.verify.scan import SCAN
from pipeline.verify.smoke import check_smoke_run
from pipeline.verify.upstream import check_clean_stats, check_compression, check_dedup_counts

# The checklist of section 6, in its order: each check reads what it needs through the
# Context (pipeline/verify/context.py) and returns its Item, PASS or FAIL with its figures.
CHECKS = [check_files, check_windows, check_round_trip, check_eos, check_clean_stats,
          check_dedup_counts, check_compression, check_val_overlap, check_smoke_run,
          check_nothing_lost]
TITLES = {1: "train.bin / val.bin sizes", 2: "decoded windows", 3: "tokenizer round trip",
          4: "EOS count", 5: "cleaning stats", 6: "dedup counts", 7: "compression",
          8: "val not in train", 9: "smoke run", 10: "nothing lost",
          11: "no evaluation item in train"}
# With --eval-sets, an eleventh item: the evaluation items left in train.bin / val.bin.
EVAL_CHECK = check_eval_sets


def run_check(fn, num: int, ctx: Context) -> Item:
    """Run one item; a missing prerequisite is a FAIL that names the stage to run. A write
    of verify.py's own that fails stops the run instead (report_write_failed): the
    checklist cannot be finished, and FAILs would blame the data and replace a good report."""
    try:
        try:
            return fn(ctx)
        except ValueError as e:   # an algorithm's refusal (a tokenizer file that is not one)
            bad = refusal(e)
            if bad is None:
                raise
            raise bad from None
    except (Missing, StageError) as e:
        it = Item(num, TITLES[num])
        it.fail(str(e), f"a prerequisite is missing: {str(e).split(': ')[-1]}")
        return it
    except Exception as e:  # a broken input must not hide the other nine items
        if own_write_failed(e, ctx):
            where = ctx.data / SCAN   # a worker's write names no file
            if isinstance(e.filename, (str, bytes)):
                where = Path(os.fsdecode(e.filename))
            raise report_write_failed(e, where, ctx.args.output) from None
        it = Item(num, TITLES[num])
        it.fail(f"{type(e).__name__}: {e}", "unexpected input; see the message")
        return it


def run(run: ReportRun) -> ReportOutput:
    """Every item in turn, printed, then reported as Markdown and, beside it, as JSON
    (report.py's page reads it); exit status 1 when any item FAILs."""
    ctx = Context(run.args, phases=run.phases)
    items, seconds = [], {}
    try:
        for i, fn in enumerate(CHECKS + ([EVAL_CHECK] if run.args.eval_sets else [])):
            t = time.time()
            items.append(run_check(fn, i + 1, ctx))
            # the scan's time goes to the first item that needs it
            seconds[str(i + 1)] = round(time.time() - t, 3)
    finally:   # the work folder goes while its lock is held
        shutil.rmtree(ctx.data / SCAN, ignore_errors=True)
    print(render_terminal(items))
    return ReportOutput(render_markdown(items, ctx.data) + "\n", data=report_data(items, ctx.data),
                        resources={"item_wall_s": seconds},
                        summary=[f"wrote {run.output} and {run.output.with_suffix('.json').name}"],
                        status=0 if all(it.ok for it in items) else 1)


# --------------------------------------------------------------------------------------
# The command line: verify.py's own flags, and the locks its run takes.
# --------------------------------------------------------------------------------------

def flags(p, argv=None) -> None:
    p.add_argument("--tokenizer", default=None,
                   help="default: the tokenizer recorded in pack_manifest.json")
    p.add_argument("--windows", type=int, default=10, help="random windows to decode (default 10)")
    p.add_argument("--window-tokens", type=int, default=200,
                   help="tokens per window (default 200, as section 6 decodes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random windows")
    p.add_argument("--size-tolerance", type=float, default=0.10,
                   help="allowed deviation of packed tokens from the estimate (default 0.10)")
    p.add_argument("--max-bad-char-rate", type=float, default=0.005,
                   help="replacement characters / artefacts allowed in decoded windows (0.005)")
    p.add_argument("--max-rule-removal", type=float, default=0.30,
                   help="flag a cleaning rule that removes more than this share (0.30)")
    p.add_argument("--min-cpt-en", type=float, default=2.0,
                   help="minimum English characters per token (default 2.0)")
    p.add_argument("--min-cpt-zh", type=float, default=0.6,
                   help="minimum Chinese characters per token (default 0.6)")
    p.add_argument("--near-dup-threshold", type=float, default=0.8,
                   help="MinHash similarity from which a train document counts as a near "
                        "copy of a val one (item 8; default 0.8, dedup_minhash's)")
    p.add_argument("--smoke-dir", default=None,
                   help="data folder of the smoke run, if DATA_DIR holds the full run")
    p.add_argument("--chunk-tokens", type=int, default=1 << 24,
                   help="tokens read per memmap chunk (default 16M)")
    eval_sets.add_flags(p, "train.bin and val.bin (item 11)")
    p.add_argument("--max-eval-items", type=int, default=0, metavar="N",
                   help="item 11 fails when more than N evaluation items are found (default 0)")


def check(a) -> None:
    """A value that would switch a check off (NaN, out of range) is refused, not obeyed;
    a wrong path of the user's is theirs to fix, not a FAIL of the data."""
    for flag, v, low in (("--windows", a.windows, 1), ("--window-tokens", a.window_tokens, 2),
                         ("--chunk-tokens", a.chunk_tokens, 1)):
        if v < low:
            raise StageError(f"{flag} {v}: must be at least {low}")
    if not 0 <= a.seed < 2 ** 64:
        raise StageError(f"--seed {a.seed}: must be between 0 and 2**64-1")
    for flag, v, hi in (("--size-tolerance", a.size_tolerance, None),
                        ("--max-bad-char-rate", a.max_bad_char_rate, 1),
                        ("--max-rule-removal", a.max_rule_removal, 1),
                        ("--min-cpt-en", a.min_cpt_en, None), ("--min-cpt-zh", a.min_cpt_zh, None),
                        ("--near-dup-threshold", a.near_dup_threshold, 1)):
        if not (0 <= v < float("inf") and (hi is None or v <= hi)):   # NaN fails both
            raise StageError(f"{flag} {v}: must be " + (f"between 0 and {hi}" if hi else ">= 0"))
    if a.tokenizer is not None and not Path(a.tokenizer).is_file():
        raise StageError(f"--tokenizer {a.tokenizer}: no such file (give the tokenizer.json "
                         "pack_parallel.py used)")
    eval_sets.check_flags(a)
    if a.max_eval_items < 0:
        raise StageError(f"--max-eval-items {a.max_eval_items}: must be >= 0")
    if a.eval_sets and Path(a.data_dir).is_dir():   # a bad evaluation file: one line, exit 2
        eval_sets.index_folder(a, decont_store(a))
    if a.smoke_dir is not None and not Path(a.smoke_dir).is_dir():
        raise StageError(f"--smoke-dir {a.smoke_dir} is not a folder")


def decont_store(a) -> Path:
    """Where item 11's n-gram index is kept: beside the data folder's outputs."""
    return kept_store.side_store(Path(a.data_dir) / "verify", "decont")


def locks(run: ReportRun) -> list:
    """What it reads must not be rewritten meanwhile: a shared lock on each (pipeline/lock.py);
    and its own work folder (.verify.partial), which every run empties: one run at a time."""
    data = run.data
    takes = [partial(FolderLock, data / name, "verify.py", shared=True)
             for name in ("cleaned", "dedup_exact", "dedup", "tokenizer")
             if (data / name).is_dir()]
    if (data / PACK_MANIFEST).exists():
        takes.append(partial(FolderLock, data, "verify.py", shared=True, name="pack_parallel",
                             what=f"pack_parallel's output in {data}"))
    if data.is_dir():
        takes.append(partial(FolderLock, data, "verify.py", name="verify",
                             what=f"verify's work folder {data / SCAN}"))
    return takes


STAGE = ReportStage("verify", __doc__, run, report=(REPORT_NAME, REPORT_HEAD),
                    data_head='"items"', flags=flags, check=check, locks=locks, parallel=True,
                    output_flags=("--report", "--output"),
                    input_help="the data folder it checks (default: data)",
                    output_help="where the report goes (default: DATA_DIR/verify_report.md, "
                                "and .json beside it)")


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
