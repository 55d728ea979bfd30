"""What the decontaminate rule found, per evaluation set: report/decontamination.{json,md}
beside clean.py's table (and report.html's section).

After clean.py's tasks, the driver reads the rule's kept signal (one column a unit),
takes the documents it flags (more matched n-grams than the threshold: the rule removes
them, whether an earlier rule removed them first or not), reads their text, and finds
again which items they match (algorithms/decontamination.py's matches, on these few
documents only). Per set: its items, the items found, the documents flagged; and
examples, each with the matched item and the text around the match, the matched
n-grams' characters marked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from algorithms import decontamination as D
from algorithms.cleaning import DECONT, Recipe, bound_folder
from pipeline import eval_sets
from pipeline.tables import markdown_table, save_report
from pipeline.units import Unit, fetch_rows, unit_offsets

MAX_DOCS = 20_000     # documents whose matches are found again (the counts say if more)
CONTEXT = 240         # characters shown on each side of a match
ITEM_CHARS = 300


def index_folder(recipe: Recipe) -> Path | None:
    """The folder of the index the run's decontaminate pack is bound to, if any."""
    folder = next((f for f in map(bound_folder, recipe.packs) if f), None)
    return Path(folder) if folder else None


def flagged_rows(signals_dir: Path, units: list[Unit], rule, threshold) -> np.ndarray:
    """The global rows whose kept signal the rule removes at `threshold` (a per-language
    threshold: its lowest, the rule's widest net)."""
    t = min(threshold.values()) if isinstance(threshold, dict) else threshold
    offsets, out = unit_offsets(units), []
    for u, unit in enumerate(units):
        col = pq.read_table(signals_dir / unit.name, columns=[rule.signal]).column(0)
        values = col.to_numpy(zero_copy_only=False)
        out.append(offsets[u] + np.flatnonzero(rule.removed(values, t)))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def context(text: str, spans: list[tuple[int, int]]) -> dict:
    """The text around the first matched span, with every span inside it (offsets into
    the shown text)."""
    a = max(0, spans[0][0] - CONTEXT)
    b = min(len(text), spans[0][1] + CONTEXT)
    return {"text": text[a:b], "start": a, "cut_before": a > 0, "cut_after": b < len(text),
            "marks": [[max(s, a) - a, min(e, b) - a] for s, e in spans if s < b and e > a]}


def report(run, recipe: Recipe, signals_dir: Path | None, removed_first: int,
           examples: int) -> dict | None:
    """report/decontamination.{json,md} for a run whose recipe has the decontaminate
    rule (None otherwise); returns the JSON's data."""
    folder = index_folder(recipe)
    if folder is None:
        return None
    rule = next(r for r in recipe.rules if r.name == DECONT)
    summ = eval_sets.summary(folder)
    items = pq.read_table(folder / "items.parquet").to_pydict()
    per_set = {name: {**s, "found": 0, "documents": 0} for name, s in summ["sets"].items()}
    data = {"n": summ["n"], "ngrams": summ["ngrams"], "index_bytes": summ["bytes"],
            "threshold": recipe.threshold(rule), "removed_first": removed_first,
            "sets": per_set, "examples": []}
    if signals_dir is None:
        data["note"] = ("the signals were not kept (--no-keep-signals): no per-set detail; "
                        "rerun without it")
    else:
        rows = flagged_rows(signals_dir, run.units, rule, recipe.threshold(rule))
        data["flagged"] = int(len(rows))
        data["detailed"] = int(min(len(rows), MAX_DOCS))
        index = D.load_index(folder / "index.npz")
        offsets = unit_offsets(run.units)
        rows = rows[:MAX_DOCS]
        texts = fetch_rows(run.units, offsets, rows, "text")
        ids = fetch_rows(run.units, offsets, rows, "id")
        found: dict[str, set] = {name: set() for name in per_set}
        for doc_id, text in zip(ids, texts):
            text = text or ""
            hits = D.matches(text, index)
            sets = {items["set"][m.item] for m in hits}
            for m in hits:
                found[items["set"][m.item]].add(m.item)
            for name in sets:
                per_set[name]["documents"] += 1
            if hits and len(data["examples"]) < examples:
                item = hits[0].item
                data["examples"].append({
                    "id": str(doc_id), "set": items["set"][item],
                    "item": items["number"][item], "matched_ngrams": len(hits),
                    "question": (items["question"][item] or "")[:ITEM_CHARS],
                    "answer": items["answer"][item][:ITEM_CHARS],
                    "ngram": hits[0].ngram,
                    "context": context(text, D.matched_spans(text, index, hits))})
        for name in per_set:
            per_set[name]["found"] = len(found[name])
    save_report(run.staging / "report", "decontamination", data, markdown(data))
    return data


def markdown(data: dict) -> str:
    lines = ["# Decontamination (clean.py's decontaminate rule)", "",
             f"Word {data['n']}-grams (a Chinese character is a word) of the evaluation items, "
             f"{data['ngrams']:,} in the index; a document with more than {data['threshold']} "
             f"of them is removed ({data['removed_first']:,} counted under this rule, after "
             "the rules before it).", ""]
    rows = [[name, s["items"], s["too_short"], s["found"], s["documents"]]
            for name, s in data["sets"].items()]
    lines += [markdown_table(["set", "items", f"items under {data['n']} words (never found)",
                              "items found", "documents flagged"], rows), ""]
    if data.get("note"):
        lines.append(f"- {data['note']}")
    if data.get("flagged", 0) > data.get("detailed", 0):
        lines.append(f"- {data['flagged']:,} documents flagged; the first {data['detailed']:,} "
                     "are counted per set")
    for e in data["examples"]:
        c = e["context"]
        shown, last = [], 0
        for a, b in c["marks"]:
            shown += [c["text"][last:a], "**", c["text"][a:b], "**"]
            last = b
        shown.append(c["text"][last:])
        lines += ["", f"## {e['id']}: {e['set']} item {e['item']} ({e['matched_ngrams']} "
                      "n-grams)", "", f"> {' '.join(''.join(shown).split())}"]
    return "\n".join(lines)
