"""Cleaning (tutorial section 2): rules that each measure one number per document and
remove it past a threshold, counted rule by rule.

Part 1 is the tutorial's is_clean (2.3) and its rules' numbers, in plain Python, one
document at a time: what `clean.py --engine reference` runs (one deliberate change, named
with the other departures in the README: dup_lines counts non-blank lines). Part 2 is
the tutorial's rules, each declared once as a Rule (algorithms/rules.py): the flags, the
first-rule accounting, the kept signals, sweeps and the report all come from the
declaration. Part 3 gives the same answers for a whole batch at once: every number
measured in one compiled pass (algorithms/cleaning_fast.py) and the decisions in numpy
(`Decider`), which is what the fast engine runs; `ReferenceDecider` asks is_clean
instead, document by document.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import from_numpy, strings, to_numpy
# how a rule is declared and checked (Rule is what a file of your own rules imports)
from .rules import (USER_MODULE, LanguageRule, Measure, Pass, Rule,  # noqa: F401
                    declaration_error, recipe_error)

# --------------------------------------------------------------------------------------
# Part 1: the tutorial's is_clean (2.3), and its rules' numbers in plain Python.
# --------------------------------------------------------------------------------------

stats = Counter()   # 2.3: every rule's removals, counted


def is_clean(text: str, recipe: "Recipe | None" = None, language=None,
             counts: Counter | None = None, values: dict | None = None) -> bool:
    """2.3's is_clean: the rules in order; the first that removes the document is counted
    under its name and the document is dropped (False); a document no rule removes is
    counted as "kept" (True). Which document a rule removes is known only from the counts:
    that is the point of 2.3.

    recipe: the rules and their thresholds (default: the tutorial's five, 2.2's table).
    language: a function giving the document's (language, confidence), fastText's
        (algorithms/langid.py), called only if a rule needs the language.
    counts: where the removals are counted (default: this module's `stats`, as in 2.3).
    values: every rule's number, when measured already (the stage measures them all
        first, to keep them for sweeps and reruns); else each is measured here."""
    recipe = Recipe() if recipe is None else recipe
    counts = stats if counts is None else counts
    lang = conf = None
    for rule in recipe.rules:
        if lang is None and recipe.needs_language(rule):
            lang, conf = language()
        value = None if isinstance(rule, LanguageRule) else (
            values[rule.signal] if values is not None else measure_one(rule, text))
        if rule_removes(rule, recipe, value, lang, conf):
            counts[rule.name] += 1
            return False
    counts["kept"] += 1
    return True


def chars(text: str) -> int:
    """too_short's number: the length in characters."""
    return len(text)


def dup_line_share(text: str) -> float:
    """dup_lines's number: the share of non-blank lines that repeat an earlier line (after
    stripping spaces). Blank lines are left out on purpose: prose separates paragraphs
    with them, and counting them turns every third paragraph break into a "duplicate"."""
    lines = [s for s in map(str.strip, text.split("\n")) if s]
    if not lines:
        return 0.0
    return 1.0 - len(set(lines)) / len(lines)


def longest_char_run(text: str) -> int:
    """char_repeat's number: the longest run of one character, e.g. 80 for a line of 80
    '='. 2.3's `re.search(r"(.)\1{50,}", text)` finds a run longer than 50; the length
    itself is more useful in the report. Like the regex's `.`, a run of newlines does not
    count (blank lines are not a repeated character); every other character does."""
    longest = run = 0
    prev = None
    for c in text:
        run = run + 1 if c == prev else 1
        prev = c
        if c != "\n" and run > longest:
            longest = run
    return longest


def alnum_share(text: str) -> float:
    """low_alnum's number: the share of characters that are letters or digits in any
    script. str.isalnum() is true for Chinese characters, which is what keeps a Chinese
    corpus alive; `c.isascii() and c.isalnum()` would be 0 for all of them (2.3's trap)."""
    if not text:
        return 0.0
    return sum(c.isalnum() for c in text) / len(text)


def rule_removes(rule: "Rule", recipe: "Recipe", value, lang: str | None,
                 conf: float | None) -> bool:
    """Does `rule` remove a document whose number is `value`, of language `lang` (decided
    with confidence `conf`; None when no rule needed it)?"""
    if isinstance(rule, LanguageRule):   # 2.2: confident enough, and a wanted language
        return not (lang in recipe.languages and conf >= recipe.min_conf(lang))
    if rule.languages is not None and lang not in rule.languages:
        return False                     # a rule for other languages never removes it
    t = recipe.threshold(rule)
    if isinstance(t, dict):              # per language, "*" for the others
        t = t.get(lang, t.get("*", rule.threshold))
    return value < t if rule.removes == "below" else value > t


def measure_one(rule: "Rule", text: str):
    """A rule's number for one document, by its readable definition: the reference of
    its Pass (a whole pack's numbers at once, like the compiled pass), or its own
    function on a batch of one (a rule of your own)."""
    m = rule.measure
    if isinstance(m, Measure) and m.source.reference is not None:
        return m.source.reference(text)[m.key]
    return _user_values(rule, m, strings([text]))[0]


# --------------------------------------------------------------------------------------
# Part 2: the tutorial's rules, declared once (how a rule is declared: algorithms/rules.py).
# --------------------------------------------------------------------------------------

def _scan(texts: pa.Array) -> dict[str, np.ndarray]:
    """The tutorial's four signals in one compiled pass (algorithms.cleaning_fast)."""
    from .cleaning_fast import cheap_signals   # numba: imported only when measuring

    chars, dup, run, alnum = cheap_signals(texts)
    return {"chars": chars, "dup_line_share": dup, "longest_run": run, "alnum_share": alnum}


def _scan_one(text: str) -> dict:
    """The tutorial's four numbers of one document, by Part 1's definitions."""
    return {"chars": chars(text), "dup_line_share": dup_line_share(text),
            "longest_run": longest_char_run(text), "alnum_share": alnum_share(text)}


# version 2: a run of newlines is no longer a run
TUTORIAL_SCAN = Pass(_scan, version="2", reference=_scan_one)
SHARE_BINS = tuple(np.round(np.linspace(0.0, 1.0, 51), 4).tolist())
LANG_CONF = "lang_conf"     # the language decision's confidence: the lang rule's signal

# The tutorial's table in 2.2, in its order: a document is counted under the first rule
# that removes it, and the cheap rules come first so a removed document never reaches
# fastText.
TUTORIAL = (
    Rule("too_short", "fewer characters than this: titles and menu items", "chars",
         TUTORIAL_SCAN["chars"], 200, "below", "--min-chars", int,
         bins=tuple([0.0] + np.round(np.logspace(1, 7, 61)).tolist()), scale="log",
         shows="< {t} chars", valid=(0, None)),
    Rule("dup_lines", "more than this share of the non-blank lines repeat an earlier one: "
         "navigation bars and footers left by text extraction", "dup_line_share",
         TUTORIAL_SCAN["dup_line_share"], 0.30, "above", "--max-dup-lines", float,
         bins=SHARE_BINS, shows="> {t} of non-blank lines", valid=(0, 1)),
    Rule("char_repeat", "one character repeated more than this many times in a row: "
         "==== separators and crawler garbage", "longest_run", TUTORIAL_SCAN["longest_run"],
         50, "above", "--max-char-run", int,
         bins=tuple(np.unique([0.0] + np.round(np.logspace(0, 5, 51)).tolist()).tolist()),
         scale="log", shows="run > {t}", valid=(1, None)),   # (rounding repeats 1, 2, ...)
    Rule("low_alnum", "letters and digits (Chinese characters count) below this share of "
         "the text: tables, code dumps, mojibake", "alnum_share", TUTORIAL_SCAN["alnum_share"],
         0.50, "below", "--min-alnum", float, bins=SHARE_BINS, shows="alnum < {t}",
         valid=(0, 1)),
    LanguageRule("lang", "fastText lid.176 confidence below this, or a language outside "
                 "--languages: mixed text and gibberish", LANG_CONF, None, 0.80, "below",
                 "--min-lang-conf", float, bins=SHARE_BINS, valid=(0, 1)),
)

# The published rule sets (FineWeb, Gopher, C4) are declared in algorithms/rule_packs.py,
# imported when a run asks for one (their module imports datatrove's character sets).
# "lang" alone is the tutorial's language rule, to put language ID where a recipe wants
# it (FineWeb runs it first: --rules lang,gopher_repetition,gopher_quality,c4,fineweb).
QUALITY_PACKS = ("fineweb", "gopher_quality", "gopher_repetition", "c4")
PACKS: dict[str, tuple[Rule, ...]] = {"tutorial": TUTORIAL, "lang": TUTORIAL[-1:]}


def pack_names() -> list[str]:
    return [*PACKS, *QUALITY_PACKS, DECONT]


# The decontaminate pack (algorithms/rule_packs.py) measures against an index of the
# user's evaluation sets: "decontaminate=FOLDER" names the pack bound to the index kept
# in FOLDER (what clean.py's tasks rebuild); plain "decontaminate" only declares it.
DECONT = "decontaminate"


def bound_folder(pack: str) -> str | None:
    """The index folder a bound decontaminate pack names (None: another pack, or the pack
    only declared)."""
    return (pack.partition("=")[2] or None) if pack_name(pack) == DECONT else None


def pack_name(pack: str) -> str:
    """A pack as the config records it: a bound decontaminate pack by its name
    ("decontaminate@N=FOLDER": another n's, judged beside the run's own in a sweep)."""
    return DECONT if pack.startswith((DECONT + "=", DECONT + "@")) else pack


def pack_flags() -> dict[str, str]:
    """Every built-in rule's flag -> its pack."""
    from . import rule_packs

    out = {}
    for pack, rules in {**PACKS, **rule_packs.PACKS, DECONT: rule_packs.decontaminate()}.items():
        for r in rules:
            out.setdefault(r.flag, pack)
    return out


def load_rules(pack: str) -> tuple[Rule, ...]:
    """The rules of a pack: a built-in name (pack_names()), or the path of a Python file
    of your own that defines RULES, a list of Rule."""
    if pack in PACKS:
        return PACKS[pack]
    if pack in QUALITY_PACKS:
        from . import rule_packs

        return rule_packs.PACKS[pack]
    if pack_name(pack) == DECONT:
        from . import rule_packs

        folder = bound_folder(pack)
        n = pack.partition("=")[0].partition("@")[2]
        return rule_packs.decontaminate(folder, Path(folder).name if folder else "",
                                        f"{DECONT}.matched_{n}grams" if n else
                                        f"{DECONT}.matched_ngrams")
    import importlib.util

    path = Path(pack)
    if path.suffix == ".py" and not path.is_file():
        raise ValueError(f"--rules {pack}: no such file")
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"--rules {pack}: neither a rule pack ({', '.join(pack_names())}) "
                         "nor a Python file of rules")
    spec = importlib.util.spec_from_file_location(f"{USER_MODULE}{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    # in sys.modules while it runs, as an imported module is: dataclasses (with postponed
    # annotations) and typing look a class's module up there
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:   # the user's code: any error (or exit) on one line
        sys.modules.pop(spec.name, None)
        raise ValueError(f"--rules {pack}: {type(e).__name__}: {e}") from None
    rules = getattr(module, "RULES", None)
    if isinstance(rules, Rule) or (rules is not None and not isinstance(rules, (list, tuple))):
        # a generator would be used up by the check below, and its rules lost without a word
        what = "one Rule" if isinstance(rules, Rule) else f"of type {type(rules).__name__}"
        raise ValueError(f"--rules {pack}: RULES is {what}, not a list of Rule: write "
                         "RULES = [...]")
    if not rules or not all(isinstance(r, Rule) for r in rules):
        raise ValueError(f"--rules {pack}: the file must define RULES, a list of "
                         "algorithms.rules.Rule")
    for r in rules:
        why = declaration_error(r)
        if why:
            raise ValueError(f"--rules {pack}: rule {r.name!r}: {why}")
    # every rule of the file depends on it, whatever its measure is
    digest = hashlib.sha1(path.read_bytes()).hexdigest()[:12]
    return tuple(replace(r, file_code=digest) for r in rules)


# --------------------------------------------------------------------------------------
# A recipe: the rules a run applies, in order, and their thresholds.
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """Which rules run, in order, with which thresholds: everything that decides which
    documents survive (all of it goes in the manifest's config). A threshold is a number,
    or per language a tuple of (language, number) pairs with "*" for the others."""
    rules: tuple[Rule, ...] = TUTORIAL
    values: tuple[tuple[str, object], ...] = ()      # (rule name, threshold) overrides
    languages: tuple[str, ...] = ("en", "zh")
    lid_chars: int = 0           # 0: full text; N: both ends first (opt-in shortcut)
    packs: tuple[str, ...] = ("tutorial",)

    # -- thresholds --------------------------------------------------------------------
    def threshold(self, rule: Rule):
        """The rule's threshold: a number, or {language: number} ("*": the others)."""
        for name, v in self.values:
            if name == rule.name:
                return dict(v) if isinstance(v, tuple) else v
        return rule.threshold

    def with_threshold(self, rule: Rule, value) -> "Recipe":
        frozen = tuple(sorted(value.items())) if isinstance(value, dict) else value
        values = tuple((n, v) for n, v in self.values if n != rule.name) + ((rule.name, frozen),)
        return replace(self, values=tuple(sorted(values)))

    def per_language(self, rule: Rule) -> bool:
        return isinstance(self.threshold(rule), dict)

    def thresholds_for(self, rule: Rule, langs: np.ndarray | None):
        """The threshold of each document (langs: their languages), or one number."""
        t = self.threshold(rule)
        if not isinstance(t, dict):
            return t
        default = t.get("*", rule.threshold)
        out = np.full(len(langs), default, dtype=np.float64)
        for lang, v in t.items():
            if lang != "*":
                out[langs == lang] = v
        return out

    def lang_rule(self) -> LanguageRule | None:
        return next((r for r in self.rules if isinstance(r, LanguageRule)), None)

    def min_conf(self, lang: str) -> float:
        """The lang rule's confidence threshold for a document of language `lang`."""
        rule = self.lang_rule()
        t = self.threshold(rule) if rule else 0.0
        return t.get(lang, t.get("*", rule.threshold)) if isinstance(t, dict) else t

    def needs_language(self, rule: Rule) -> bool:
        """Does deciding this rule need the document's language?"""
        return (isinstance(rule, LanguageRule) or rule.languages is not None
                or self.per_language(rule))

    # -- what the manifest records -----------------------------------------------------
    def config(self) -> dict:
        """The settings as the manifest records them: each rule's threshold under its
        flag's name, the languages, the language-ID shortcut, and the rule packs."""
        out = {}
        for r in self.rules:
            t = self.threshold(r)
            out[r.key] = t
        out["languages"] = list(self.languages)
        out["lid_chars"] = self.lid_chars
        out["rules"] = [pack_name(p) for p in self.packs]
        # the code of a rule file's rules: an edited file is another config, so a run it
        # stopped does not resume with what the old code measured, and its sweeps go stale
        code = {r.name: r.signal_version for r in self.rules if r.file_dependent}
        if code:
            out["rule_code"] = code
        return out

    def spec(self) -> dict:
        """What a task needs to rebuild the recipe (rules are rebuilt from their packs; a
        file of your own rules by its absolute path: a worker may start elsewhere)."""
        from pathlib import Path

        packs = [p if pack_name(p) in pack_names() else str(Path(p).resolve())
                 for p in self.packs]
        return {"packs": packs, "values": [[n, list(map(list, v)) if isinstance(v, tuple)
                                                        else v] for n, v in self.values],
                "languages": list(self.languages), "lid_chars": self.lid_chars}

    @staticmethod
    def from_spec(d: dict) -> "Recipe":
        rules = tuple(r for p in d["packs"] for r in load_rules(p))
        values = tuple((n, tuple(map(tuple, v)) if isinstance(v, list) else v)
                       for n, v in d["values"])
        return Recipe(rules, values, tuple(d["languages"]), d["lid_chars"], tuple(d["packs"]))

    def signals(self) -> list[Rule]:
        """The rules that measure a kept signal column, each signal once, in order."""
        seen, out = set(), []
        for r in self.rules:
            if r.measure is not None and r.signal not in seen:
                seen.add(r.signal)
                out.append(r)
        return out


# --------------------------------------------------------------------------------------
# Part 3: signals and decisions.
# --------------------------------------------------------------------------------------

LID_PARTS = ("head", "tail", "full")


def labels_of(col: pa.ChunkedArray) -> np.ndarray:
    """A string column as an object array (None where null), through its few distinct
    labels: no Python string per row (and no pandas, see algorithms.arrays)."""
    enc = pc.dictionary_encode(col).combine_chunks()
    names = np.array(enc.dictionary.to_pylist() + [None], dtype=object)
    return names[to_numpy(enc.indices, null=len(names) - 1)]


def _user_values(rule: Rule, fn: Callable, texts) -> np.ndarray:
    """A rule's own measure function on a batch, checked: one finite-or-infinite number
    per document (NaN would be neither kept nor removed by any threshold: refused, like
    a wrong count or a value that is not a number), any error of it on one line."""
    try:
        got = fn(texts)
        values = np.asarray(got)
    except (Exception, SystemExit) as e:   # the user's code: its error (or exit), on one line
        raise ValueError(f"rule {rule.name!r}: its measure raised {type(e).__name__}: {e}") \
            from None
    if values.ndim == 0:
        raise ValueError(f"rule {rule.name!r}: its measure gave {type(got).__name__} "
                         f"{str(got)[:40]!r}, not a list of one number per document")
    if values.ndim != 1:
        raise ValueError(f"rule {rule.name!r}: its measure gave an array of shape "
                         f"{values.shape} for {len(texts)} documents (one number per document, "
                         "a flat list)")
    if values.shape != (len(texts),):
        raise ValueError(f"rule {rule.name!r}: its measure gave {values.size} values for "
                         f"{len(texts)} documents (one number per document)")
    if values.dtype.kind not in "biuf":
        raise ValueError(f"rule {rule.name!r}: its measure gave values of type {values.dtype}, "
                         "not numbers")
    if values.dtype.kind == "f" and np.isnan(values).any():
        i = int(np.flatnonzero(np.isnan(values))[0])
        raise ValueError(f"rule {rule.name!r}: its measure gave NaN (document {i} of a batch "
                         f"of {len(texts)}); a signal must be a number")
    if rule.kind is int:   # kept as int64: a value that is not one would change silently
        if values.dtype.kind == "f":
            bad = (~np.isfinite(values) | (values != np.round(values))
                   | (np.abs(values) >= 2.0 ** 63))
        elif values.dtype.kind == "u":
            bad = values > np.iinfo(np.int64).max
        else:
            bad = np.zeros(len(values), bool)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"rule {rule.name!r} is declared int, but its measure gave "
                             f"{values[i].item()!r} (document {i} of a batch of {len(texts)}): "
                             "return whole numbers of int64, or declare it float")
    return values


class Signals:
    """The measurements of a run of documents: each rule's signal, one numpy column, and
    the text's size in UTF-8 bytes (for the tables' byte counts), for every document;
    language ID only where a decision needed it -- which part was read (head, tail or
    the full text) with its label and confidence; a part never read has lang None and
    conf NaN."""

    def __init__(self, n: int, names: tuple[str, ...] = (), kinds: dict | None = None):
        self.n = n
        self.bytes = np.zeros(n, np.int64)
        self.kinds = dict(kinds or {})
        self.values: dict[str, np.ndarray] = {
            k: np.zeros(n, np.int64 if self.kinds.get(k) is int else np.float64) for k in names}
        self.lang = {p: np.full(n, None, dtype=object) for p in LID_PARTS}
        self.conf = {p: np.full(n, np.nan) for p in LID_PARTS}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, signal: str) -> np.ndarray:
        return self.values[signal]

    @staticmethod
    def measure(rules: list[Rule], texts) -> "Signals":
        """Every rule's signal for every text (language ID excepted): each Pass once (the
        shared ones of one fn_many in one call), each plain measure function once."""
        if isinstance(texts, list):
            texts = strings(texts)
        sig = Signals(len(texts), kinds={r.signal: r.kind for r in rules})
        done: dict[int, dict] = {}
        together: dict[Callable, list[Pass]] = {}     # shared passes, by what runs them
        for r in rules:
            src = r.measure.source if isinstance(r.measure, Measure) else None
            if src is not None and src.shared is not None:
                group = together.setdefault(src.shared[0], [])
                if src not in group:
                    group.append(src)
        for fn_many, group in together.items():
            got = fn_many([src.shared[1] for src in group], texts)
            for src in group:
                done[id(src)] = got[src.shared[1]]
        for r in rules:
            m = r.measure
            if isinstance(m, Measure):
                got = done.get(id(m.source))
                if got is None:
                    got = done[id(m.source)] = m.source.fn(texts)
                values = got[m.key]
            else:
                values = _user_values(r, m, texts)
            sig.values[r.signal] = np.asarray(values, np.int64 if r.kind is int else np.float64)
        sig.bytes = to_numpy(pc.binary_length(texts), null=0).astype(np.int64)
        return sig

    @staticmethod
    def measure_reference(rules: list[Rule], texts) -> "Signals":
        """measure()'s numbers by their readable definitions, one document at a time
        (each Pass's reference: Part 1's functions, each pack's plain Python): what the
        reference engine runs. A rule of your own has one definition, its function, which
        runs on the batch as in measure()."""
        if isinstance(texts, list):
            texts = strings(texts)
        docs = None
        sig = Signals(len(texts), kinds={r.signal: r.kind for r in rules})
        per_doc: dict[int, list[dict]] = {}
        for r in rules:
            m = r.measure
            if isinstance(m, Measure) and m.source.reference is not None:
                if id(m.source) not in per_doc:   # each pass once per document
                    docs = docs if docs is not None else [t or "" for t in texts.to_pylist()]
                    per_doc[id(m.source)] = [m.source.reference(t) for t in docs]
                values = [d[m.key] for d in per_doc[id(m.source)]]
            elif isinstance(m, Measure):
                values = m.source.fn(texts)[m.key]
            else:
                values = _user_values(r, m, texts)
            sig.values[r.signal] = np.asarray(values, np.int64 if r.kind is int else np.float64)
        sig.bytes = to_numpy(pc.binary_length(texts), null=0).astype(np.int64)
        return sig

    def schema(self) -> pa.Schema:
        return pa.schema(
            [("bytes", pa.int64())]
            + [(k, pa.int64() if v.dtype == np.int64 else pa.float64())
               for k, v in self.values.items()]
            + [f for p in LID_PARTS for f in ((f"{p}_lang", pa.string()),
                                             (f"{p}_conf", pa.float64()))])

    def to_table(self) -> pa.Table:
        cols = [from_numpy(self.bytes)] + [from_numpy(v) for v in self.values.values()]
        for p in LID_PARTS:
            cols += [strings(self.lang[p].tolist()),
                     from_numpy(self.conf[p], pa.float64(), mask=np.isnan(self.conf[p]))]
        return pa.Table.from_arrays(cols, schema=self.schema())

    @staticmethod
    def from_table(t: pa.Table, names: list[str] | None = None) -> "Signals":
        """Signals read back from a kept table (names: the signal columns to take; all)."""
        lid = {f"{p}_{x}" for p in LID_PARTS for x in ("lang", "conf")}
        names = names if names is not None else [c for c in t.column_names
                                                 if c != "bytes" and c not in lid]
        sig = Signals(t.num_rows)
        sig.bytes = to_numpy(t.column("bytes")).astype(np.int64)
        for k in names:
            col = t.column(k)
            sig.values[k] = to_numpy(col).astype(np.int64 if pa.types.is_integer(col.type)
                                                 else np.float64)
        for p in LID_PARTS:
            sig.lang[p] = labels_of(t.column(f"{p}_lang"))
            sig.conf[p] = to_numpy(t.column(f"{p}_conf"), null=np.nan).astype(np.float64)
        return sig

    def slice(self, start: int, n: int) -> "Signals":
        out = Signals(0)
        out.n = len(self.bytes[start:start + n])
        out.bytes = self.bytes[start:start + n]
        out.values = {k: v[start:start + n] for k, v in self.values.items()}
        out.lang = {p: self.lang[p][start:start + n] for p in LID_PARTS}
        out.conf = {p: self.conf[p][start:start + n] for p in LID_PARTS}
        return out

    @staticmethod
    def concat(parts: list["Signals"]) -> "Signals":
        out = Signals(0)
        if not parts:
            return out
        out.n = sum(len(p) for p in parts)
        out.bytes = np.concatenate([p.bytes for p in parts])
        out.values = {k: np.concatenate([p.values[k] for p in parts]) for k in parts[0].values}
        out.lang = {q: np.concatenate([p.lang[q] for p in parts]) for q in LID_PARTS}
        out.conf = {q: np.concatenate([p.conf[q] for p in parts]) for q in LID_PARTS}
        return out

    def add(self, other: "Signals") -> None:
        """Take `other`'s signal columns (the same documents, measured since)."""
        self.values.update(other.values)

    def select(self, names: list[str]) -> "Signals":
        """The same documents with exactly these signal columns, in this order."""
        out = self.slice(0, self.n)
        out.values = {k: self.values[k] for k in names}
        return out

    def fill_from(self, other: "Signals") -> None:
        """Take the signal columns and the language-ID results `other` has and this one
        lacks (same documents)."""
        for k, v in other.values.items():
            self.values.setdefault(k, v)
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
        from .langid import predict_langs

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
        from .langid import predict_lang

        conf = self.sig.conf[part][i]
        if np.isnan(conf):
            text = self.text_of(i)
            piece = text[:self.n] if part == "head" else text[-self.n:] if part == "tail" else text
            lang, conf = predict_lang(self.model, piece)
            self.sig.lang[part][i], self.sig.conf[part][i] = lang, conf
            self.made += 1
            return lang, conf
        return self.sig.lang[part][i], float(conf)


def lang_decision(recipe: Recipe, chars: int, get) -> tuple[str, float]:
    """(language, confidence) as fastText sees the whole text, read only as far as needed.

    fastText's cost grows with the text, so with --lid-chars N a long document is first
    judged by its first and its last N characters. When both ends are confidently the
    same accepted language, that is the answer (with the lower of the two confidences).
    Anything else -- an uncertain end, two languages, a rejected language -- is decided
    on the full text, so the lang rule never removes a document on a sample of it.
    get(part) returns the (language, confidence) of part "head", "tail" or "full".
    """
    n = recipe.lid_chars
    if n and chars > 2 * n:
        head_lang, head_conf = get("head")
        if head_lang in recipe.languages and head_conf >= recipe.min_conf(head_lang):
            tail_lang, tail_conf = get("tail")
            if tail_lang == head_lang and tail_conf >= recipe.min_conf(head_lang):
                return head_lang, min(head_conf, tail_conf)
    return get("full")


def detect_lang(model, text: str, recipe: Recipe) -> tuple[str, float]:
    """lang_decision for one text, measuring every part it needs."""
    lid = LidCalls(model, Signals(1), lambda i: text, recipe.lid_chars)
    return lang_decision(recipe, len(text), lambda p: lid.get(0, p))


def lang_decisions(recipe: Recipe, sig: Signals, lid: LidCalls, idx: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """lang_decision for the documents idx, as arrays (languages, confidences). With
    the default --lid-chars 0, or no document long enough for the shortcut, every
    decision is the full text's, read from the kept signals or measured in one batch."""
    idx = np.asarray(idx, np.int64)
    chars = sig.values.get("chars")
    if chars is None:
        chars = sig.bytes   # the shortcut's length test needs no exact count here
    if recipe.lid_chars == 0 or not (chars[idx] > 2 * recipe.lid_chars).any():
        need = np.zeros(len(sig), bool)
        need[idx] = True
        lid.full_text(need)
        return sig.lang["full"][idx], sig.conf["full"][idx]
    langs, confs = np.empty(len(idx), dtype=object), np.empty(len(idx))
    for j, i in enumerate(idx):
        langs[j], confs[j] = lang_decision(recipe, int(chars[i]),
                                           lambda p, i=i: lid.get(int(i), p))
    return langs, confs


def accepted(recipe: Recipe, langs: np.ndarray, confs: np.ndarray) -> np.ndarray:
    """Does the lang rule keep each decision: confident enough, in --languages."""
    langs = np.asarray(langs, dtype=object)
    ok = np.zeros(len(langs), bool)
    for lang in set(recipe.languages):   # a compare per wanted label, not a test per document
        ok |= langs == lang
    rule = recipe.lang_rule()
    return (np.asarray(confs) >= recipe.thresholds_for(rule, langs)) & ok


class Decider:
    """The first rule (in the recipe's order) that removes each document of a batch."""

    def __init__(self, recipe: Recipe, sig: Signals, lid: LidCalls):
        self.recipe, self.sig, self.lid = recipe, sig, lid
        self.langs = np.full(len(sig), None, dtype=object)
        self.confs = np.full(len(sig), np.nan)
        self.decided = np.zeros(len(sig), bool)

    def languages(self, idx: np.ndarray) -> np.ndarray:
        """The decided language of documents idx (language ID where not yet decided)."""
        todo = idx[~self.decided[idx]]
        if len(todo):
            self.langs[todo], self.confs[todo] = lang_decisions(self.recipe, self.sig,
                                                                self.lid, todo)
            self.decided[todo] = True
        return self.langs[idx]

    def removes(self, rule: Rule, idx: np.ndarray) -> np.ndarray:
        """Does `rule` remove each of the documents idx (all of them reaching it)?"""
        r = self.recipe
        if len(idx) == 0:
            return np.zeros(0, bool)
        langs = self.languages(idx) if r.needs_language(rule) else None
        if isinstance(rule, LanguageRule):
            return ~accepted(r, langs, self.confs[idx])
        hit = rule.removed(self.sig[rule.signal][idx], r.thresholds_for(rule, langs))
        if rule.languages is not None:
            hit &= np.isin(langs.astype(str), list(rule.languages))
        return hit

    def outcomes(self) -> np.ndarray:
        """Per document, the index in the recipe of the FIRST rule that removes it, or
        len(rules): kept."""
        rules = self.recipe.rules
        code = np.full(len(self.sig), len(rules), dtype=np.int8)
        alive = np.arange(len(self.sig))
        for k, rule in enumerate(rules):
            hit = self.removes(rule, alive)
            code[alive[hit]] = k
            alive = alive[~hit]
        return code

    def alone(self) -> dict[str, np.ndarray]:
        """For --report-all: does each rule, on its own, remove each document?"""
        every = np.arange(len(self.sig))
        return {rule.name: self.removes(rule, every) for rule in self.recipe.rules}

    def value(self, code: int, i: int) -> dict:
        """The measured number behind an outcome (for the examples a person reads)."""
        rules = self.recipe.rules
        rule = rules[code] if code < len(rules) else None
        if rule is not None and not isinstance(rule, LanguageRule):
            return {rule.signal: rule.value_of(self.sig[rule.signal][i])}
        lang, conf = lang_decision(self.recipe, int(self._chars(i)),
                                   lambda p: self.lid.get(i, p))
        return {"lang": lang, "conf": round(conf, 4)}

    def _chars(self, i: int) -> int:
        chars = self.sig.values.get("chars")
        return chars[i] if chars is not None else self.sig.bytes[i]


class ReferenceDecider(Decider):
    """Decider's answers, asked of is_clean one document at a time (the reference engine):
    the same first rule, the same language-ID calls, the same values."""

    def language_of(self, i: int) -> tuple[str, float]:
        lang = self.languages(np.array([i]))[0]
        return lang, float(self.confs[i])

    def values_of(self, i: int) -> dict:
        return {r.signal: self.sig[r.signal][i] for r in self.recipe.signals()}

    def outcomes(self) -> np.ndarray:
        rules = self.recipe.rules
        index = {r.name: k for k, r in enumerate(rules)}
        code = np.full(len(self.sig), len(rules), dtype=np.int8)
        for i in range(len(self.sig)):
            verdict = Counter()   # is_clean counts the document under the rule that removed it
            if not is_clean(None, self.recipe, functools.partial(self.language_of, i),
                            verdict, self.values_of(i)):
                code[i] = index[next(iter(verdict))]
        return code

    def alone(self) -> dict[str, np.ndarray]:
        out = {}
        for rule in self.recipe.rules:
            hit = np.zeros(len(self.sig), bool)
            for i in range(len(self.sig)):
                lang, conf = (self.language_of(i) if self.recipe.needs_language(rule)
                              else (None, None))
                value = None if isinstance(rule, LanguageRule) else self.sig[rule.signal][i]
                hit[i] = rule_removes(rule, self.recipe, value, lang, conf)
            out[rule.name] = hit
        return out


class Unmeasured(Exception):
    """A decision needs a language-ID call that was never made."""


def keep_from_signals(recipe: Recipe, sig: Signals) -> np.ndarray | None:
    """Which documents survive, decided from kept signals alone; None when a decision
    needs a language-ID call that was never made (its text would have to be read)."""
    def unmeasured(i: int) -> str:
        raise Unmeasured

    try:
        d = Decider(recipe, sig, LidCalls(None, sig, unmeasured, recipe.lid_chars))
        return d.outcomes() == len(recipe.rules)
    except Unmeasured:
        return None


def first_rule(text: str, recipe: Recipe, model) -> tuple[str | None, dict]:
    """The first rule (in the recipe's order) that removes text, with its measured value;
    (None, {"lang": ..., "conf": ...}) when the document is kept. One document through
    the same code a task runs on a batch."""
    sig = Signals.measure(recipe.signals(), [text or ""])
    lid = LidCalls(model, sig, lambda i: text or "", recipe.lid_chars)
    d = Decider(recipe, sig, lid)
    code = int(d.outcomes()[0])
    name = recipe.rules[code].name if code < len(recipe.rules) else None
    return name, d.value(code, 0)


def histogram(edges, values: np.ndarray, group: np.ndarray | None = None,
              groups: int = 1) -> np.ndarray:
    """Counts in the bins `edges` (np.histogram's bins: each [left, right), the last one
    closed); values past the last edge count in the last bin, NaN in none. With `group`
    (an int per value, < groups): one row of counts per group, in one pass."""
    edges = np.asarray(edges, dtype=np.float64)
    v = np.clip(np.asarray(values, dtype=np.float64), edges[0], edges[-1])
    ok = ~np.isnan(v)
    nb = len(edges) - 1
    idx = np.minimum(np.searchsorted(edges, v[ok], side="right") - 1, nb - 1)
    if group is not None:
        idx = idx + np.asarray(group)[ok].astype(np.int64) * nb
    counts = np.bincount(idx, minlength=groups * nb)
    return counts if group is None else counts.reshape(groups, nb)
