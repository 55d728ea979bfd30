"""Tweak a threshold, rerun in seconds: kept signals and signatures give the bytes of a
fresh run; bad caches are never used; sweeps write no output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, data_files, run_script
from pipeline.manifest import check_input

# every threshold flag of clean.py, lowered and raised from its default
CLEAN_FLAGS = [("--min-chars", "100"), ("--min-chars", "400"),
               ("--max-dup-lines", "0.1"), ("--max-dup-lines", "0.6"),
               ("--max-char-run", "20"), ("--max-char-run", "120"),
               ("--min-alnum", "0.3"), ("--min-alnum", "0.75"),
               ("--min-lang-conf", "0.5"), ("--min-lang-conf", "0.95"),
               ("--languages", "en"), ("--languages", "en,zh,ja,de")]


def _clean(raw: Path, out: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_script("clean.py", "--input", raw, "--output", out, "--workers", "2", *flags,
                      check=check)


def _data(out: Path, manifest: str = "manifest.json") -> dict[str, bytes]:
    m = json.loads((out / manifest).read_text())
    return {f["name"]: (out / f["name"]).read_bytes() for f in m["files"]}


def _report(out: Path) -> dict:
    """clean's report, without what legitimately differs between a rerun and a fresh run."""
    stats = json.loads((out / "report" / "clean_stats.json").read_text())
    stats.pop("signals")
    ex = {p.name: p.read_text() for p in sorted((out / "report").glob("removed_*.jsonl"))}
    return {"stats": stats, "examples": ex}


@pytest.fixture(scope="module")
def first(sample_layout, tmp_path_factory) -> Path:
    """raw/ and cleaned/ (default thresholds), the cleaned/ with its signals."""
    d = tmp_path_factory.mktemp("reruns") / "data"
    shutil.copytree(sample_layout, d)
    _clean(d / "raw", d / "cleaned")
    return d


def _copy(first: Path, tmp_path: Path) -> Path:
    d = tmp_path / "data"
    shutil.copytree(first, d)
    return d


@pytest.mark.parametrize("flag,value", CLEAN_FLAGS)
def test_clean_rerun_equals_a_fresh_run(first, tmp_path, flag, value):
    d = _copy(first, tmp_path)
    cp = _clean(d / "raw", d / "cleaned", flag, value)
    _clean(d / "raw", d / "fresh", flag, value)
    assert _data(d / "cleaned") == _data(d / "fresh")
    assert _report(d / "cleaned") == _report(d / "fresh")
    m = json.loads((d / "cleaned" / "manifest.json").read_text())
    f = json.loads((d / "fresh" / "manifest.json").read_text())
    assert m["counts"] == f["counts"] and m["output_fingerprint"] == f["output_fingerprint"]
    s, fs = m["signals"], f["signals"]
    assert s["tasks_reused"] == s["tasks"] and fs["tasks_reused"] == 0
    # the rerun measured exactly what the new thresholds need (the fresh run's calls) that
    # the first run had not measured, and kept the union
    old, fresh, new = (_measured(first / "cleaned"), _measured(d / "fresh"),
                       _measured(d / "cleaned"))
    assert s["lid_calls_made"] == sum((fresh[k] & ~old[k]).sum() for k in old)
    assert s["lid_calls_made"] < fs["lid_calls_made"]
    assert all(((old[k] | fresh[k]) == new[k]).all() for k in old)
    assert "reused" in cp.stdout


def _measured(out: Path) -> dict:
    """Which language-ID calls the kept signals hold: part -> mask over documents."""
    t = pq.read_table(sorted((out / "signals").glob("*.parquet")))
    return {p: t.column(f"{p}_conf").is_valid().to_numpy(zero_copy_only=False)
            for p in ("head", "tail", "full")}


def test_higher_confidence_measures_full_text_only_where_needed(first, tmp_path):
    """With the ends-first shortcut (--lid-chars), a document decided by both ends at 0.8
    may need full-text LID at 0.95: the rerun measures exactly those, and the kept
    signals grow by them."""
    d = _copy(first, tmp_path)
    _clean(d / "raw", d / "cleaned", "--lid-chars", "200")
    before = pq.read_table(sorted((d / "cleaned" / "signals").glob("*.parquet")))
    _clean(d / "raw", d / "cleaned", "--min-lang-conf", "0.95", "--lid-chars", "200")
    after = pq.read_table(sorted((d / "cleaned" / "signals").glob("*.parquet")))
    full_before = before.column("full_conf").null_count
    full_after = after.column("full_conf").null_count
    m = json.loads((d / "cleaned" / "manifest.json").read_text())["signals"]
    assert full_after < full_before and m["lid_calls_made"] >= full_before - full_after > 0
    # what had been measured is still there, unchanged
    for col in ("chars", "head_conf", "head_lang"):
        a, b = before.column(col).to_pylist(), after.column(col).to_pylist()
        assert all(x == y for x, y in zip(a, b) if x is not None)


def test_signals_cost_and_dependencies_in_manifest(first):
    m = json.loads((first / "cleaned" / "manifest.json").read_text())
    s = m["signals"]
    raw = json.loads((first / "raw" / "manifest.json").read_text())
    assert s["depends_on"]["input_fingerprint"] == raw["output_fingerprint"]
    assert s["depends_on"]["lid_model_xxh3_128"] == m["config"]["lid_model"]["xxh3_128"]
    assert s["depends_on"]["lid_chars"] == 0
    on_disk = sum(p.stat().st_size for p in (first / "cleaned" / "signals").iterdir())
    assert s["bytes"] == on_disk and 10 < on_disk / m["counts"]["docs_in"] < 200
    idx = json.loads((first / "cleaned" / "signals" / "index.json").read_text())
    assert len(idx["files"]) == len(m["files"]) and all(len(f["xxh3_128"]) == 32 for f in idx["files"])


def test_truncated_or_foreign_signals_are_recomputed(first, tmp_path, sample_layout):
    d = _copy(first, tmp_path)
    sig = sorted((d / "cleaned" / "signals").glob("*.parquet"))
    sig[0].write_bytes(sig[0].read_bytes()[:100])           # truncated
    # a file of the same name from another input (a one-shard corpus of other rows)
    other = tmp_path / "other"
    src = tmp_path / "o.jsonl"
    src.write_text("".join(json.dumps({"text": f"another corpus, document {i} " * 20}) + "\n"
                           for i in range(50)))
    run_script("download_data.py", "--input", src, "--output", other / "raw")
    _clean(other / "raw", other / "cleaned")
    shutil.copy(next((other / "cleaned" / "signals").glob("*.parquet")), sig[1])
    cp = _clean(d / "raw", d / "cleaned", "--min-chars", "300")
    _clean(d / "raw", d / "fresh", "--min-chars", "300")
    assert _data(d / "cleaned") == _data(d / "fresh")
    s = json.loads((d / "cleaned" / "manifest.json").read_text())["signals"]
    assert s["tasks_reused"] == s["tasks"] - 2
    assert "digest mismatch" in cp.stderr
    # a whole signals folder made from another input is refused by its dependencies
    shutil.rmtree(d / "cleaned" / "signals")
    shutil.copytree(other / "cleaned" / "signals", d / "cleaned" / "signals")
    cp = _clean(d / "raw", d / "cleaned", "--min-chars", "250")
    assert "made for another input_fingerprint" in cp.stderr
    _clean(d / "raw", d / "fresh", "--min-chars", "250")
    assert _data(d / "cleaned") == _data(d / "fresh")


def test_no_keep_signals_keeps_none(first, tmp_path):
    d = _copy(first, tmp_path)
    cp = _clean(d / "raw", d / "nokeep", "--no-keep-signals")
    assert not (d / "nokeep" / "signals").exists() and "not kept (--no-keep-signals)" in cp.stdout
    assert _data(d / "nokeep") == _data(d / "cleaned")
    assert json.loads((d / "nokeep" / "manifest.json").read_text())["signals"]["kept"] is False


def test_lid_chars_change_invalidates_the_signals(first, tmp_path):
    d = _copy(first, tmp_path)
    cp = _clean(d / "raw", d / "cleaned", "--lid-chars", "100")
    assert "made for another lid_chars" in cp.stderr
    s = json.loads((d / "cleaned" / "manifest.json").read_text())["signals"]
    assert s["tasks_reused"] == 0 and s["depends_on"]["lid_chars"] == 100


def test_rerun_marks_downstream_stale_and_identical_rerun_does_not(first, tmp_path):
    d = _copy(first, tmp_path)
    run_script("dedup_exact.py", "--input", d / "cleaned", "--output", d / "dedup_exact")
    cp = _clean(d / "raw", d / "cleaned")
    assert "stale" not in cp.stderr
    check_input(d / "dedup_exact" / "manifest.json")
    cp = _clean(d / "raw", d / "cleaned", "--min-chars", "1000")
    assert "dedup_exact was built from the previous output and is now stale" in cp.stderr


def test_killed_rerun_leaves_the_previous_output(first, tmp_path):
    d = _copy(first, tmp_path)
    before = {p.relative_to(d): p.read_bytes() for p in (d / "cleaned").rglob("*") if p.is_file()}
    args = ["--input", d / "raw", "--output", d / "cleaned", "--min-chars", "350",
            "--report-all", "--workers", "2"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "clean.py"), *map(str, args)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    while not list(d.glob(".cleaned.partial/_logs/clean/progress/*.json")) and proc.poll() is None:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    after = {p.relative_to(d): p.read_bytes() for p in (d / "cleaned").rglob("*") if p.is_file()}
    assert after == before
    check_input(d / "cleaned" / "manifest.json")


# -- sweeps -----------------------------------------------------------------------------

def test_clean_sweep_writes_no_output_and_matches_real_runs(first, tmp_path):
    d = _copy(first, tmp_path)
    run_script("dedup_exact.py", "--input", d / "cleaned", "--output", d / "dedup_exact")
    files = {p: p.read_bytes() for p in (d / "cleaned").rglob("*") if p.is_file()}
    cp = _clean(d / "raw", d / "cleaned", "--sweep", "min_chars=100,200,600",
                "--sweep", "min_lang_conf=0.65,0.8,0.9")
    # output, manifest, signals untouched; only the sweep report added; nothing below stale
    now = {p: p.read_bytes() for p in (d / "cleaned").rglob("*") if p.is_file()}
    added = sorted(str(p.relative_to(d / "cleaned")) for p in set(now) - set(files))
    assert added == ["report/sweep.json", "report/sweep.md"]
    assert all(now[p] == b for p, b in files.items())
    check_input(d / "dedup_exact" / "manifest.json")
    assert "sweep min_chars" in cp.stdout and "sweep min_lang_conf" in cp.stdout
    sweep = json.loads((d / "cleaned" / "report" / "sweep.json").read_text())
    by = {s["param"]: s for s in sweep["sweeps"]}
    assert [v["value"] for v in by["min_chars"]["values"]] == [100, 200, 600]
    # each value's table equals a real run with that value
    for value in ("600",):
        _clean(d / "raw", d / "real", "--min-chars", value)
        real = json.loads((d / "real" / "manifest.json").read_text())["counts"]
        got = next(v for v in by["min_chars"]["values"] if v["value"] == int(value))
        assert got["removed"] == real["removed"] and got["docs_out"] == real["docs_out"]
    # what changes fate between neighbouring values: id, measured value, start of text
    ch = by["min_chars"]["changes"][1]
    assert (ch["from"], ch["to"]) == ("200", "600") and ch["documents"] > 0
    assert ch["examples"]
    for e in ch["examples"]:
        assert e["removed_by"] == "600" and e["kept_by"] == "200"
        assert e["rule"] == "too_short" and 200 <= e["value"]["chars"] < 600 and e["text"]
    assert "removed at 600, kept at 200" in cp.stdout
    md = (d / "cleaned" / "report" / "sweep.md").read_text()
    assert "## min_lang_conf" in md and "change fate" in md


def test_sweep_without_signals_measures_them_for_the_next_run(sample_layout, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(sample_layout, d)
    cp = _clean(d / "raw", d / "cleaned", "--sweep", "max_dup_lines=0.2,0.3")
    assert not (d / "cleaned" / "manifest.json").exists()
    assert (d / ".cleaned.signals" / "signals" / "index.json").exists()
    assert "sweep max_dup_lines" in cp.stdout
    _clean(d / "raw", d / "cleaned")
    s = json.loads((d / "cleaned" / "manifest.json").read_text())["signals"]
    assert s["tasks_reused"] == s["tasks"] and s["lid_calls_made"] == 0
    assert not (d / ".cleaned.signals").exists()      # merged into the output's signals
    assert (d / "cleaned" / "report" / "sweep.json").exists()  # the sweep's report is kept
    # a sweep that measures nothing new keeps no second copy of the signals
    cp = _clean(d / "raw", d / "cleaned", "--sweep", "max_dup_lines=0.2,0.3")
    assert "language ID calls made 0," in cp.stdout
    assert not (d / ".cleaned.signals").exists()


def test_sweep_flag_errors_are_one_line(first):
    for bad in ("min_chars", "nothing=1,2", "min_chars=a,b", "min_alnum=1.5"):
        cp = _clean(first / "raw", first / "cleaned", "--sweep", bad, check=False)
        assert cp.returncode == 2 and cp.stderr.startswith("error: ") and "Traceback" not in cp.stderr


# -- dedup_minhash ----------------------------------------------------------------------

def _minhash(d: Path, out: str, *flags: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_script("dedup_minhash.py", "--input", d / "dedup_exact", "--output", d / out,
                      "--workers", "2", *flags, check=check)


def _mh_outputs(out: Path) -> dict:
    files = _data(out)
    files["removed.parquet"] = (out / "report" / "removed.parquet").read_bytes()
    return files


@pytest.fixture(scope="module")
def dedup_first(pipeline_layout, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("mh") / "data"
    shutil.copytree(pipeline_layout, d)
    return d


@pytest.mark.parametrize("flags", [("--threshold", "0.9"), ("--threshold", "0.7"),
                                   ("--bands", "32", "--rows", "4")])
def test_minhash_rerun_reuses_signatures_and_equals_fresh(dedup_first, tmp_path, flags):
    d = _copy(dedup_first, tmp_path)
    cp = _minhash(d, "dedup", *flags)
    _minhash(d, "fresh", *flags, "--no-keep-signatures")
    assert _mh_outputs(d / "dedup") == _mh_outputs(d / "fresh")
    k = json.loads((d / "dedup" / "manifest.json").read_text())["kept"]
    assert k["tasks_reused"] == k["tasks"]
    assert k["output_files_reused"] > 0  # units whose rows did not change were not rewritten
    assert "signatures reused for" in cp.stdout
    assert not (d / "fresh" / "signatures").exists()
    assert "not kept (--no-keep-signatures)" in run_script(
        "dedup_minhash.py", "--input", d / "dedup_exact", "--output", d / "fresh2",
        "--no-keep-signatures").stdout


def test_minhash_kept_files_cost_and_keys(dedup_first):
    m = json.loads((dedup_first / "dedup" / "manifest.json").read_text())
    k = m["kept"]
    on_disk = sum(p.stat().st_size for n in ("signatures", "bands", "candidates", "removed")
                  for p in (dedup_first / "dedup" / n).iterdir())
    assert k["bytes"] == on_disk
    deps = k["signatures"]["depends_on"]
    up = json.loads((dedup_first / "dedup_exact" / "manifest.json").read_text())
    assert deps == {"version": 1, "input_fingerprint": up["output_fingerprint"], "ngram": 5,
                    "num_perm": 128, "seed": 1}
    assert k["bands"]["depends_on"] == {**deps, "bands": 16, "rows": 8}
    assert k["candidates"]["depends_on"] == {**deps, "bands": 16, "rows": 8, "all_pairs_max": 64}
    assert k["removed"]["depends_on"] == {**k["candidates"]["depends_on"], "threshold": 0.8}
    removed = np.load(dedup_first / "dedup" / "removed" / "removed.npy")
    assert len(removed) == m["counts"]["removed"]["near_duplicate"] and (np.diff(removed) > 0).all()
    # the kept candidates are the run's: every candidate pair, with its matching positions
    kept = np.load(dedup_first / "dedup" / "candidates" / "pairs.npy")
    assert kept.shape == (m["counts"]["candidates"], 3) and (kept[:, 0] < kept[:, 1]).all()
    rejected = int((kept[:, 2] / 128 < 0.8 - 1e-12).sum())
    assert rejected == m["counts"]["candidates_rejected"]


def test_minhash_rerun_reuses_candidates_unless_they_do_not_fit(dedup_first, tmp_path):
    d = _copy(dedup_first, tmp_path)
    cp = _minhash(d, "dedup", "--threshold", "0.75")
    assert "buckets and verification skipped" in cp.stderr
    assert "buckets" not in json.loads((d / "dedup" / "manifest.json").read_text())["timings"]
    # a corrupt candidates file is not used: recomputed, and the output is still exact
    f = d / "dedup" / "candidates" / "pairs.npy"
    f.write_bytes(f.read_bytes()[:-12])
    cp = _minhash(d, "dedup", "--threshold", "0.85")
    assert "kept candidates" in cp.stderr and "digest mismatch" in cp.stderr
    _minhash(d, "fresh", "--threshold", "0.85", "--no-keep-signatures")
    assert _mh_outputs(d / "dedup") == _mh_outputs(d / "fresh")
    # another b x r: the kept candidates were made from other bands
    cp = _minhash(d, "dedup", "--bands", "32", "--rows", "4")
    assert any(line.startswith("kept candidates") and "made for another bands, rows" in line
               for line in cp.stderr.splitlines())


def test_minhash_bad_signature_files_are_recomputed(dedup_first, tmp_path):
    d = _copy(dedup_first, tmp_path)
    sig = sorted((d / "dedup" / "signatures").glob("*.npy"))
    sig[0].write_bytes(sig[0].read_bytes()[:200])
    band = sorted((d / "dedup" / "bands").glob("*.npy"))
    band[1].write_bytes(band[0].read_bytes())  # another unit's file under this name
    cp = _minhash(d, "dedup", "--threshold", "0.85")
    _minhash(d, "fresh", "--threshold", "0.85", "--no-keep-signatures")
    assert _mh_outputs(d / "dedup") == _mh_outputs(d / "fresh")
    assert "digest mismatch" in cp.stderr
    k = json.loads((d / "dedup" / "manifest.json").read_text())["kept"]
    assert k["tasks_reused"] == k["tasks"] - 1
    # another --seed: the kept signatures are for other hash functions, never used
    cp = _minhash(d, "dedup", "--seed", "2")
    assert "made for another seed" in cp.stderr


def test_minhash_malformed_kept_index_is_not_used(dedup_first, tmp_path):
    """An index.json edited into valid JSON of the wrong shape is a store not used (said
    in one line), not a traceback; the output is still a fresh run's."""
    d = _copy(dedup_first, tmp_path)
    (d / "dedup" / "signatures" / "index.json").write_text("[1, 2]")
    idx = d / "dedup" / "bands" / "index.json"
    j = json.loads(idx.read_text())
    del j["files"][0]["xxh3_128"]
    idx.write_text(json.dumps(j))
    cp = _minhash(d, "dedup", "--threshold", "0.85")
    _minhash(d, "fresh", "--threshold", "0.85", "--no-keep-signatures")
    assert _mh_outputs(d / "dedup") == _mh_outputs(d / "fresh")
    assert "kept signatures" in cp.stderr and "kept bands" in cp.stderr
    assert cp.stderr.count("unreadable index") == 2


def test_minhash_hand_edited_index_counts_are_not_trusted(dedup_first, tmp_path):
    """The counts an index keeps beside its files (text bytes, short texts, band
    collisions) are not covered by the files' digests: an index that is not the one the
    run recorded in its manifest is not used, so the counts are a fresh run's."""
    d = _copy(dedup_first, tmp_path)
    for name, key in (("signatures", "bytes"), ("candidates", "band_pairs")):
        idx = d / "dedup" / name / "index.json"
        j = json.loads(idx.read_text())
        j["files"][0][key] += 1000
        idx.write_text(json.dumps(j, indent=2))
    cp = _minhash(d, "dedup")
    _minhash(d, "fresh", "--no-keep-signatures")
    counts = [json.loads((d / o / "manifest.json").read_text())["counts"] for o in ("dedup", "fresh")]
    assert counts[0] == counts[1]
    assert _mh_outputs(d / "dedup") == _mh_outputs(d / "fresh")
    assert "index.json is not the one" in cp.stderr


def test_minhash_sweep_writes_no_output(dedup_first, tmp_path):
    d = _copy(dedup_first, tmp_path)
    files = {p: p.read_bytes() for p in (d / "dedup").rglob("*") if p.is_file()}
    cp = _minhash(d, "dedup", "--sweep", "threshold=0.7,0.75,0.8,0.85,0.9")
    now = {p: p.read_bytes() for p in (d / "dedup").rglob("*") if p.is_file()}
    assert sorted(str(p.relative_to(d / "dedup")) for p in set(now) - set(files)) == [
        "report/sweep.json", "report/sweep.md"]
    assert all(now[p] == b for p, b in files.items())
    check_input(d / "pack_manifest.json")  # the packed files are still fresh
    s = json.loads((d / "dedup" / "report" / "sweep.json").read_text())
    assert [t["threshold"] for t in s["thresholds"]] == [0.7, 0.75, 0.8, 0.85, 0.9]
    real = json.loads((d / "dedup" / "manifest.json").read_text())["counts"]
    at08 = next(t for t in s["thresholds"] if t["threshold"] == 0.8)
    assert at08["removed"] == real["removed"]["near_duplicate"]
    assert at08["clusters"] == real["clusters"] and at08["rejected"] == real["candidates_rejected"]
    removed = [t["removed"] for t in s["thresholds"]]
    assert removed == sorted(removed, reverse=True)
    at = {t["threshold"]: t["removed"] for t in s["thresholds"]}
    assert any(ch["documents"] and ch["examples"] for ch in s["changes"])
    for ch in s["changes"]:
        # raising the threshold only splits clusters: what changes fate is the difference
        assert ch["documents"] == at[ch["from"]] - at[ch["to"]]
        for e in ch["examples"]:
            assert ch["from"] <= e["similarity"] < ch["to"] and e["text"] and e["other_text"]
    assert "pairs merged at" in cp.stdout
    bad = _minhash(d, "dedup", "--sweep", "bands=8", check=False)
    assert bad.returncode == 2 and "threshold" in bad.stderr


def test_sweep_with_kept_signals_reads_few_texts(tmp_path, monkeypatch):
    """A sweep whose signals are all kept reads the ids, and the text only of the row
    groups a decision or an example needs: not the corpus."""
    import pyarrow as pa

    import clean

    rng = np.random.default_rng(5)
    words = ("the of and to in is that for it as was with be by on not he this are or his "
             "from at which but have an they you were her she there been one all we their "
             "river garden morning letter music window summer village history market "
             "people little great water small world house story night light school").split()
    texts = [" ".join(rng.choice(words, int(rng.integers(20, 100)))) + "." for _ in range(40_000)]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}),
                   tmp_path / "src.parquet")
    run_script("download_data.py", "--input", tmp_path / "src.parquet", "--output", tmp_path / "raw")
    _clean(tmp_path / "raw", tmp_path / "cleaned")
    groups = sum(pq.ParquetFile(f).metadata.num_row_groups
                 for f in (tmp_path / "raw").glob("*.parquet"))
    assert groups >= 8

    reads = []   # one entry per row group read, naming the columns
    one, many = pq.ParquetFile.read_row_group, pq.ParquetFile.read_row_groups

    def read_one(self, i, columns=None, **kw):
        reads.append(tuple(columns or ()))
        return one(self, i, columns=columns, **kw)

    def read_many(self, groups, columns=None, **kw):
        reads.extend([tuple(columns or ())] * len(groups))
        return many(self, groups, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", read_one)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", read_many)
    assert clean.main(["--input", str(tmp_path / "raw"), "--output", str(tmp_path / "cleaned"),
                       "--workers", "1", "--examples", "1",
                       "--sweep", "min_chars=200,300"]) == 0
    assert reads.count(("id",)) == groups            # every row group's ids, once
    assert 0 < reads.count(("text",)) <= 3           # the text of a few: the examples'
    sweep = json.loads((tmp_path / "cleaned" / "report" / "sweep.json").read_text())
    assert sweep["sweeps"][0]["values"][0]["bytes_out"] > 0


def test_minhash_rerun_that_reuses_signatures_never_imports_numba(dedup_first, tmp_path,
                                                                    monkeypatch):
    """numba (0.2 s to import) is loaded only where a kernel runs: not by a rerun or a
    sweep that reuses every signature, in the driver or in a worker. The watch can fail:
    a first run, which computes signatures, does import it. (With the kernels' numba
    versions, DATAPREP_AOT=0, as where no C compiler built them ahead of time; with the
    ahead-of-time builds no run imports numba: tests/test_aot.py.)"""
    from conftest import run_watching_imports

    monkeypatch.setenv("DATAPREP_AOT", "0")

    d = _copy(dedup_first, tmp_path)
    args = ["--input", d / "dedup_exact", "--output", d / "dedup", "--workers", "2"]
    assert run_watching_imports("dedup_minhash.py", [*args, "--threshold", "0.9"], "numba",
                                tmp_path) == ""
    assert run_watching_imports("dedup_minhash.py", [*args, "--sweep", "threshold=0.7,0.9"],
                                "numba", tmp_path) == ""
    first = run_watching_imports("dedup_minhash.py", ["--input", d / "dedup_exact", "--output",
                                 d / "new", "--workers", "2"], "numba", tmp_path)
    assert "numba imported" in first


def test_a_first_run_imports_numba_once_for_all_its_workers(dedup_first, tmp_path,
                                                            monkeypatch):
    """When nothing is kept (a first run), clean and dedup_minhash set numba up in the
    driver before the pool's workers are forked, so it is imported once (0.5 s of CPU),
    not once in every worker; with kept measurements, not at all (the test above). clean
    builds its language-ID model there too. (numba's kernels, DATAPREP_AOT=0: with the
    ahead-of-time builds numba is not imported at all.)"""
    from conftest import run_watching_imports

    monkeypatch.setenv("DATAPREP_AOT", "0")

    d = _copy(dedup_first, tmp_path)
    for script, src in (("clean.py", "raw"), ("dedup_minhash.py", "dedup_exact")):
        log = run_watching_imports(script, ["--input", d / src, "--output", d / f"new_{src}",
                                            "--workers", "2", "--task-mb", "1"], "numba",
                                   tmp_path)
        # imported once, by the driver before it started the pool (clean: as it built the
        # language-ID model)
        before_fork = "load_lid_once" if script == "clean.py" else "start_pool_early"
        assert log.count("numba imported") == 1 and before_fork in log, (script, log)
    # and clean builds the language-ID model once, in the driver, for every worker
    log = run_watching_imports("clean.py", ["--input", d / "raw", "--output", d / "new_lid",
                                            "--workers", "2", "--task-mb", "1"],
                               "algorithms.langid_fast", tmp_path)
    assert log.count("imported in pid") == 1 and "load_lid_once" in log, log


def test_minhash_identical_rerun_links_every_file_and_reports_the_same(dedup_first, tmp_path):
    """A rerun with the same flags changes no unit: every output file is linked, the
    report's ids and texts are read in the driver instead of by filter tasks, and the
    report is the same, byte for byte."""
    d = _copy(dedup_first, tmp_path)
    before = {n: (d / "dedup" / "report" / n).read_bytes()
              for n in ("removed.parquet", "dedup_minhash_stats.md")}
    _minhash(d, "dedup")
    m = json.loads((d / "dedup" / "manifest.json").read_text())
    assert m["kept"]["output_files_reused"] == len(m["files"])
    assert {n: (d / "dedup" / "report" / n).read_bytes() for n in before} == before
    # and a changed threshold, back again: files rewritten by tasks that picked the ids
    _minhash(d, "dedup", "--threshold", "0.7")
    _minhash(d, "dedup")
    assert {n: (d / "dedup" / "report" / n).read_bytes() for n in before} == before


def test_clean_rerun_links_the_units_whose_rows_do_not_change(first, tmp_path):
    """clean rewrites only the output files whose surviving rows change: a rerun that
    changes a report flag only links them all; a threshold that moves a few documents
    rewrites their units alone. Each time the files, the counts and the report equal a
    fresh run's. A linked file's bytes are checked first: one altered in place (same
    size) is written again."""
    from algorithms import cleaning

    d = _copy(first, tmp_path)
    small = ("--task-mb", "0.05")   # many units on the sample
    _clean(d / "raw", d / "cleaned", *small)
    before = _data(d / "cleaned")
    assert len(before) > 4

    def rerun_equals_fresh(*flags: str) -> tuple[dict[str, bool], str]:
        cp = _clean(d / "raw", d / "cleaned", *small, *flags)
        fresh = tmp_path / f"fresh{len(list(tmp_path.iterdir()))}"
        _clean(d / "raw", fresh, *small, *flags)
        assert _data(d / "cleaned") == _data(fresh)
        assert _report(d / "cleaned") == _report(fresh)
        m = json.loads((d / "cleaned" / "manifest.json").read_text())
        assert m["counts"] == json.loads((fresh / "manifest.json").read_text())["counts"]
        return {f["name"]: f["reused"] for f in m["files"]}, cp.stdout

    # (--report-all measures language ID where no rule needed it: a first-time cost that
    # reads the texts, but not a change of which rows survive)
    reused, out = rerun_equals_fresh("--examples", "3", "--report-all")
    assert all(reused.values()) and f"{len(before)} reused unchanged" in out
    # --max-char-run at the longest run of any document keeps every document that rule
    # removed (in most units); just under the longest run of a surviving document, it
    # removes that document alone (one unit)
    sig = pq.read_table(sorted((d / "cleaned" / "signals").glob("*.parquet")))
    longest = int(sig.column("longest_run").to_numpy().max())
    before = _data(d / "cleaned")
    reused, _ = rerun_equals_fresh("--max-char-run", str(longest))
    changed = {n for n, b in _data(d / "cleaned").items() if before[n] != b}
    assert changed and {n for n, r in reused.items() if not r} == changed
    runs = {n: max(cleaning.longest_char_run(t) for t in pq.read_table(d / "cleaned" / n)
                   .column("text").to_pylist()) for n in before}
    top = max(runs.values())
    before = _data(d / "cleaned")
    reused, _ = rerun_equals_fresh("--max-char-run", str(top - 1))
    changed = {n for n, b in _data(d / "cleaned").items() if before[n] != b}
    assert changed == {n for n, r in runs.items() if r == top}
    assert {n for n, r in reused.items() if not r} == changed and len(changed) < len(before)
    # a linked file is checked against its digest, not trusted
    victim = min(before)
    raw = bytearray((d / "cleaned" / victim).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (d / "cleaned" / victim).unlink()      # a fresh inode: the hard links stay intact
    (d / "cleaned" / victim).write_bytes(bytes(raw))
    reused, _ = rerun_equals_fresh("--max-char-run", str(top - 1))
    assert not reused[victim] and sum(reused.values()) == len(reused) - 1


USER_RULE = ROOT / "docs" / "examples" / "line_ends_rule.py"


@pytest.mark.parametrize("rules,flag,value", [
    ("tutorial,gopher_quality", "--gopher-min-words", "120"),
    ("tutorial,USER", "--min-line-ends", "0.5")], ids=["pack rule", "user rule"])
def test_rule_threshold_rerun_equals_a_fresh_run(first, tmp_path, rules, flag, value):
    """A pack rule's and a user rule's threshold: the rerun measures nothing and gives the
    bytes of a fresh run with the new threshold."""
    rules = rules.replace("USER", str(USER_RULE))
    d = _copy(first, tmp_path)
    _clean(d / "raw", d / "cleaned", "--rules", rules)        # adds the rule's signals
    before = json.loads((d / "cleaned" / "manifest.json").read_text())["counts"]
    cp = _clean(d / "raw", d / "cleaned", "--rules", rules, flag, value)
    m = json.loads((d / "cleaned" / "manifest.json").read_text())
    assert m["signals"]["measured"] == {} and m["signals"]["lid_calls_made"] == 0
    assert m["counts"] != before                              # the threshold moved documents
    _clean(d / "raw", tmp_path / "fresh", "--rules", rules, flag, value)
    assert data_files(d / "cleaned") == data_files(tmp_path / "fresh")
    assert _report(d / "cleaned") == _report(tmp_path / "fresh")
    assert "Traceback" not in cp.stderr


def test_current_manifest_checks_digests_and_the_early_hint_sizes_only(first, tmp_path):
    """pipeline/staging.current_manifest: an output whose file changed in place is not
    current; the hint the stage takes before its locks (digests=False) reads no file, so
    it sees only a change of size."""
    from pipeline.staging import current_manifest

    d = _copy(first, tmp_path)
    mf = d / "cleaned" / "manifest.json"
    m = json.loads(mf.read_text())
    args = (mf, m["stage"], m["config"], m["input"]["fingerprint"],
            {k: v["fingerprint"] for k, v in (m.get("extra_inputs") or {}).items()})
    assert current_manifest(*args) == m and current_manifest(*args, digests=False) == m
    shard = d / "cleaned" / m["files"][0]["name"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF                      # same size, other bytes
    shard.write_bytes(bytes(data))
    assert current_manifest(*args) is None
    assert current_manifest(*args, digests=False) == m
    shard.write_bytes(bytes(data) + b"x")             # another size
    assert current_manifest(*args, digests=False) is None
    assert current_manifest(*args[:2], {**m["config"], "min_chars": -1}, *args[3:],
                            digests=False) is None
