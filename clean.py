"""Step 2 (tutorial section 2): drop documents that would teach the model junk.

    python clean.py                                  # data/raw/ -> data/cleaned/
    python clean.py --min-chars 100 --report-all     # another threshold, every rule's reach
    python clean.py --sweep min_chars=100,200,400    # what each value would remove
    python clean.py --engine reference               # the tutorial's is_clean, step by step

The tutorial's five rules, with 2.2's thresholds, each one a flag:

    too_short    fewer than --min-chars (200) characters: titles and menu items
    dup_lines    more than --max-dup-lines (0.30) of the non-blank lines repeat
    char_repeat  one character repeated more than --max-char-run (50) times in a row
    low_alnum    letters and digits (Chinese characters count) below --min-alnum (0.50)
    lang         fastText lid.176 confidence below --min-lang-conf (0.8), or a language
                 outside --languages (en,zh)

Section 2.3: every rule is counted. A document is counted under the FIRST rule that
removes it, so the table adds up; report/clean_stats.{json,md} keeps it, and
report/removed_<rule>.jsonl examples of what each rule removed. A rule that removes more
than --warn-share (30%) of the input gets a loud warning. --rules adds the published rule
packs (FineWeb, Gopher, C4) or rules of your own; each rule is declared once
(algorithms/rules.py). Every measurement is kept beside the output, so a rerun with other
thresholds, or a --sweep, measures nothing again. More: docs/stages/clean.md.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import functools
import shutil

from algorithms.cleaning import Decider, LidCalls, ReferenceDecider, Signals
from algorithms.langid import LazyLid
from pipeline import clean_task, kept_store, layout
from pipeline.clean_flags import check, config, flags, lid_path, load_lid_once, recipe_of, space
from pipeline.clean_report import stage_output
from pipeline.clean_signals import signal_sources
from pipeline.clean_sweep import sweep_run
from pipeline.clean_task import CleanTask
from pipeline.errors import run_stage
from pipeline.stage import Output, Run, Stage
from pipeline.units import Unit, previous_files


# --------------------------------------------------------------------------------------
# 2.2 and 2.3: one task judges one unit of the input.
# --------------------------------------------------------------------------------------

def clean_unit(rank: int, world_size: int, units: list[dict], staging: str, job: dict) -> None:
    """Task `rank`: 2.2 and 2.3 on unit `rank`, under every recipe of the job (one for a
    run, several for a sweep). For each batch of documents: each rule's number, the
    first rule that removes each document, counted under it; the survivors written.
    What is kept, linked, exported and reported around that: pipeline/clean_task.py."""
    task = CleanTask(Unit(**units[rank]), staging, rank, **job)
    reference = task.engine == "reference"   # is_clean, document by document, and fastText's own
    measure = Signals.measure_reference if reference else Signals.measure
    decider = ReferenceDecider if reference else Decider
    model = LazyLid(task.lid_model, reference=reference)    # loaded on its first use
    for batch, text in task.batches():
        sig = task.signals(batch.num_rows, lambda rules: measure(rules, text()))   # 2.2
        shown = task.examples_of(batch, text)
        lid = LidCalls(model, sig, shown.text_of, task.lid_chars, text)  # language ID, as needed
        deciders = [decider(recipe, sig, lid) for recipe in task.recipes]
        codes = [d.outcomes() for d in deciders]      # 2.3: the first rule that removes each
        task.count(shown, sig, deciders, codes, lid.made)   # counted under that rule
        task.write(batch, codes)                      # the survivors, all columns kept
    task.finish()


# --------------------------------------------------------------------------------------
# The stage: the tasks above over every unit, then the table of 2.3 and its report.
# --------------------------------------------------------------------------------------

def run(run: Run) -> Output:
    """2.2 and 2.3 over every unit of the input, then 2.3's table and its report."""
    args, recipe = run.args, recipe_of(run.args)
    sources = signal_sources(run, recipe)   # what earlier runs measured, unit by unit
    signals_dir = None if args.no_keep_signals else run.staging / "signals"
    run.parallel("clean", clean_unit, units=run.unit_dicts(), staging=str(run.staging),
                 job=clean_task.job([recipe], 0, str(lid_path(args)), args.engine,
                                    report_all=args.report_all, examples=args.examples,
                                    sources=sources,
                                    signals_dir=str(signals_dir) if signals_dir else None,
                                    input_fingerprint=run.input_fingerprint,
                                    previous=previous_files(run.output, run.input_fingerprint),
                                    export=bool(args.export_signals)))
    return stage_output(run, recipe, run.results("clean"), signals_dir)


def after_commit(run: Run) -> None:
    """The signals a sweep measured are merged into the output's: drop the side store."""
    if not run.args.no_keep_signals:
        shutil.rmtree(kept_store.side_store(run.output, "signals"), ignore_errors=True)


STAGE = Stage("clean", __doc__, run, flags=flags, check=check, config=config, space=space,
              sweep=functools.partial(sweep_run, task=clean_unit), after_commit=after_commit,
              reads=layout.RAW,
              compiled=lambda a: a.engine == "fast" and kept_store.nothing_kept(
                  a.output, "signals", ("signals",)),
              prefork=load_lid_once, engines=True)


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
