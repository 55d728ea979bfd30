"""Rules declared once (algorithms/cleaning.py): your own rule in a file, the published
packs (FineWeb, Gopher, C4), per-language thresholds, kept signals per rule, signal
export. Every test runs clean.py for real on the bundled sample."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, SAMPLE, data_files, run_script

USER_RULE = ROOT / "docs" / "examples" / "line_ends_rule.py"


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("rules") / "data"
    run_script("download_data.py", "--dataset", "sample", "--output", d / "raw")
    return d / "raw"


def clean(raw: Path, out: Path, *flags, check=True):
    return run_script("clean.py", "--input", raw, "--output", out, "--workers", 2, *flags,
                      check=check)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_the_example_rule_is_a_file_of_about_15_lines():
    code = [x for x in USER_RULE.read_text().splitlines() if x.strip()]
    assert len(code) <= 16


def test_your_own_rule_runs_in_a_run_a_sweep_and_the_report(raw, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    cp = clean(d / "raw", d / "cleaned", "--rules", f"tutorial,{USER_RULE}")
    m = manifest(d / "cleaned")
    assert [r["rule"] for r in m["rules"]][-1] == "few_sentence_ends"
    removed = m["counts"]["removed"]["few_sentence_ends"]
    assert 0 < removed < 0.2 * m["counts"]["docs_in"]
    assert "few_sentence_ends" in cp.stdout and m["config"]["min_line_ends"] == 0.2
    # the sweep measures nothing: every signal, the user's too, is kept
    cp = clean(d / "raw", d / "cleaned", "--rules", f"tutorial,{USER_RULE}",
               "--sweep", "min_line_ends=0.1,0.2,0.4")
    sweep = json.loads((d / "cleaned" / "report" / "sweep.json").read_text())
    s = sweep["sweeps"][0]
    assert s["param"] == "min_line_ends"
    assert [v["removed"]["few_sentence_ends"] for v in s["values"]][1] == removed
    assert s["changes"][0]["documents"] > 0 and s["changes"][0]["examples"]
    assert s["changes"][0]["examples"][0]["rule"] == "few_sentence_ends"
    assert "language ID calls made 0," in cp.stdout
    # report.html draws it from the declaration: its histogram with its threshold
    run_script("report.py", "--input", d)
    page = (d / "report.html").read_text()
    assert 'data-rule="few_sentence_ends"' in page and "histogram of line_end_share" in page


def test_adding_a_rule_measures_only_its_signal_removing_one_measures_nothing(raw, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    clean(d / "raw", d / "cleaned")
    cp = clean(d / "raw", d / "cleaned", "--rules", "tutorial,fineweb")
    sig = manifest(d / "cleaned")["signals"]
    assert set(sig["measured"]) == {f"fineweb.{k}" for k in (
        "line_punct_share", "short_line_share", "dup_line_char_share", "newlines_per_word")}
    assert sig["lid_calls_made"] == 0 and "measured anew" in cp.stdout
    clean(d / "raw", tmp_path / "fresh2", "--rules", "tutorial,fineweb")
    assert data_files(d / "cleaned") == data_files(tmp_path / "fresh2")
    # back to the tutorial's rules alone: nothing measured, and the same bytes as a
    # fresh tutorial run (its kept signals too: the fineweb columns are dropped)
    clean(d / "raw", d / "cleaned")
    sig = manifest(d / "cleaned")["signals"]
    assert sig["measured"] == {} and sig["lid_calls_made"] == 0
    clean(d / "raw", tmp_path / "fresh1")
    assert data_files(d / "cleaned") == data_files(tmp_path / "fresh1")


@pytest.mark.parametrize("pack,flag,value", [("gopher_repetition", "--gopher-dup-lines", "0.2"),
                                             ("c4", "--c4-min-sentences", "8")])
def test_a_pack_threshold_rerun_equals_a_fresh_run(raw, tmp_path, pack, flag, value):
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    clean(d / "raw", d / "cleaned", "--rules", pack)
    first = manifest(d / "cleaned")["counts"]
    cp = clean(d / "raw", d / "cleaned", "--rules", pack, flag, value)
    assert manifest(d / "cleaned")["signals"]["measured"] == {}
    assert manifest(d / "cleaned")["counts"] != first        # the threshold moved documents
    clean(d / "raw", tmp_path / "fresh", "--rules", pack, flag, value)
    assert data_files(d / "cleaned") == data_files(tmp_path / "fresh")
    assert "Traceback" not in cp.stderr


def test_per_language_thresholds_and_sweeps(raw, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    out = tmp_path / "sig.parquet"
    cp = clean(d / "raw", d / "cleaned", "--min-chars", "en=200,zh=1000", "--export-signals", out)
    # the table names each language's threshold, and what the others keep
    assert "en: < 200 chars; zh: < 1000 chars; others: < 200 chars" in cp.stdout
    run_script("report.py", "--data-dir", d, "--output", d / "r.html")
    assert "A threshold per language (en: &lt; 200 chars; zh: &lt; 1000 chars; others" in \
        (d / "r.html").read_text()
    t = pq.read_table(out).to_pylist()
    short = [r for r in t if r["verdict"] == "too_short"]
    # too_short takes each document's own language: Chinese under 1000, the rest under 200
    assert any(r["lang"] == "zh" and 200 <= r["chars"] < 1000 for r in short)
    assert all(r["chars"] < (1000 if r["lang"] == "zh" else 200) for r in short)
    assert not any(r["lang"] != "zh" and r["chars"] >= 200 and r["verdict"] == "too_short"
                   for r in t)
    assert manifest(d / "cleaned")["config"]["min_chars"] == {"en": 200, "zh": 1000}
    cp = clean(d / "raw", d / "cleaned", "--min-chars", "en=200,zh=1000",
               "--sweep", "min_chars@zh=100,1000")
    sweep = json.loads((d / "cleaned" / "report" / "sweep.json").read_text())["sweeps"][0]
    assert sweep["param"] == "min_chars@zh"
    lo, hi = (v["removed"]["too_short"] for v in sweep["values"])
    assert lo < hi and hi == manifest(d / "cleaned")["counts"]["removed"]["too_short"]
    assert "language ID calls made 0," in cp.stdout
    bad = clean(d / "raw", d / "cleaned", "--min-chars", "en=abc", check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --min-chars en=abc")


def test_a_threshold_for_a_language_a_rule_skips_is_noted(raw, tmp_path):
    """Gopher's mean word length is declared for English only: a Chinese value of it, in
    a run or in a sweep, changes nothing, and each says so."""
    out = tmp_path / "cleaned"
    cp = clean(raw, out, "--rules", "gopher_quality", "--gopher-min-mean-word-length", "zh=1")
    assert ("note: --gopher-min-mean-word-length zh=...: gopher_min_mean_word_length applies "
            "to en only; that value changes nothing") in cp.stderr
    cp = clean(raw, out, "--rules", "gopher_quality",
               "--sweep", "gopher_min_mean_word_length@zh=1,2")
    assert ("note: --sweep gopher_min_mean_word_length@zh=1,2: gopher_min_mean_word_length "
            "applies to en only; those values change nothing") in cp.stderr
    cp = clean(raw, out, "--rules", "gopher_quality",
               "--sweep", "gopher_min_mean_word_length@en=1,2")
    assert "note: --sweep" not in cp.stderr


def test_signal_export_reads_the_kept_signals(raw, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    clean(d / "raw", d / "cleaned", "--rules", "tutorial,c4")
    out = tmp_path / "export.parquet"
    cp = clean(d / "raw", d / "cleaned", "--rules", "tutorial,c4", "--export-signals", out)
    m = manifest(d / "cleaned")
    assert m["signals"]["measured"] == {} and m["signals"]["lid_calls_made"] == 0
    t = pq.read_table(out)
    assert t.column_names[:2] == ["id", "verdict"] and "c4.sentence_count" in t.column_names
    ids = pq.read_table(SAMPLE, columns=["id"]).column("id").to_pylist()
    assert t.column("id").to_pylist() == [str(i) for i in ids]          # every document
    verdicts = t.column("verdict").to_pylist()
    for rule, n in m["counts"]["removed"].items():
        assert verdicts.count(rule) == n
    assert verdicts.count(None) == m["counts"]["docs_out"]
    assert f"wrote {out}" in cp.stdout
    assert "language-ID calls made 0, reused " in cp.stdout
    # without kept signals everything is measured, and the line says so
    cp = clean(d / "raw", tmp_path / "fresh", "--rules", "tutorial,c4", "--no-keep-signals",
               "--export-signals", tmp_path / "again.parquet")
    assert "reused 0; signals kept from earlier runs for 0 of" in cp.stdout
    assert pq.read_table(tmp_path / "again.parquet").equals(t)


@pytest.mark.parametrize("pack", ["fineweb", "gopher_quality", "gopher_repetition", "c4"])
def test_each_pack_alone_keeps_what_datatrove_keeps_on_english(tmp_path, pack):
    """The stage, run with one pack, against datatrove's filter run alone, on the sample's
    English documents (bench/datatrove_packs.py: the published defaults)."""
    from datatrove_packs import datatrove_verdict

    t = pq.read_table(SAMPLE, columns=["id", "text", "lang"])
    en = t.filter(pa.compute.equal(t.column("lang"), "en")).select(["id", "text"])
    pq.write_table(en, tmp_path / "en.parquet")
    run_script("download_data.py", "--input", tmp_path / "en.parquet", "--output", tmp_path / "raw")
    clean(tmp_path / "raw", tmp_path / "out", "--rules", pack, "--export-signals",
          tmp_path / "x.parquet")
    ours = dict(zip(*pq.read_table(tmp_path / "x.parquet", columns=["id", "verdict"])
                    .to_pydict().values()))
    theirs = {i: datatrove_verdict(pack, x, i)[0] for i, x in zip(*en.to_pydict().values())}
    agree = sum((ours[i] is None) == kept for i, kept in theirs.items())
    assert agree / len(theirs) >= 0.99, (pack, agree, len(theirs))


def _one_line(cp) -> str:
    errors = [x for x in cp.stderr.splitlines() if x.startswith("error: ")]
    assert cp.returncode == 2 and len(errors) == 1 and "Traceback" not in cp.stderr, cp.stderr
    return errors[0]


_HEAD = """import sys
import numpy as np
from algorithms.cleaning import Rule
def ones(texts):
    return np.ones(len(texts))
def boom(texts):
    raise RuntimeError("boom")
"""
_R = 'RULES = [Rule("x", "d", {signal!r}, {measure}, 0.5, "below", {flag!r}, bins=(0, 1))]'
BAD_RULES = {   # a rule file's body -> what the one-line error says
    "signal taken": (_R.format(signal="chars", measure="ones", flag="--x-min"),
                     "both measure a signal 'chars', differently"),
    "reserved signal": (_R.format(signal="verdict", measure="ones", flag="--x-min"),
                        "its signal 'verdict' is a name the stage uses itself"),
    "stage's flag": (_R.format(signal="xs", measure="ones", flag="--workers"),
                     "conflicting option string: --workers"),
    "flag no dashes": (_R.format(signal="xs", measure="ones", flag="min-x"),
                       "its flag 'min-x' must look like --min-something"),
    "no bins": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min")]',
                "bins must be at least two increasing"),
    "name a path": ('RULES = [Rule("../x", "d", "xs", ones, 0.5, "below", "--x-min", '
                    'bins=(0, 1))]', "its name must be 1 to 100 letters, digits"),
    "no measure": (_R.format(signal="xs", measure="None", flag="--x-min"), "it has no measure"),
    "too many": ('RULES = [Rule(f"x{i}", "d", f"s{i}", ones, 0.5, "below", f"--x{i}", '
                 'bins=(0, 1)) for i in range(130)]', "at most 127 run together"),
    "one short": (_R.format(signal="xs", measure="lambda t: np.ones(len(t) - 1)", flag="--x-min"),
                  "rule 'x': its measure gave 399 values for 400 documents"),
    "strings": (_R.format(signal="xs", measure='lambda t: np.array(["a"] * len(t))',
                          flag="--x-min"), "rule 'x': its measure gave values of type"),
    "NaN": (_R.format(signal="xs", measure="lambda t: np.full(len(t), np.nan)", flag="--x-min"),
            "rule 'x': its measure gave NaN"),
    "raises": (_R.format(signal="xs", measure="boom", flag="--x-min"),
               "rule 'x': its measure raised RuntimeError: boom"),
    "named kept": (_R.replace('"x"', '"kept"').format(signal="xs", measure="ones", flag="--x-min"),
                   "'kept' names the tables' row of the documents no rule removed"),
    "long name": (_R.replace('"x"', '"' + "x" * 300 + '"').format(signal="xs", measure="ones",
                                                                   flag="--x-min"),
                  "its name must be 1 to 100 letters"),
    "settings key": (_R.format(signal="xs", measure="ones", flag="--example-chars"),
                     "its flag --example-chars names one of clean.py's own settings"),
    "shows field": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", bins=(0, 1), '
                    'shows="ends < {x}")]', "its shows template 'ends < {x}' cannot be filled"),
    "infinite bin": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", '
                     'bins=(0, 1, float("inf")))]', "increasing, finite edges"),
    "scale": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", bins=(0, 1), '
              'scale="weird")]', "its scale 'weird' must be 'linear' or 'log'"),
    "languages str": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", bins=(0, 1), '
                      'languages="en")]', "its languages 'en' must be None"),
    "unknown language": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", '
                         'bins=(0, 1), languages=("en", "xx"))]', "'xx' is not a language"),
    "default invalid": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", bins=(0, 1), '
                        'valid=(0, 0.4))]', "its threshold 0.5 is outside its own valid range"),
    "int inf": ('RULES = [Rule("x", "d", "xs", lambda t: np.full(len(t), np.inf), 10, "above", '
                '"--x-max", int, bins=(0, 1))]', "rule 'x' is declared int, but its measure "
                                                 "gave inf"),
    "int fraction": ('RULES = [Rule("x", "d", "xs", lambda t: np.full(len(t), 0.7), 0, "above", '
                     '"--x-max", int, bins=(0, 1))]', "is declared int, but its measure gave 0.7"),
    "exits": ("sys.exit(0)", "bad.py: SystemExit: 0"),   # it exited 0, silently, having done nothing
    "measure exits": (_R.format(signal="xs", measure="lambda t: sys.exit(0)", flag="--x-min"),
                      "rule 'x': its measure raised SystemExit"),
    "measure None": (_R.format(signal="xs", measure="lambda t: None", flag="--x-min"),
                     "rule 'x': its measure gave NoneType 'None', not a list of one number"),
    "one rule, not a list": (_R.format(signal="xs", measure="ones", flag="--x-min")
                             .replace("RULES = [", "RULES = ").rstrip("]"),
                             "RULES is one Rule, not a list of Rule: write RULES = [...]"),
    "a generator": (_R.format(signal="xs", measure="ones", flag="--x-min")
                    .replace("RULES = [", "RULES = (r for r in [") + ")",
                    "RULES is of type generator, not a list of Rule"),
    "valid None": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", bins=(0, 1), '
                   'valid=None)]', "its valid None must be (lowest, highest)"),
    "valid text": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", bins=(0, 1), '
                   'valid=("0", 1))]', "its valid ('0', 1) must be (lowest, highest)"),
    "2-D values": (_R.format(signal="xs", measure="lambda t: np.ones((len(t), 1))",
                             flag="--x-min"),
                   "rule 'x': its measure gave an array of shape (400, 1) for 400 documents"),
    "description not text": ('RULES = [Rule("x", 5, "xs", ones, 0.5, "below", "--x-min", '
                             'bins=(0, 1))]', "its description 5 must be text"),
    "int default fraction": ('RULES = [Rule("x", "d", "xs", ones, 0.5, "below", "--x-min", int, '
                             'bins=(0, 1))]', "its threshold 0.5 is not a whole number, but "
                                              "the rule is declared int"),
    "second language rule": ("from algorithms.cleaning import LanguageRule\n"
                             'RULES = [LanguageRule("lang2", "d", "lc2", None, 0.5, "below", '
                             '"--min-lang2", float, bins=(0, 1))]',
                             "rules 'lang' and 'lang2' are both language rules"),
}


@pytest.mark.parametrize("case", list(BAD_RULES))
def test_a_bad_rule_is_one_line_and_the_output_stays(raw, tmp_path, case):
    """Whatever is wrong with a rule of your own, in its declaration or in what its
    measure returns, the run stops with one line naming it, exit 2, and the output of the
    previous run keeps every byte."""
    body, says = BAD_RULES[case]
    f = tmp_path / "bad.py"
    f.write_text(_HEAD + body + "\n")
    out = tmp_path / "cleaned"
    clean(raw, out, "--rules", "tutorial")
    before = data_files(out)
    line = _one_line(clean(raw, out, "--rules", f"tutorial,{f}", check=False))
    assert says in line, line
    assert data_files(out) == before
    # a measure that fails mid-run fails the same way on a rerun: no resume is promised
    assert "kept in" not in line and "resumes" not in line, line


@pytest.mark.parametrize("flags, says", [
    (["--min-alnum", "nan"], "--min-alnum nan: is not a number"),
    (["--min-chars", "en=100,en=5000"], "names en twice"),
    (["--languages", "EN,zh"], "'EN' is not a language of lid.176.ftz"),
    (["--languages", "en,zh,en"], "--languages en,zh,en: names en twice"),
    (["--sweep", "languages=en,en;zh"], "names en twice"),
    (["--min-chars", "xx=100"], "--min-chars xx=100: 'xx' is not a language"),
    (["--sweep", "min_chars@xx=100,300"], "'xx' is not a language"),
    (["--sweep", "languages=en;en,xx"], "'xx' is not a language"),
    (["--rules", "fineweb", "--fineweb-line-punct", "-5"], "must be between 0 and 1"),
    (["--rules", "gopher_quality", "--gopher-min-words", "-1"], "must be >= 0"),
    (["--rules", "tutorial,tutorial"], "two rules named 'too_short'"),
    (["--rules", "nothing_here.py"], "--rules nothing_here.py: no such file"),
    (["--rules", "fineweb", "--min-chars", "100"],
     "--min-chars is a threshold of the tutorial pack, which this run does not apply"),
    (["--rules", "fineweb", "--sweep", "languages=en"], "expected NAME=V1,V2,..."),
    (["--rules", ","], "--rules '': no rules to run"),
])
def test_bad_thresholds_and_languages_are_one_line(raw, tmp_path, flags, says):
    assert says in _one_line(clean(raw, tmp_path / "cleaned", *flags, check=False))
    assert not (tmp_path / "cleaned").exists()


def test_an_export_that_would_overwrite_or_be_lost_is_refused(raw, tmp_path):
    """--export-signals never writes into the input (it would replace a shard) nor into
    the output or its staging folder (the commit would drop it), nor onto a folder; and a
    sweep, which writes no output, does not take it."""
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    clean(d / "raw", d / "cleaned")
    inputs, outputs = data_files(d / "raw"), data_files(d / "cleaned")
    shard = sorted((d / "raw").glob("*.parquet"))[0]
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "y.parquet").mkdir()
    for dest, says in [(shard, "inside --input"), (d / "cleaned" / "x.parquet", "inside --output"),
                       (d / ".cleaned.partial" / "x.parquet", "inside the staging folder"),
                       # a sweep's store (deleted once a run commits), the previous output
                       # while a commit replaces it, the task logs' folder (replaced whole)
                       (d / ".cleaned.signals" / "x.parquet", "inside the sweeps' signals"),
                       (d / ".cleaned.old" / "x.parquet", "inside the previous output's"),
                       (d / "logs" / "clean" / "x.parquet", "inside the task logs' folder"),
                       (tmp_path / "y.parquet", "is a folder"),
                       (tmp_path / "a_file" / "x.parquet", "is a file"),
                       ("", "name it *.parquet"), (USER_RULE, "name it *.parquet"),
                       ("/proc/x.parquet", "cannot write there")]:
        line = _one_line(clean(d / "raw", d / "cleaned", "--min-chars", "300",
                               "--export-signals", dest, check=False))
        assert (f"--export-signals {dest}: " in line or f"--export-signals {str(dest)!r}: "
                in line) and says in line, line
    line = _one_line(clean(d / "raw", d / "cleaned", "--sweep", "min_chars=100,300",
                           "--export-signals", tmp_path / "x.parquet", check=False))
    assert "a sweep only reports" in line
    assert data_files(d / "raw") == inputs and data_files(d / "cleaned") == outputs
    assert not (tmp_path / "x.parquet").exists()
    assert not (d / ".cleaned.signals").exists() and not (d / ".cleaned.old").exists()


def test_editing_a_constant_of_a_rule_file_measures_its_signal_again(raw, tmp_path):
    """A rule file's function is known by its whole file: a rerun after editing a constant
    it reads (not the function itself) equals a fresh run, instead of reusing the old
    signal."""
    code = ('import numpy as np\nfrom algorithms.cleaning import Rule\nK = {k}\n'
            'def f(texts):\n    return np.full(len(texts), K)\n'
            'RULES = [Rule("const_rule", "c", "const_sig", f, 0.5, "below", "--const-min", '
            'bins=(0.0, 1.0))]\n')
    _an_edited_constant_is_measured_again(raw, tmp_path, tmp_path / "const_rule.py",
                                          lambda k: code.format(k=k).encode())


def _an_edited_constant_is_measured_again(raw: Path, tmp_path: Path, f: Path, text) -> None:
    """A rule file whose rule is a constant K (text(K): the file's bytes) removes nothing
    at K=1; edited to K=0, the rerun measures the signal again (it removes every document)
    and equals a fresh run."""
    f.write_bytes(text(1.0))
    clean(raw, tmp_path / "a", "--rules", f"tutorial,{f}")
    assert manifest(tmp_path / "a")["counts"]["removed"].get("const_rule", 0) == 0
    f.write_bytes(text(0.0))
    clean(raw, tmp_path / "a", "--rules", f"tutorial,{f}")
    m = manifest(tmp_path / "a")
    assert m["signals"]["measured"] == {"const_sig": m["signals"]["tasks"]}
    assert m["counts"]["docs_out"] == 0
    clean(raw, tmp_path / "fresh", "--rules", f"tutorial,{f}")
    assert data_files(tmp_path / "a") == data_files(tmp_path / "fresh")


def test_a_sweep_that_measured_a_new_signal_keeps_it_for_the_next_run(raw, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    clean(d / "raw", d / "cleaned")
    clean(d / "raw", d / "cleaned", "--rules", "tutorial,c4", "--sweep", "c4_min_sentences=3,5")
    assert (d / ".cleaned.signals" / "signals" / "index.json").exists()
    clean(d / "raw", d / "cleaned", "--rules", "tutorial,c4")
    assert manifest(d / "cleaned")["signals"]["measured"] == {}     # found, not measured


def test_a_threshold_for_a_language_the_rule_skips_says_so(raw, tmp_path):
    cp = clean(raw, tmp_path / "cleaned", "--rules", "tutorial,gopher_quality",
               "--gopher-max-mean-word-length", "en=10,zh=20")
    assert ("note: --gopher-max-mean-word-length zh=...: gopher_max_mean_word_length applies "
            "to en only; that value changes nothing") in cp.stderr


def test_pack_flags_name_every_built_in_rules_flag():
    """The flag -> pack table clean.py reads to say which pack a stray flag belongs to,
    made without building the packs, agrees with the packs themselves."""
    from algorithms import cleaning

    built = {}
    for pack in cleaning.pack_names():
        for r in cleaning.load_rules(pack):
            built.setdefault(r.flag, pack)
    assert cleaning.pack_flags() == built
    # clean.py looks the table up only for flags of these shapes: every pack flag has one
    assert all(f.startswith(("--fineweb-", "--gopher-", "--c4-", "--min-", "--max-", "--decont-"))
               for f in built)


def test_a_rule_file_edited_after_a_failed_run_is_not_resumed(raw, tmp_path):
    """A run stopped by a rule of your own promises no resume (a rerun would fail again); after
    the file is edited, the rerun must not reuse what the old code measured: its output
    equals a fresh run's, and so does the manifest's record of the rule's code."""
    f = tmp_path / "flaky.py"
    code = ('import numpy as np\nfrom algorithms.cleaning import Rule\nK = {k}\n'
            'def f(texts):\n    if len(texts) == {fail}:\n        raise RuntimeError("bug")\n'
            '    return np.array([(t or "").count("e") / K for t in texts.to_pylist()])\n'
            'RULES = [Rule("flaky", "c", "flaky_sig", f, 0.5, "below", "--flaky-min", '
            'bins=(0.0, 1.0))]\n')
    sizes = [pq.ParquetFile(s).metadata.num_rows for s in sorted(raw.glob("*.parquet"))]
    f.write_text(code.format(k=100.0, fail=sizes[-1]))   # the last shard's task fails
    out = tmp_path / "out"
    line = _one_line(clean(raw, out, "--rules", f"tutorial,{f}", check=False))
    assert "its measure raised RuntimeError: bug" in line and "kept in" not in line
    f.write_text(code.format(k=10.0, fail=-1))
    clean(raw, out, "--rules", f"tutorial,{f}")
    clean(raw, tmp_path / "fresh", "--rules", f"tutorial,{f}")
    assert data_files(out) == data_files(tmp_path / "fresh")
    m = manifest(out)
    assert m["config"]["rule_code"] == manifest(tmp_path / "fresh")["config"]["rule_code"]
    assert set(m["config"]["rule_code"]) == {"flaky"}
    clean(raw, tmp_path / "tutorial")   # no rule file: no record of one
    assert "rule_code" not in manifest(tmp_path / "tutorial")["config"]


def test_partials_and_callable_objects_keep_their_signal_across_runs(raw, tmp_path):
    """A measure made with functools.partial, or a callable object, is known by its code
    and arguments, never by its address: an unchanged rerun measures nothing, and two
    fresh runs keep the same signal index. An infinite value is written to the examples
    as "inf" (strict JSON)."""
    f = tmp_path / "partial_rule.py"
    f.write_text(
        "import functools\nimport numpy as np\nfrom algorithms.cleaning import Rule\n"
        "def count(texts, ch):\n    return np.array([(t or '').count(ch) for t in texts.to_pylist()], float)\n"
        "class Ratio:\n    def __call__(self, texts):\n"
        "        n = np.array([len(t or '') for t in texts.to_pylist()], float)\n"
        "        with np.errstate(divide='ignore'):\n"
        "            return np.where(n > 300, np.inf, 1.0 / np.maximum(n, 1))\n"
        "RULES = [Rule('dots', 'd', 'dot_count', functools.partial(count, ch='.'), 1000, 'above', "
        "'--max-dots', bins=(0.0, 10.0, 1e6)),\n"
        "         Rule('ratio', 'r', 'ratio_sig', Ratio(), 1.0, 'above', '--max-ratio', "
        "bins=(0.0, 1.0, 2.0))]\n")
    for out in ("a", "b"):
        clean(raw, tmp_path / out, "--rules", f"tutorial,{f}")
    assert data_files(tmp_path / "a") == data_files(tmp_path / "b")
    cp = clean(raw, tmp_path / "a", "--rules", f"tutorial,{f}")
    assert manifest(tmp_path / "a")["signals"]["measured"] == {}, cp.stdout
    removed = tmp_path / "a" / "report" / "removed_ratio.jsonl"
    lines = removed.read_text().splitlines()
    assert lines
    for x in lines:   # strict JSON: no bare Infinity
        e = json.loads(x, parse_constant=lambda c: pytest.fail(f"{c} in {removed}"))
        assert e["value"] == {"ratio_sig": "inf"}


def test_a_sweep_of_an_edited_rule_file_shows_as_stale(raw, tmp_path):
    """report.html marks a sweep made with a rule file's old code as stale once the
    output was made with the edited file (the config's rule_code moved)."""
    d = tmp_path / "data"
    shutil.copytree(raw, d / "raw")
    f = tmp_path / "ends.py"
    f.write_text(USER_RULE.read_text())
    clean(d / "raw", d / "cleaned", "--rules", f"tutorial,{f}", "--sweep", "min_line_ends=0.2,0.3")
    run_script("report.py", "--data-dir", d, "--output", d / "r1.html")
    assert "This sweep was run with other settings" not in (d / "r1.html").read_text()
    f.write_text(USER_RULE.read_text().replace('ENDS = tuple(".!?', 'ENDS = tuple("!?'))
    clean(d / "raw", d / "cleaned", "--rules", f"tutorial,{f}")
    run_script("report.py", "--data-dir", d, "--output", d / "r2.html")
    page = (d / "r2.html").read_text()
    assert "This sweep was run with other settings" in page and "rule_code" in page


def test_built_in_rules_pass_the_declaration_check_and_settings_are_reserved(raw, tmp_path):
    """Every built-in rule passes the check a rule file's rules get; and every setting
    clean.py records in its config beside the rules' thresholds is a name no rule's flag
    may take (rules.RESERVED_KEYS), so a new setting cannot be forgotten there."""
    from algorithms import cleaning, rules

    for pack in cleaning.pack_names():
        for r in cleaning.load_rules(pack):   # (the language rule's signal is the stage's)
            if not isinstance(r, rules.LanguageRule):
                assert rules.declaration_error(r) is None, (pack, r.name)
    clean(raw, tmp_path / "out", "--rules", f"tutorial,fineweb,{USER_RULE}")
    config = manifest(tmp_path / "out")["config"]
    rule_keys = {r.key for p in ("tutorial", "fineweb", str(USER_RULE))
                 for r in cleaning.load_rules(p)}
    assert set(config) - rule_keys <= set(rules.RESERVED_KEYS), set(config) - rule_keys
    assert "rule_code" in config


def test_a_rule_declared_with_lists_arrays_or_a_dataclass_measure_sweeps(raw, tmp_path):
    """A rule's bins as a numpy array or a list, its languages as a list, and a measure
    that is a dataclass instance (unhashable, as dataclasses are by default) run, and
    sweep: the sweep's row at the run's threshold removes what the run removed."""
    f = tmp_path / "loose_rule.py"
    f.write_text(
        "from dataclasses import dataclass\nimport numpy as np\n"
        "from algorithms.cleaning import Rule\n"
        "@dataclass\nclass Count:\n    ch: str\n"
        "    def __call__(self, texts):\n"
        "        return np.array([(t or '').count(self.ch) for t in texts.to_pylist()], float)\n"
        "RULES = [Rule('few_dots', 'd', 'dots', Count('.'), 3.0, 'below', '--min-dots',\n"
        "              bins=np.linspace(0, 100, 11), languages=['en']),\n"
        "         Rule('many_commas', 'd', 'commas', Count(','), 500.0, 'above', '--max-commas',\n"
        "              bins=[0.0, 10.0, 1000.0])]\n")
    out = tmp_path / "cleaned"
    clean(raw, out, "--rules", f"tutorial,{f}")
    removed = manifest(out)["counts"]["removed"]["few_dots"]
    assert removed > 0
    cp = clean(raw, out, "--rules", f"tutorial,{f}", "--sweep", "min_dots=1,3",
               "--sweep", "max_commas=100,500", check=False)
    assert cp.returncode == 0 and "Traceback" not in cp.stderr, cp.stderr
    sweeps = json.loads((out / "report" / "sweep.json").read_text())["sweeps"]
    assert [v["removed"]["few_dots"] for v in sweeps[0]["values"]][1] == removed


def test_a_rule_file_may_define_a_dataclass_with_postponed_annotations(raw, tmp_path):
    """`from __future__ import annotations` with a @dataclass is ordinary Python; the
    dataclass machinery looks its module up in sys.modules, so the rule file loads as a
    module that is there while it runs."""
    f = tmp_path / "dc_rule.py"
    f.write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\n"
        "import numpy as np\nfrom algorithms.cleaning import Rule\n"
        "@dataclass(frozen=True)\nclass Count:\n    ch: str\n"
        "    def __call__(self, texts):\n"
        "        return np.array([(t or '').count(self.ch) for t in texts.to_pylist()], float)\n"
        "RULES = [Rule('few_dots', 'd', 'dots', Count('.'), 3.0, 'below', '--min-dots',\n"
        "              bins=(0.0, 10.0, 100.0))]\n")
    cp = clean(raw, tmp_path / "cleaned", "--rules", f"tutorial,{f}", check=False)
    assert cp.returncode == 0, cp.stderr
    assert manifest(tmp_path / "cleaned")["counts"]["removed"]["few_dots"] > 0


def test_editing_which_library_function_a_rule_file_uses_measures_again(raw, tmp_path):
    """A rule file whose measure is not its own function (pyarrow's utf8_length, whose
    source is the same generated wrapper as binary_length's): switching it to another is
    an edit of the file, and the rerun equals a fresh run instead of reusing the old
    signal; the manifest records the file's code for it."""
    f = tmp_path / "length_rule.py"
    code = ("import pyarrow.compute as pc\nfrom algorithms.cleaning import Rule\n"
            "RULES = [Rule('long', 'd', 'length', pc.{fn}, 1000, 'above', '--max-length', int,\n"
            "              bins=(0.0, 1e3, 1e6))]\n")
    f.write_text(code.format(fn="utf8_length"))
    out = tmp_path / "cleaned"
    clean(raw, out, "--rules", f"tutorial,{f}")
    chars = manifest(out)["counts"]["removed"]["long"]
    f.write_text(code.format(fn="binary_length"))
    clean(raw, out, "--rules", f"tutorial,{f}")
    m = manifest(out)
    assert m["signals"]["measured"] == {"length": m["signals"]["tasks"]}
    assert m["counts"]["removed"]["long"] > chars       # Chinese text: 3 bytes a character
    clean(raw, tmp_path / "fresh", "--rules", f"tutorial,{f}")
    assert data_files(out) == data_files(tmp_path / "fresh")
    assert set(m["config"]["rule_code"]) == {"long"}


def test_editing_a_rule_file_in_another_encoding_measures_its_signal_again(raw, tmp_path):
    """A rule file in Latin-1 (declared by its coding line, as Python allows) is known by
    its bytes like any other: editing a constant in it invalidates its kept signal."""
    code = ('# -*- coding: latin-1 -*-\nimport numpy as np\nfrom algorithms.cleaning import Rule\n'
            'NAME = "r\xe9sum\xe9"\nK = {k}\n'
            'def f(texts):\n    return np.full(len(texts), K)\n'
            'RULES = [Rule("const_rule", "c", "const_sig", f, 0.5, "below", "--const-min", '
            'bins=(0.0, 1.0))]\n')
    _an_edited_constant_is_measured_again(raw, tmp_path, tmp_path / "latin_rule.py",
                                          lambda k: code.format(k=k).encode("latin-1"))


def test_an_export_leaves_the_files_beside_it_alone(raw, tmp_path):
    """Writing an export tries its folder first and writes it under a temporary name:
    neither may be a name a file of the user's already has (x.parquet.probe,
    x.parquet.tmp), which would be truncated or replaced."""
    ex = tmp_path / "exports"
    ex.mkdir()
    mine = {ex / "x.parquet.probe": b"notes", ex / "x.parquet.tmp": b"draft"}
    for p, b in mine.items():
        p.write_bytes(b)
    clean(raw, tmp_path / "cleaned", "--export-signals", ex / "x.parquet")
    assert {p: p.read_bytes() for p in mine if p.exists()} == mine
    assert sorted(p.name for p in ex.iterdir()) == ["x.parquet", "x.parquet.probe",
                                                    "x.parquet.tmp"]
    # made like any new file (a private temporary file's mode would stay on the export)
    new = ex / "new_file"
    new.touch()
    assert (ex / "x.parquet").stat().st_mode == new.stat().st_mode


def _rerun_with_immutable(raw: Path, tmp_path: Path, which: str):
    """clean with an export, then again at --min-chars 600 with `which` ("out": the output
    folder, "export": the export file) immutable: (output, export, the export's bytes
    before, the second run)."""
    import subprocess

    out, ex = tmp_path / "cleaned", tmp_path / "exports" / "x.parquet"
    clean(raw, out, "--export-signals", ex)
    before = ex.read_bytes()
    fixed = out if which == "out" else ex
    if subprocess.run(["chattr", "+i", str(fixed)], capture_output=True).returncode:
        pytest.skip("chattr +i is not permitted here")
    try:
        cp = clean(raw, out, "--min-chars", "600", "--export-signals", ex, check=False)
    finally:
        subprocess.run(["chattr", "-i", str(fixed)], check=True)
    return out, ex, before, cp


def test_a_run_whose_commit_fails_leaves_the_previous_export(raw, tmp_path):
    """The export goes in place after the output is committed: a run that cannot commit
    (an output folder that cannot be renamed) leaves the previous export with the previous
    output, and no temporary file beside it. The next run that commits replaces both."""
    out, ex, before, cp = _rerun_with_immutable(raw, tmp_path, "out")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stderr.strip().splitlines()[-1] == (
        f"error: {out}: cannot be replaced (Operation not permitted); {out} is unchanged; "
        "fix this and rerun the same command (it resumes)")
    assert ex.read_bytes() == before
    assert [p.name for p in ex.parent.iterdir()] == ["x.parquet"]
    # the finished tasks' markers and results wait in the staging folder: the rerun resumes
    staging = tmp_path / ".cleaned.partial"
    assert list(staging.glob("_logs/*/completions/*")) and (staging / "_results").is_dir()
    cp = clean(raw, out, "--min-chars", "600", "--export-signals", ex)
    assert "resuming in" in cp.stderr
    assert not [p for p in out.iterdir() if p.name.startswith("_")]   # no work files
    verdicts = pq.read_table(ex, columns=["verdict"]).column(0).to_pylist()
    assert ex.read_bytes() != before and verdicts.count("too_short") > 0
    assert verdicts.count("too_short") > pq.read_table(
        pa.BufferReader(before), columns=["verdict"]).column(0).to_pylist().count("too_short")


def test_an_export_that_cannot_be_replaced_after_the_commit_says_so(raw, tmp_path):
    """The output is committed before the export goes in place: an export file that cannot
    be replaced (immutable) was 'cannot write' with a traceback-free line that did not say
    the output was written; now the line says both, and no temporary file is left."""
    out, ex, before, cp = _rerun_with_immutable(raw, tmp_path, "export")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stderr.strip().splitlines()[-1] == (
        f"error: {ex}: cannot be replaced (Operation not permitted); {ex} is unchanged, but "
        f"{out} is written; fix this and rerun the same command")
    assert ex.read_bytes() == before and [p.name for p in ex.parent.iterdir()] == ["x.parquet"]
    assert json.loads((out / "manifest.json").read_text())["config"]["min_chars"] == 600
    cp = clean(raw, out, "--min-chars", "600", "--export-signals", ex)
    assert ex.read_bytes() != before


def test_a_hand_edited_signals_index_is_not_used(raw, tmp_path):
    """The rows and signal versions signals/index.json lists are covered by no file's
    digest: an index that claims a signal its file lacks (edited by hand) stopped the next
    run with a KeyError traceback. An index that is not the one the run recorded in its
    manifest is not used: its signals are measured again, and the output is a fresh run's."""
    out = tmp_path / "a"
    clean(raw, out, "--rules", "tutorial,fineweb")
    clean(raw, tmp_path / "fresh", "--rules", "tutorial,fineweb,gopher_quality")
    claims = json.loads((tmp_path / "fresh" / "signals" / "index.json").read_text())
    version = claims["files"][0]["signals"]["gopher_quality.word_count"]
    idx = out / "signals" / "index.json"
    j = json.loads(idx.read_text())
    for e in j["files"]:
        e["signals"]["gopher_quality.word_count"] = version
    idx.write_text(json.dumps(j, indent=2))
    cp = clean(raw, out, "--rules", "tutorial,fineweb,gopher_quality")
    assert "index.json is not the one the run that wrote it recorded in its manifest" in cp.stderr
    assert data_files(out) == data_files(tmp_path / "fresh")
    # the next run reads the index the last one recorded: nothing measured
    cp = clean(raw, out, "--rules", "tutorial,fineweb,gopher_quality")
    assert manifest(out)["signals"]["tasks_reused"] == manifest(out)["signals"]["tasks"]
