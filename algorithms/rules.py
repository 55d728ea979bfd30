"""A cleaning rule, declared once (tutorial 2.2's table, one row each): its name, what it
measures, its default threshold and direction, its flag, its histogram and the
languages it applies to. clean.py derives everything else from the declaration: the
flag and its check, the first-rule accounting, the kept signals, the names --sweep
takes, the report's section. The tutorial's five rules are declared in
algorithms/cleaning.py; a rule of your own is one file that defines RULES, a list of
Rule (docs/stages/clean.md).

Rule is the declaration; Pass and Measure let several rules share one scan of the text
(a compiled pass measures many numbers at once); declaration_error and recipe_error say
what is wrong with a rule, or with rules run together, before any work.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

class Pass:
    """One pass over a batch of texts that measures several signals at once (a compiled
    scan, say): `fn(texts) -> {signal: array}`. Rules name their signal in it with
    `pass_["name"]`; a batch runs each pass once, however many rules read it.

    shared: (fn_many, name) for passes that are cheaper together: the passes of one
    fn_many that a batch needs run as one call, `fn_many([name, ...], texts) -> {name:
    {signal: array}}`, with the same numbers as each pass's fn (the rule packs share
    their word cutting this way).

    reference: `reference(text) -> {signal: number}`, the readable definition of the same
    numbers for one document, which the reference engine runs."""

    def __init__(self, fn: Callable[[pa.Array], dict[str, np.ndarray]], version: str,
                 shared: tuple[Callable, str] | None = None,
                 reference: Callable[[str], dict] | None = None):
        self.fn, self.version, self.shared = fn, version, shared
        self.reference = reference   # the same numbers for one str, in plain Python

    def __getitem__(self, key: str) -> "Measure":
        return Measure(self, key)


@dataclass(frozen=True)
class Measure:
    """A rule's signal: `key` of a Pass's result."""
    source: Pass
    key: str


USER_MODULE = "user_rules_"   # the module name of a rule file loaded by load_rules


def _source_version(fn: Callable) -> str:
    """A user's measure function is known by its code, and a function of a rule file by
    the whole file: editing the function, or a constant or a helper beside it,
    invalidates what was kept of it."""
    if isinstance(fn, functools.partial):   # its function, and what it was given
        code = (_source_version(fn.func) + repr(fn.args)
                + repr(sorted(fn.keywords.items())))
        return hashlib.sha1(code.encode()).hexdigest()[:12]
    fn = _function_of(fn)   # a callable object: its class's code (never its address)
    try:
        if getattr(fn, "__module__", "").startswith(USER_MODULE):
            # the file's bytes, whatever its encoding (a Latin-1 file is valid Python)
            code = (fn.__qualname__ + "\n").encode() + Path(fn.__code__.co_filename).read_bytes()
        else:
            code = inspect.getsource(fn).encode()
    except (OSError, TypeError, AttributeError, UnicodeDecodeError):
        code = (getattr(fn, "__qualname__", None) or type(fn).__qualname__).encode()
    return hashlib.sha1(code).hexdigest()[:12]


def _function_of(fn: Callable) -> Callable:
    """The function behind a measure: a partial's (however nested), a callable object's
    __call__, or the function itself."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not inspect.isfunction(fn) and not inspect.ismethod(fn) and callable(fn):
        fn = type(fn).__call__
    return fn


def in_rule_file(fn) -> bool:
    """Whether a measure (a function, a partial of one, a callable object, or a Measure of
    a Pass) is code of a user's rule file."""
    if isinstance(fn, Measure):
        fn = fn.source.fn
    return (getattr(_function_of(fn), "__module__", "") or "").startswith(USER_MODULE)


@dataclass(frozen=True)
class Rule:
    """One cleaning rule.

    name:        what the table counts its removals under ("too_short")
    description: one sentence for --help and the report
    signal:      the name of the number it measures ("chars"), a column of the kept signals
    measure:     a function over a batch of texts (pyarrow strings) returning one number
                 per document, or a Measure of a shared Pass
    threshold:   the default
    removes:     "below" (value < threshold removes the document) or "above" (value >)
    flag:        its command-line flag ("--min-chars"); the config key is the flag's name
    kind:        int or float (how the threshold and the values are read and shown)
    bins, scale: the report's histogram edges, and "linear" or "log"
    languages:   the languages it applies to (None: every language); a document of
                 another language is never removed by it
    shows:       how the report writes the threshold ("< {t} chars"; {t} is the value)
    valid:       (lowest, highest) allowed threshold, None for no bound
    file_code:   set by load_rules for a rule of a file: a digest of the file's bytes
    """
    name: str
    description: str
    signal: str
    measure: Callable | Measure | None
    threshold: float
    removes: str
    flag: str
    kind: type = float
    bins: tuple = ()
    scale: str = "linear"
    languages: tuple[str, ...] | None = None
    shows: str = ""
    valid: tuple = (None, None)
    version: str = "1"
    file_code: str = ""

    def __post_init__(self):
        if self.removes not in ("below", "above"):
            raise ValueError(f"rule {self.name}: removes must be 'below' or 'above'")

    @property
    def key(self) -> str:
        """The config key (and --sweep name): the flag without dashes."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def signal_version(self) -> str:
        """What the kept signal depends on: the rule's declared version, and for a user's
        function its code."""
        m = self.measure
        if isinstance(m, Measure):   # a pass of a rule file: its code too
            return (f"{m.source.version}:{_source_version(m.source.fn)}" if in_rule_file(m)
                    else f"{m.source.version}")
        if m is None:
            return self.version
        version = f"{self.version}:{_source_version(m)}"
        if self.file_code and not in_rule_file(m):
            # a function from elsewhere, chosen (and configured) by the file: its source
            # need not tell it apart (pyarrow's generated kernels share one), the file does
            version += f":{self.file_code}"
        return version

    @property
    def file_dependent(self) -> bool:
        """Whether the signal's version holds a rule file's code."""
        m = self.measure
        return m is not None and (in_rule_file(m) or (bool(self.file_code)
                                                      and not isinstance(m, Measure)))

    def skips(self, lang: str) -> bool:
        """Whether this rule never removes a document of language `lang` ("*": the
        languages not named, which a rule of every language does not skip)."""
        return lang != "*" and self.languages is not None and lang not in self.languages

    def removed(self, values: np.ndarray, threshold) -> np.ndarray:
        """Which of `values` this rule removes at `threshold` (a number, or an array of
        per-document thresholds)."""
        return values < threshold if self.removes == "below" else values > threshold

    def threshold_text(self, t) -> str:
        if isinstance(t, dict):   # per language; the languages not named keep the default
            parts = [f"{'others' if lang == '*' else lang}: {self.threshold_text(v)}"
                     for lang, v in t.items()]
            if "*" not in t:
                parts.append(f"others: {self.threshold_text(self.threshold)}")
            return "; ".join(parts)
        shown = f"{t:g}" if isinstance(t, float) else str(t)
        op = "<" if self.removes == "below" else ">"
        return self.shows.format(t=shown, op=op) if self.shows else f"{self.signal} {op} {shown}"

    def value_of(self, v) -> int | float | str:
        """A measured value as the reports write it; an infinite one as "inf" or "-inf"
        (JSON has no number for it)."""
        if self.kind is int:
            return int(v)
        v = float(v)
        return round(v, 4) if math.isfinite(v) else ("inf" if v > 0 else "-inf")


@dataclass(frozen=True)
class LanguageRule(Rule):
    """The lang rule: fastText's language and confidence (algorithms.langid), measured
    only for the documents a decision reaches; removes a document whose confidence is
    below the threshold or whose language is not one of the wanted ones."""


# What a rule may not call its signal: the export's and the kept signals' own columns.
RESERVED_SIGNALS = ("id", "verdict", "bytes", "lang", "lang_conf",
                    *(f"{p}_{x}" for p in ("head", "tail", "full") for x in ("lang", "conf")))
MAX_RULES = 127   # a document's outcome is the index of the rule that removed it, in an int8
# What a rule may not be called: the tables' row of the documents no rule removed.
RESERVED_NAMES = ("kept",)
# What a rule's flag may not be (its config key is the flag's name): clean's own settings.
RESERVED_KEYS = ("languages", "lid_chars", "rules", "rule_code", "lid_model", "report_all",
                 "examples", "example_chars", "warn_share", "task_mb", "keep_signals",
                 "eval_sets", "eval_question_field", "eval_answer_field", "decont_n")
MAX_NAME = 100    # it names report files (removed_NAME.jsonl)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


def declaration_error(r: Rule) -> str | None:
    """What is wrong with one rule's declaration, or None."""
    if not isinstance(r.name, str) or not _NAME.fullmatch(r.name) or len(r.name) > MAX_NAME:
        return (f"its name must be 1 to {MAX_NAME} letters, digits, '_', '.' or '-' (it "
                "names a report file)")
    if r.name in RESERVED_NAMES:
        return f"{r.name!r} names the tables' row of the documents no rule removed"
    if not isinstance(r.description, str) or not r.description.strip():
        return (f"its description {r.description!r} must be text (the flag's help and the "
                "report say it)")
    if not isinstance(r.flag, str) or not _FLAG.fullmatch(r.flag):
        return f"its flag {r.flag!r} must look like --min-something (lower case)"
    if r.key in RESERVED_KEYS:
        return f"its flag {r.flag} names one of clean.py's own settings in the manifest"
    if not isinstance(r.signal, str) or not r.signal or r.signal in RESERVED_SIGNALS:
        return (f"its signal {r.signal!r} is a name the stage uses itself "
                f"({', '.join(RESERVED_SIGNALS[:5])}, ...): choose another")
    if r.measure is None and not isinstance(r, LanguageRule):
        return "it has no measure (a function of a batch of texts)"
    if r.kind not in (int, float):
        return "its kind must be int or float"
    try:
        edges = np.asarray(r.bins, dtype=np.float64)
    except (TypeError, ValueError):
        edges = np.zeros(0)
    if edges.ndim != 1 or len(edges) < 2 or not np.all(np.diff(edges) > 0) \
            or not np.all(np.isfinite(edges)):
        return "bins must be at least two increasing, finite edges (the report's histogram)"
    if r.scale not in ("linear", "log"):
        return f"its scale {r.scale!r} must be 'linear' or 'log'"
    if r.languages is not None and (isinstance(r.languages, str) or not r.languages or not all(
            isinstance(x, str) and re.fullmatch(r"[a-z]{2,3}", x) for x in r.languages)):
        return (f"its languages {r.languages!r} must be None (every language) or a tuple of "
                "fastText language codes, such as ('en',) or ('en', 'zh')")
    t = r.threshold
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return f"its threshold {t!r} must be a finite number"
    if r.kind is int and t != int(t):   # its flag takes whole numbers only: never given back
        return f"its threshold {t!r} is not a whole number, but the rule is declared int"
    if not isinstance(r.valid, (tuple, list)) or len(r.valid) != 2 or not all(
            x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)
                          and not math.isnan(x)) for x in r.valid):
        return (f"its valid {r.valid!r} must be (lowest, highest), each a number or None "
                "(no bound)")
    lo, hi = r.valid
    if (lo is not None and t < lo) or (hi is not None and t > hi):
        return f"its threshold {t!r} is outside its own valid range {r.valid!r}"
    try:
        r.threshold_text(t)
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        return (f"its shows template {r.shows!r} cannot be filled ({type(e).__name__}: {e}); "
                "it may name only {t}, the threshold, and {op}")
    return None


def recipe_error(rules: tuple[Rule, ...]) -> str | None:
    """What is wrong with running these rules together, or None: two rules of one name,
    flag or signal (a signal two rules share must be the same measure), two language
    rules."""
    if not rules:
        return "no rules to run"
    if len(rules) > MAX_RULES:
        return f"{len(rules)} rules: at most {MAX_RULES} run together"
    seen: dict[str, Rule] = {}
    for r in rules:
        for what, key in (("name", r.name), ("flag", r.key)):
            other = seen.get(f"{what}:{key}")
            if other is not None:
                return (f"two rules named {r.name!r}" if what == "name" else
                        f"rules {other.name!r} and {r.name!r} have the same flag {r.flag}")
            seen[f"{what}:{key}"] = r
        other = seen.get(f"signal:{r.signal}")
        if other is not None and other.measure != r.measure:
            return (f"rules {other.name!r} and {r.name!r} both measure a signal "
                    f"{r.signal!r}, differently: give one another name")
        seen.setdefault(f"signal:{r.signal}", r)
    langs = [r.name for r in rules if isinstance(r, LanguageRule)]
    if len(langs) > 1:   # a run decides each document's language once, by one threshold
        return (f"rules {langs[0]!r} and {langs[1]!r} are both language rules: a run has one "
                "(the tutorial's lang, --min-lang-conf)")
    return None
