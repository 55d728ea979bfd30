"""Everything around one clean.py task, so that the task itself reads as 2.2 and 2.3 do.

clean.py's task measures each document's numbers, finds the first rule that removes it
and counts it. Around that, one CleanTask keeps, for its unit of the input:

- the kept signals (pipeline/clean_signals.py): read back batch by batch, only the rules
  they lack measured; at the end written again, or the kept file linked when nothing new
  was measured;
- the output: the survivors written batch by batch with all their columns; or, when the
  kept signals alone show that the same rows survive as in the output being replaced,
  that file linked (pipeline.units.filter_unit), and then only the ids are read;
- the tallies of every recipe (pipeline/clean_report.py: Tally), with the examples a
  report shows;
- for a sweep, the documents whose fate differs between neighbouring recipes;
- for --export-signals, every document's id, verdict and signals;
- progress, and the task's result for the driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from algorithms import cleaning
from algorithms.arrays import from_numpy, strings
from algorithms.cleaning import Decider, Recipe, Signals

from . import kept_store
from .clean_report import Examples, Tally, export_table
from .clean_signals import kept_signal_versions, load_kept
from .progress import task_progress
from .shards import ShardWriter, link_or_copy, open_shard, write_table
from .task_results import save_task_result
from .units import Unit, filter_recipe, filter_unit, read_unit, read_unit_lazily

# Rows per batch a task reads. A batch never holds more than its unit (about --task-mb of
# text); fewer, larger batches spend less on per-batch bookkeeping, which with I/O is most
# of a rerun. The output does not depend on it.
READ_ROWS = 8192


def job(recipes: list[Recipe], main: int | None, lid_model: str, engine: str,
        report_all: bool = False, examples: int = 50, sources: list | None = None,
        signals_dir: str | None = None, pairs: list[list[int]] = (),
        input_fingerprint: str | None = None, previous: dict | None = None,
        export: bool = False) -> dict:
    """What every task of a clean phase is given (a dict, to travel to any executor).

    main: the index of the recipe whose survivors are written (None for a sweep). sources:
    for every unit, the kept signal files that cover it. signals_dir: where the unit's
    signals go. pairs: index pairs of recipes whose differing documents are collected as
    examples (a sweep's neighbouring values). previous: the file records of the output
    being replaced ({name: record}). export: also write every document's verdict and
    signals (--export-signals)."""
    return {"recipes": [r.spec() for r in recipes], "main": main, "lid_model": lid_model,
            "engine": engine, "report_all": report_all, "examples": examples,
            "sources": sources, "signals_dir": signals_dir, "pairs": [list(p) for p in pairs],
            "input_fingerprint": input_fingerprint, "previous": previous, "export": export}


class CleanTask:
    """One unit's judging under every recipe of a job (see the module's docstring)."""

    def __init__(self, unit: Unit, staging: str, rank: int, recipes: list[dict],
                 main: int | None, lid_model: str, engine: str, report_all: bool,
                 examples: int, sources: list | None, signals_dir: str | None,
                 pairs: list[list[int]], input_fingerprint: str | None,
                 previous: dict | None, export: bool):
        self.unit, self.staging, self.rank = unit, Path(staging), rank
        self.recipes = [Recipe.from_spec(r) for r in recipes]
        self.main, self.lid_model, self.engine = main, lid_model, engine
        self.report_all, self.examples, self.pairs = report_all, examples, pairs
        self.signals_dir, self.input_fingerprint, self.export = signals_dir, input_fingerprint, export
        # the rules that measure a signal: the recipes share them, but for a sweep of
        # decont_n, whose recipes each have their own n's
        signals: dict = {}
        for rec in self.recipes:
            for r in rec.signals():
                signals.setdefault(r.signal, r)
        self.rules = list(signals.values())
        self.lid_chars = self.recipes[0].lid_chars
        self.kept, self.notes, self.kept_from = load_kept(
            sources[rank] if sources else [], unit.rows, self.rules)
        # rules whose signal is not kept (added since, or edited): measured, and only they
        self.missing = [r for r in self.rules if self.kept is None or r.signal not in self.kept.values]
        self.tallies = [Tally(r) for r in self.recipes]
        self.fate: list[list] = [[] for _ in pairs]
        self.fate_count = [0] * len(pairs)
        self.prev = (previous or {}).get(unit.name)
        self.writer = None
        if main is not None and not self.unchanged():   # one pass: decide and write
            self.writer = ShardWriter(self.staging / unit.name,
                                      open_shard(unit.shard).schema_arrow)
        self.keeps: list[np.ndarray] = []
        self.exported: list[pa.Table] = []
        self.parts: list[Signals] = []
        self.made = self.start = self.bytes_in = 0
        self.progress = task_progress()

    def unchanged(self) -> bool:
        """Do the kept signals alone show that the same rows survive as in the previous
        output's file (which is then linked, not rewritten)?"""
        if self.kept is None or self.missing or self.prev is None:
            return False
        keep = cleaning.keep_from_signals(self.recipes[self.main], self.kept)
        return keep is not None and filter_recipe(self.unit, keep, self.input_fingerprint) \
            == self.prev["recipe"]

    def batches(self):
        """The unit's rows as (batch, text), text() giving the batch's text column.

        A pass that writes the output reads every column. A sweep with every signal kept,
        or a task whose unit's output is unchanged, reads only the ids, and the text of a
        batch only when a decision needs it (examples are read later, by the driver): a
        few row groups, not the corpus."""
        if self.writer is not None or self.kept is None or self.missing:
            cols = None if self.writer is not None else ["id", "text"]
            for batch in read_unit(self.unit, columns=cols, batch_rows=READ_ROWS):
                yield batch, (lambda b=batch: b.column("text"))
            return
        yield from read_unit_lazily(self.unit, "id", "text", batch_rows=READ_ROWS)

    def signals(self, rows: int, measure: Callable[[list], Signals]) -> Signals:
        """The batch's signals: the kept ones read back, the rest measure(rules)."""
        if self.kept is None:
            return measure(self.rules)
        sig = self.kept.slice(self.start, rows)
        if self.missing:
            sig.add(measure(self.missing))
        return sig

    def examples_of(self, batch, text) -> Examples:
        """The batch's documents as examples name them (and their text, for language ID)."""
        return Examples(batch, text, self.writer is not None, self.unit.index, self.start)

    def count(self, shown: Examples, sig: Signals, deciders: list[Decider],
              codes: list[np.ndarray], lid_calls: int) -> None:
        """2.3's counts, per recipe, with examples; a sweep's fate changes; the export."""
        for d, code, tally in zip(deciders, codes, self.tallies):
            tally.count(d, code, sig, self.examples, shown)
        if self.main is not None:
            main = self.tallies[self.main]
            main.count_signals(deciders[self.main], sig, codes[self.main])
            if self.report_all:
                main.count_alone(deciders[self.main])
        for k, (a, b) in enumerate(self.pairs):   # a sweep: documents whose fate differs
            ra, rb = self.recipes[a], self.recipes[b]
            differ = np.flatnonzero((codes[a] == len(ra.rules)) != (codes[b] == len(rb.rules)))
            self.fate_count[k] += len(differ)
            take = differ[:max(0, self.examples - len(self.fate[k]))]
            for i, ex in zip(take, shown(take)):
                loser = a if codes[a][i] != len(ra.rules) else b
                c = int(codes[loser][i])
                self.fate[k].append({"id": ex.pop("id"), "removed_by": loser,
                                     "rule": self.recipes[loser].rules[c].name,
                                     "value": deciders[loser].value(c, i), **ex})
        if self.export:
            self.exported.append(export_table(shown.ids, self.recipes[self.main],
                                              deciders[self.main], codes[self.main], sig))
        self.made += lid_calls
        self.parts.append(sig)
        n = len(sig)
        self.start += n
        self.bytes_in += int(sig.bytes.sum())
        self.progress.add(n, int(sig.bytes.sum()))

    def write(self, batch: pa.RecordBatch, codes: list[np.ndarray]) -> None:
        """The survivors of the main recipe, all columns kept (when this task writes)."""
        if self.main is None:
            return
        keep = codes[self.main] == len(self.recipes[self.main].rules)
        self.keeps.append(keep)
        if self.writer is not None:
            self.writer.write(batch if keep.all() else batch.filter(from_numpy(keep)))

    def finish(self) -> None:
        """The output file (written, or the previous one linked), the kept signals, the
        export, and the task's result for the driver."""
        res = {"unit": self.unit.index, "docs_in": self.start, "bytes_in": self.bytes_in,
               "configs": [t.to_dict(self.report_all and i == self.main)
                           for i, t in enumerate(self.tallies)],
               "fate": [{"count": c, "examples": f} for c, f in zip(self.fate_count, self.fate)],
               "lid_calls_made": self.made,
               "lid_calls_kept": self.kept.lid_calls() if self.kept is not None else 0,
               "signals_reused": self.kept is not None, "signals_notes": self.notes,
               "signals_measured": [r.signal for r in self.missing]}
        if self.main is not None:
            keep = np.concatenate(self.keeps) if self.keeps else np.zeros(0, bool)
            dst = self.staging / self.unit.name
            if self.writer is not None:
                res["file"] = {**self.writer.close(), "reused": False,
                               "recipe": filter_recipe(self.unit, keep, self.input_fingerprint)}
            else:   # the previous file, linked (rewritten if it fails its digest check); the
                    # examples are named by their place, and the driver reads the few it shows
                res["file"] = filter_unit(self.unit, dst, keep, self.input_fingerprint,
                                          self.prev)
        if self.signals_dir:   # exactly the recipe's signals (and the language-ID calls)
            res["signals"] = self.keep_signals(Path(self.signals_dir) / self.unit.name)
        if self.export:
            path = self.staging / "_export" / self.unit.name
            path.parent.mkdir(parents=True, exist_ok=True)
            main = self.recipes[self.main]
            write_table(path, pa.concat_tables(self.exported) if self.exported else export_table(
                strings([]), main, None, np.zeros(0, np.int8), Signals(0)))
        save_task_result(self.staging, "clean", self.rank, res)

    def keep_signals(self, path: Path) -> dict:
        """Write the unit's signals (or link the kept file when nothing new was measured);
        returns the store's index entry."""
        path.parent.mkdir(parents=True, exist_ok=True)
        one = (self.kept_from[0] if len(self.kept_from) == 1 and len(self.kept_from[0]) == 1
               else None)
        versions = {r.signal: r.signal_version for r in self.rules}
        if (self.made == 0 and not self.missing and one and one[0]["whole"]
                and kept_signal_versions(one) == versions):
            link_or_copy(one[0]["path"], path)   # nothing new measured: the same bytes
        else:
            table = Signals.concat(self.parts).select([r.signal for r in self.rules]).to_table()
            write_table(path, table)
        return kept_store.entry(path, self.unit.shard, self.unit.row_start, self.unit.rows,
                                signals=versions)
