"""clean.py: the five rules, offline language ID, per-rule accounting, the stage contract.

Everything runs on real text (the bundled sample), the real lid.176.ftz and real parquet.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE, run_script

import clean
from algorithms import cleaning, langid
from pipeline import clean_report, clean_task
from pipeline.errors import StageError
from pipeline.shards import list_shards
from pipeline.staging import StageRun
from pipeline.units import plan_units

# which rule each planted problem of the sample is meant for
MEANT_FOR = {"too_short": "too_short", "dup_lines": "dup_lines", "char_repeat": "char_repeat",
             "low_alnum": "low_alnum", "other_lang": "lang", "garbled": "lang"}


@pytest.fixture(scope="module")
def sample_rows() -> list[dict]:
    return pq.read_table(SAMPLE).to_pylist()


@pytest.fixture(scope="module")
def model():
    return langid.load_lid(langid.default_lid_model())


@pytest.fixture(scope="module")
def cleaned(sample_layout, tmp_path_factory) -> Path:
    """data/ with raw/ from the sample and cleaned/ from `clean.py --report-all --workers 2`."""
    d = tmp_path_factory.mktemp("clean") / "data"
    shutil.copytree(sample_layout, d)
    cp = run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                    "--report-all", "--workers", "2")
    (d / "stdout.txt").write_text(cp.stdout)
    return d


def _ids(folder: Path) -> list[str]:
    return [i for f in sorted(folder.glob("*.parquet"))
            for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]


def _tutorial_dup_ratio(text: str) -> float:
    lines = text.split("\n")  # section 2.3, blank lines included
    return 1 - len(set(lines)) / len(lines)


# --- the rules ---------------------------------------------------------------------------

def test_dup_lines_keeps_prose_with_paragraph_breaks(sample_rows, model):
    prose = [r["text"] for r in sample_rows
             if r["planted"] == "" and r["lang"] == "en" and "\n\n" in r["text"]]
    assert len(prose) > 50
    # the tutorial's version counts the blank lines between paragraphs as duplicates ...
    trapped = [t for t in prose if _tutorial_dup_ratio(t) > 0.30]
    assert len(trapped) > len(prose) // 3
    # ... ours counts non-blank lines only and keeps every one of them
    assert all(cleaning.dup_line_share(t) <= 0.30 for t in prose)
    assert all(cleaning.first_rule(t, cleaning.Recipe(), model)[0] is None for t in trapped)


def test_dup_lines_catches_repeated_navigation():
    body = [f"Paragraph {i} explains one more detail of the configuration file." for i in range(6)]
    nav = "Home | About | Contact"
    text = "\n\n".join(x for b in body for x in (b, nav))
    assert cleaning.dup_line_share(text) == pytest.approx(5 / 12)
    assert cleaning.dup_line_share("\n\n\n") == 0.0


def test_char_repeat_matches_the_tutorial_regex(sample_rows):
    """2.3's regex as written: its `.` matches anything but a newline, so 60 blank lines
    in a row are no run, and 51 spaces or carriage returns are."""
    rx = re.compile(r"(.)\1{50,}")
    texts = [r["text"] for r in sample_rows] + ["a" * 51, "a" * 50, "", "=" * 80 + "\ntext",
                                               "text" + "\n" * 60 + "more", "\n" * 200,
                                               " " * 51, "\r" * 51, "\r\n" * 60, "\n" * 60 + "b" * 51]
    for t in texts:
        assert (cleaning.longest_char_run(t) > 50) == bool(rx.search(t)), t[:80]
    assert cleaning.longest_char_run("xx" + "=" * 80 + "yy") == 80
    assert cleaning.longest_char_run("a\n\n\n\nbb") == 2 and cleaning.longest_char_run("\n" * 9) == 0


def test_low_alnum_counts_chinese_the_isascii_trap(sample_rows):
    zh = [r["text"] for r in sample_rows if r["planted"] == "" and r["lang"] == "zh"]
    assert len(zh) > 300
    # str.isalnum() is true for Chinese characters: the Chinese corpus passes low_alnum
    assert all(cleaning.alnum_share(t) >= 0.5 for t in zh)
    # the slip of 2.3, `c.isascii() and c.isalnum()`, would remove nearly all of it
    ascii_share = [sum(c.isascii() and c.isalnum() for c in t) / len(t) for t in zh]
    assert sum(s < 0.5 for s in ascii_share) > 0.9 * len(zh)
    assert cleaning.alnum_share("机器学习是人工智能的一个分支") == 1.0
    assert cleaning.alnum_share("|---|---|") == 0.0


def test_language_id_offline_on_real_text(sample_rows, model):
    th = cleaning.Recipe()
    for lang in ("en", "zh", "ja", "de", "fr"):
        docs = [r["text"] for r in sample_rows if r["lang"] == lang and len(r["text"]) > 600][:10]
        assert docs, lang
        got = [cleaning.detect_lang(model, t, th) for t in docs]
        right = sum(g[0] == lang for g in got)
        assert right >= 0.9 * len(docs), (lang, got)
    # newlines are replaced before predict (fastText refuses them)
    assert langid.predict_lang(model, "第一行。\n\n第二行是中文的文本，用于测试。")[0] == "zh"


def test_end_sampling_agrees_with_full_text(sample_rows, model):
    """--lid-chars only skips the middle of a document both of whose ends are confidently
    accepted; on the sample it decides like full-text prediction for every document."""
    sampled, full = cleaning.Recipe(lid_chars=200), cleaning.Recipe(lid_chars=0)
    reach = [r["text"] for r in sample_rows
             if cleaning.first_rule(r["text"], full, model)[0] in (None, "lang")]
    assert len(reach) > 1000
    differ = [t[:60] for t in reach if (cleaning.first_rule(t, sampled, model)[0] is None)
              != (cleaning.first_rule(t, full, model)[0] is None)]
    assert differ == []
    long_docs = sum(len(t) > 2 * sampled.lid_chars for t in reach)
    assert long_docs > len(reach) // 2  # the shortcut is really exercised


def test_every_planted_problem_caught_by_its_rule(sample_rows, model):
    th = cleaning.Recipe()
    got = Counter((r["planted"], cleaning.first_rule(r["text"], th, model)[0]) for r in sample_rows)
    for planted, rule in MEANT_FOR.items():
        n = sum(v for (p, _), v in got.items() if p == planted)
        assert n > 0 and got[(planted, rule)] == n, (planted, got)
    ordinary = [r for r in sample_rows if r["planted"] not in MEANT_FOR]
    kept = got[("", None)] + got[("exact_dup", None)] + got[("near_dup", None)] + got[("near_dup_low", None)]
    assert kept == len(ordinary)  # every ordinary document is kept


# --- the stage ---------------------------------------------------------------------------

def test_stage_on_sample_counts_and_reports(cleaned, sample_rows):
    out = cleaned / "cleaned"
    m = json.loads((out / "manifest.json").read_text())
    c = m["counts"]
    planted = Counter(r["planted"] for r in sample_rows)
    assert c["docs_in"] == len(sample_rows)
    assert c["removed"] == {"too_short": planted["too_short"], "dup_lines": planted["dup_lines"],
                            "char_repeat": planted["char_repeat"], "low_alnum": planted["low_alnum"],
                            "lang": planted["other_lang"] + planted["garbled"]}
    assert c["docs_in"] == c["docs_out"] + sum(c["removed"].values())
    kept = set(_ids(out))
    assert kept == {r["id"] for r in sample_rows if r["planted"] not in MEANT_FOR}
    assert c["bytes_out"] < c["bytes_in"]
    # all input columns survive; one output shard per task, only data shards at the top level
    raw_shard = next((cleaned / "raw").glob("*.parquet"))
    assert pq.read_schema(out / "part-00000.parquet") == pq.read_schema(raw_shard)
    units = plan_units(list_shards(cleaned / "raw"))
    assert sorted(p.name for p in out.glob("*.parquet")) == [u.name for u in units]
    assert {r["rule"] for r in m["rules"]} == {r.name for r in cleaning.TUTORIAL}
    assert m["config"]["lid_chars"] == cleaning.Recipe().lid_chars
    assert "workers" not in m["config"]

    stats = json.loads((out / "report" / "clean_stats.json").read_text())
    lang = next(r for r in stats["rules"] if r["rule"] == "lang")
    assert lang["removed"] == c["removed"]["lang"]
    assert lang["alone"] >= lang["removed"] and lang["warn"] is False
    assert "first rule" in stats["accounting"]
    md = (out / "report" / "clean_stats.md").read_text()
    assert "| too_short |" in md and "| kept |" in md and "FIRST rule" in md
    stdout = (cleaned / "stdout.txt").read_text()
    assert re.search(r"^kept\s+1,8\d\d\s+8\d\.\d\d%", stdout, re.M), stdout
    assert "alone" in stdout

    for rule in (r.name for r in cleaning.TUTORIAL):
        ex = [json.loads(x) for x in (out / "report" / f"removed_{rule}.jsonl").read_text().splitlines()]
        assert 0 < len(ex) <= 50
        by_id = {r["id"]: r for r in sample_rows}
        for e in ex:
            assert MEANT_FOR[by_id[e["id"]]["planted"]] == rule
            assert e["text"] == by_id[e["id"]]["text"][:clean_report.EXAMPLE_CHARS]  # in characters
            assert e["value"]
    ex = json.loads((out / "report" / "removed_lang.jsonl").read_text().splitlines()[0])
    assert set(ex["value"]) == {"lang", "conf"}


def test_output_identical_for_any_workers(cleaned, tmp_path):
    run_script("clean.py", "--input", cleaned / "raw", "--output", tmp_path / "c1",
               "--report-all", "--workers", "1")
    a = json.loads((cleaned / "cleaned" / "manifest.json").read_text())
    b = json.loads((tmp_path / "c1" / "manifest.json").read_text())
    assert a["files"] == b["files"] and a["output_fingerprint"] == b["output_fingerprint"]
    for f in ("clean_stats.json", "removed_lang.jsonl", "removed_dup_lines.jsonl"):
        assert (cleaned / "cleaned" / "report" / f).read_bytes() == (tmp_path / "c1" / "report" / f).read_bytes()


def test_output_and_examples_independent_of_batch_size(cleaned, tmp_path, monkeypatch):
    """A task reads READ_ROWS rows a batch: with 7-row batches (examples and sweep
    examples then span many batches) the output, the report and a sweep are the same."""
    def sweep(out: Path) -> dict:
        assert clean.main(["--input", str(cleaned / "raw"), "--output", str(out), "--workers", "1",
                           "--sweep", "min_chars=200,400", "--sweep", "min_lang_conf=0.5,0.9"]) == 0
        data = json.loads((out / "report" / "sweep.json").read_text())
        data.pop("seconds")
        return data

    default = sweep(tmp_path / "s1")
    monkeypatch.setattr(clean_task, "READ_ROWS", 7)
    assert sweep(tmp_path / "s7") == default
    assert any(c["examples"] for s in default["sweeps"] for c in s["changes"])
    assert clean.main(["--input", str(cleaned / "raw"), "--output", str(tmp_path / "c7"),
                       "--report-all", "--workers", "1"]) == 0
    a = json.loads((cleaned / "cleaned" / "manifest.json").read_text())
    b = json.loads((tmp_path / "c7" / "manifest.json").read_text())
    assert a["files"] == b["files"] and a["counts"] == b["counts"]
    for f in ("clean_stats.json", "removed_lang.jsonl", "removed_too_short.jsonl",
              "removed_dup_lines.jsonl"):
        assert (cleaned / "cleaned" / "report" / f).read_bytes() == (tmp_path / "c7" / "report" / f).read_bytes()


def test_warns_loudly_when_a_rule_removes_too_much(cleaned, tmp_path):
    # an over-strict alnum threshold behaves like the isascii slip: most documents go
    cp = run_script("clean.py", "--input", cleaned / "raw", "--output", tmp_path / "c",
                    "--min-alnum", "0.95", "--workers", "2")
    assert "WARNING: low_alnum removes" in cp.stderr and "removed_low_alnum.jsonl" in cp.stderr
    stats = json.loads((tmp_path / "c" / "report" / "clean_stats.json").read_text())
    flags = {r["rule"]: r["warn"] for r in stats["rules"]}
    assert flags["low_alnum"] is True and flags["too_short"] is False


def test_rerun_replaces_atomically_and_marks_downstream_stale(cleaned, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(cleaned, d)
    out = d / "cleaned"
    # a downstream stage built from the current output
    down = StageRun("dedup_exact", d / "dedup_exact", {"x": 1}, input_manifest=out / "manifest.json")
    (down.staging / "part-00000.parquet").write_bytes(b"")
    down.commit(files=[], counts={"docs_in": 0})
    before = (out / "manifest.json").read_text()

    # bad reruns fail with one line and leave the previous output untouched
    for bad in (["--max-dup-lines", "1.5"], ["--lid-model", str(tmp_path / "none.bin")],
                ["--languages", ","], ["--input", str(tmp_path / "missing")]):
        cp = run_script("clean.py", "--input", d / "raw", "--output", out, *bad, check=False)
        assert cp.returncode == 2 and "Traceback" not in cp.stderr, (bad, cp.stderr)
        assert cp.stderr.startswith("error: ") and len(cp.stderr.strip().splitlines()) == 1
        assert (out / "manifest.json").read_text() == before

    cp = run_script("clean.py", "--input", d / "raw", "--output", out, "--min-chars", "1000",
                    "--workers", "2")
    assert "stale" in cp.stderr and "dedup_exact" in cp.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["min_chars"] == 1000
    assert m["counts"]["removed"]["too_short"] > 40
    assert set(_ids(out)) <= set(_ids(cleaned / "cleaned"))
    assert not list(d.glob(".*")), list(d.glob(".*"))  # no staging or old copy left behind
    with pytest.raises(StageError, match="stale"):
        StageRun("dedup_minhash", d / "dedup", {}, input_manifest=d / "dedup_exact" / "manifest.json")


def test_lid_model_flag_takes_a_model_file(cleaned, tmp_path):
    model = tmp_path / "lid.176.ftz"
    shutil.copy(langid.default_lid_model(), model)
    run_script("clean.py", "--input", cleaned / "raw", "--output", tmp_path / "c",
               "--lid-model", model, "--lid-chars", "0", "--workers", "2")
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    ref = json.loads((cleaned / "cleaned" / "manifest.json").read_text())
    assert m["config"]["lid_model"] == ref["config"]["lid_model"]  # recorded by content
    assert m["counts"] == ref["counts"]  # full-text LID decides like end-sampling here


def test_bench_smoke(sample_rows):
    import bench_clean

    res = bench_clean.run([r["text"] for r in sample_rows[:40]], quick=True)
    assert res["bench"] == "clean" and res["docs"] == 40
    for row in res["rows"]:
        assert {"name", "mb_per_s_per_core", "ratio", "target", "ok"} <= set(row)
        assert row["mb_per_s_per_core"] > 0
    ours = next(r for r in res["rows"] if r.get("ours"))
    assert "1.5x" in ours["target"] and isinstance(ours["ok"], bool)
    # every rule pack: against the tutorial's clean (information), then against the
    # reference doing the same rules (datatrove's filters after it), which has the target
    alone, ref, packs = res["rows"][-3:]
    assert "every rule pack" in alone["name"] and alone["target"] is None
    assert alone["ratio"] > 0 and alone["ok"] is None
    assert "datatrove" in ref["name"] and "(1 block," in ref["name"]
    assert ref["mb_per_s_per_core"] < res["rows"][0]["mb_per_s_per_core"]  # more work
    assert "every rule pack" in packs["name"] and "5.0x" in packs["target"]
    assert packs["ratio"] == packs["mb_per_s_per_core"] / ref["mb_per_s_per_core"]
    assert isinstance(packs["ok"], bool)
    # decisions compared with the real fastText on the full text: equal here
    assert res["lang_compared"] > 20 and res["lang_differ"] == 0


def test_compiled_signals_equal_the_python_definitions(sample_rows):
    """algorithms.cleaning_fast measures a whole batch from its UTF-8 bytes; it must give exactly
    what clean.py's readable functions give on each str."""
    import random

    import pyarrow as pa

    from algorithms.cleaning_fast import cheap_signals

    rng = random.Random(0)
    pieces = ["a", "b", " ", "\n", "\t", "\r", "\u3000", "\u00a0", "\x1c", "\x85", "中", "😀",
              "Σ", "é", "\u2028", "=", "\x00", "\n\n", "  ", "ab\r\n"]
    texts = [r["text"] for r in sample_rows]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    texts += ["", "\n", " \n ", "x", "aaa\naaa\n\naaa", "=" * 80, "a" + "\n" * 80 + "bb",
              "\n" * 70, "\n" * 60 + "=" * 55 + "\n" * 3]
    # many lines (the tables grow), long lines differing only past their first 8 bytes or
    # in their last byte, and lines stripped of multi-byte whitespace
    texts += ["\n".join(f"{'same prefix ' * (i % 3)}line {i % 700}" for i in range(5000)),
              "\n".join(["0123456789abcdef" * 4 + c for c in "abcab"] * 3),
              "\u3000 x \u2028\n\u00a0x\u3000\n x\x85"]
    col = pa.array(texts + [None], pa.string())
    chars, dup, run, alnum = cheap_signals(col.slice(1))   # a sliced array, and a null
    for i, t in enumerate(texts[1:] + [""]):
        assert (chars[i], dup[i], run[i], alnum[i]) == (
            len(t), cleaning.dup_line_share(t), cleaning.longest_char_run(t), cleaning.alnum_share(t)), t[:60]


def test_histogram_by_group_equals_numpy_per_group():
    """The report's histograms, one pass per signal, count exactly what np.histogram does
    group by group: edges in the right bin, the last edge in the last bin, values past
    the ends clipped into the end bins, NaN nowhere."""
    rng = np.random.default_rng(3)
    kept = len(cleaning.TUTORIAL)
    for name, edges in clean_report.hist_bins(cleaning.Recipe()).items():
        values = np.concatenate([rng.uniform(-1, edges[-1] * 1.5, 5000), edges, [np.nan] * 3])
        group = rng.integers(0, kept + 1, len(values))
        got = cleaning.histogram(edges, values, group, kept + 1)
        for g in range(kept + 1):
            v = np.clip(values[group == g], edges[0], edges[-1])
            want = np.histogram(v[~np.isnan(v)], edges)[0]
            assert got[g].tolist() == want.tolist(), (name, g)
        assert cleaning.histogram(edges, values).sum() == len(values) - 3


def test_a_threshold_and_the_languages_change_what_is_removed(cleaned, sample_rows, tmp_path):
    # a rerun equal to a fresh run cannot show a flag is used: the removals at other
    # settings are checked against the readable definitions and the sample's labels
    out = tmp_path / "c"
    run_script("clean.py", "--input", cleaned / "raw", "--output", out, "--max-dup-lines",
               "0.1", "--languages", "en", "--report-all", "--workers", "2")
    stats = json.loads((out / "report" / "clean_stats.json").read_text())
    alone = {r["rule"]: r["alone"] for r in stats["rules"]}
    texts = [r["text"] or "" for r in sample_rows]
    assert alone["dup_lines"] == sum(cleaning.dup_line_share(t) > 0.1 for t in texts)
    assert alone["dup_lines"] > sum(cleaning.dup_line_share(t) > 0.3 for t in texts)
    share = {r["id"]: cleaning.dup_line_share(r["text"] or "") for r in sample_rows}
    lang = {r["id"]: r["lang"] for r in sample_rows}
    before = set(_ids(cleaned / "cleaned"))
    assert set(_ids(out)) == {i for i in before if lang[i] == "en" and share[i] <= 0.1}
    assert any(lang[i] == "zh" for i in before)
