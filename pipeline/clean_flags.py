"""clean.py's flags that come from the rules' declarations: thresholds, sweeps, languages.

Every rule has one flag (its declaration's `flag`); its value is one threshold or one per
language ('en=200,zh=80'), refused outside the rule's declared range (parse_threshold).
--sweep NAME=V1,V2 varies any rule's threshold, one language's (NAME@LANG) or the set of
languages (parse_clean_sweep). Every language a flag names must be one the language-ID
model knows (check_languages), and --export-signals must name a parquet file nothing else
of the run owns (check_export_path). Each refusal is one line naming the flag and value.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from algorithms.cleaning import LanguageRule, Recipe
from pipeline import kept_store
from pipeline.commit import run_owned_paths
from pipeline.disk import check_out_path
from pipeline.errors import ArgumentParser, StageError
from pipeline.staging import staging_path
from pipeline.sweep import parse_sweep


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


def sweepable(recipe: Recipe) -> dict[str, type]:
    """What --sweep can vary: every rule's threshold (by its flag's name), and the languages."""
    out = {r.key: r.kind for r in recipe.rules}
    if any(isinstance(r, LanguageRule) for r in recipe.rules):
        out["languages"] = str   # only a language rule reads them
    return out


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


def rules_in(argv: list[str] | None) -> list[str]:
    """The --rules value(s) on the command line, before the full parse (the flags of the
    chosen rules depend on it)."""
    p = ArgumentParser(add_help=False)
    p.add_argument("--rules", default="tutorial")
    got, _ = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    return [x.strip() for x in got.rules.split(",") if x.strip()]


def check_languages(args, recipe: Recipe, known: set[str], model: Path) -> None:
    """Every language the flags name (--languages, LANG=VALUE thresholds, a sweep's sets
    or NAME@LANG) must be one the language-ID model can answer: a typo would otherwise
    keep nothing, or apply nothing, without a word."""
    def unknown(langs, where: str) -> None:
        bad = [x for x in langs if x != "*" and x not in known]
        if bad:
            raise StageError(f"{where}: {bad[0]!r} is not a language of {model.name} "
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
    the input (it would replace a shard) nor in the output folder, its staging folder,
    the sweeps' signals store, the previous output's place or the task logs' folder (the
    commit replaces or deletes those whole), never a folder, under a folder (made if
    missing)."""
    if getattr(args, "sweep", None):
        raise StageError(f"--export-signals {args.export_signals}: a sweep only reports "
                         "(it writes no output); export with a run, without --sweep")
    if Path(args.export_signals).suffix.lower() != ".parquet":   # never onto a rule file
        raise StageError(f"--export-signals {args.export_signals!r}: the export is a parquet "
                         "file; name it *.parquet")
    dest = Path(args.export_signals).resolve()
    out = Path(args.output).resolve()
    owned = {"--input": Path(args.input).resolve(), "--output": out,
             "the staging folder": staging_path(out, "clean", False),
             # deleted once a run commits (the signals it kept are merged into the output's)
             "the sweeps' signals store": kept_store.side_store(out, "signals"),
             **run_owned_paths(out, "clean", False)}
    for what, folder in owned.items():
        if dest == folder or folder in dest.parents:
            raise StageError(f"--export-signals {args.export_signals}: inside {what} "
                             f"({folder}); write it elsewhere")
    check_out_path("--export-signals", args.export_signals, folder=False)
    try:   # a place that takes no file: now, not after the whole run
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".probe", dir=dest.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise StageError(f"--export-signals {args.export_signals}: cannot write there "
                         f"({e.strerror or e})") from None

