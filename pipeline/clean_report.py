"""What clean.py's tasks count, merged into the table of tutorial section 2.3, and its report.

A task keeps one Tally per recipe: the documents removed under the FIRST rule that
removes them (in the recipe's order), examples of each rule's removals (Examples), the
survivors, and a histogram of every signal by outcome, with the edges each rule declares
(hist_bins). The driver sums the tasks' tallies (merge), reads the text of the examples
the report keeps (example_texts), and writes report/clean_stats.{json,md} and
report/removed_<rule>.jsonl (write_reports); the JSON carries each rule's declaration
(rule_metadata), which is all report.py knows of the rules. --export-signals's table
(export_table, write_export) is built here too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from algorithms import cleaning
from algorithms.cleaning import Decider, LanguageRule, Recipe, Signals
from algorithms.arrays import from_numpy, strings
from pipeline import decontamination_report, kept_store
from pipeline.clean_flags import EXAMPLE_CHARS
from pipeline.clean_signals import signal_deps
from pipeline.disk import temporary_beside
from pipeline.stage import Output
from pipeline.sweep import carry_sweep_reports
from pipeline.tables import human_bytes, markdown_table, pct, save_report, table
from pipeline.units import Unit, fetch_rows, unit_offsets



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


def write_export(staging: Path, units: list[Unit], dest: Path) -> tuple[int, Path | None]:
    """The tasks' export files, in corpus order, as one parquet file beside dest under a
    temporary name: (rows, that file), which the stage moves to dest once its output is
    committed (Output.outside), so a run that fails leaves the previous export with the
    previous output. (rows, None) when there is nothing to write."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own beside dest (never a file of the user's, such as x.parquet.tmp),
    # made by the writer: the export gets the mode any new file gets
    tmp = temporary_beside(dest)
    writer, rows = None, 0
    try:
        for u in units:
            t = pq.read_table(staging / "_export" / u.name)
            if writer is None:
                writer = pq.ParquetWriter(tmp, t.schema, compression="zstd")
            writer.write_table(t)
            rows += t.num_rows
        if writer is not None:
            writer.close()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return rows, (tmp if writer is not None else None)


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


def stage_output(run, recipe: Recipe, results: list[dict], signals_dir: Path | None):
    """What clean.py's run wrote, from its tasks' results: the kept signals' index, 2.3's
    table and its report, the export (put in place once the output is committed), and
    the lines printed after the commit."""
    args, out = run.args, run.output
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
    decont = decontamination_report.report(run, recipe, signals_dir,
                                           tot["removed"].get(cleaning.DECONT, 0), args.examples)
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
                 f"{out}/report/removed_<rule>.jsonl", *exported,
                 *([f"decontamination: {decont.get('flagged', '?')} documents share n-grams "
                    f"with {sum(s['found'] for s in decont['sets'].values())} evaluation "
                    f"items: {out}/report/decontamination.md"] if decont else [])],
        outside=outside)
