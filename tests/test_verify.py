"""verify.py: the section 6 checklist on the sample pipeline, and each FAIL on broken data."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_script

from pipeline.verify.decoded import count_token, shown


def run_verify(data: Path, tmp_path: Path, *extra):
    report = tmp_path / "report.md"
    cp = run_script("verify.py", "--input", data, "--output", report, *extra, check=False)
    return cp, report


def status(out: str) -> dict[int, str]:
    """item number -> PASS/FAIL, from verify's printed output."""
    return {int(n): s for s, n in re.findall(r"^\[(PASS|FAIL)\] (\d+)\.", out, re.M)}


def item_text(out: str, n: int) -> str:
    m = re.search(rf"^\[(?:PASS|FAIL)\] {n}\..*?(?=^\[(?:PASS|FAIL)\] |\Z|^\d+ passed)", out,
                  re.M | re.S)
    return m.group(0)


@pytest.fixture
def broken(pipeline_layout, tmp_path) -> Path:
    """A writable copy of the sample pipeline's data/ to damage."""
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout, d, symlinks=True)
    return d


def test_every_item_passes_on_the_sample_pipeline(pipeline_layout, tmp_path):
    cp, report = run_verify(pipeline_layout, tmp_path / "a" / "new" / "folder")
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert status(cp.stdout) == {n: "PASS" for n in range(1, 11)}
    assert "checklist: 10 of 10 items PASS, 0 FAIL" in cp.stdout
    assert len(re.findall(r"^    \[\d\] tokens ", cp.stdout, re.M)) == 10  # the decoded windows
    assert "characters per token" in item_text(cp.stdout, 7)
    c = json.loads((pipeline_layout / "cleaned" / "manifest.json").read_text())["counts"]
    some = sum(1 for n in (c.get("removed") or {}).values() if n)   # rules listed at 0 too
    assert f"{some} rules removed some" in item_text(cp.stdout, 5)
    md = report.read_text()
    assert md.count("\n## ") == 10 and "| 10 | nothing lost" in md and "**FAIL**" not in md


def _early(pipeline_layout: Path, tmp_path: Path) -> Path:
    """A data folder where only download and clean ran."""
    d = tmp_path / "early"
    for name in ("raw", "cleaned"):
        shutil.copytree(pipeline_layout / name, d / name)
    return d


def test_missing_stages_fail_and_name_the_stage_to_run(pipeline_layout, tmp_path):
    # raw -> pack directly: clean and both dedup stages never ran
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout / "raw", d / "raw")
    shutil.copytree(pipeline_layout / "tokenizer", d / "tokenizer")
    run_script("pack_parallel.py", "--input", d / "raw", "--output", d,
               "--tokenizer", d / "tokenizer" / "tokenizer.json")
    cp, _ = run_verify(d, tmp_path)
    assert cp.returncode == 1
    st = status(cp.stdout)
    assert all(st[n] == "PASS" for n in (1, 2, 3, 4, 7, 10)), cp.stdout
    assert st[5] == st[6] == st[9] == "FAIL"
    assert "run clean.py" in item_text(cp.stdout, 5)
    assert "run dedup_exact.py" in item_text(cp.stdout, 6)
    assert "run dedup_minhash.py" in item_text(cp.stdout, 6)
    # nothing packed at all: every item fails, naming pack_parallel.py, no traceback
    empty = tmp_path / "empty"
    empty.mkdir()
    cp, report = run_verify(empty, tmp_path)
    assert cp.returncode == 1 and "Traceback" not in cp.stdout + cp.stderr
    assert "checklist: 0 of 10 items PASS, 10 FAIL" in cp.stdout and "run pack_parallel.py" in item_text(cp.stdout, 1)
    assert report.exists()
    # only the first stages ran: the windows' item names the stage too (it said
    # "unexpected input" over a FileNotFoundError)
    cp, _ = run_verify(_early(pipeline_layout, tmp_path), tmp_path)
    two = item_text(cp.stdout, 2)
    assert "train.bin missing" in two and "pack_parallel.py" in two and "unexpected input" not in two


def test_eos_count_off_blames_the_packer(broken, tmp_path):
    eos = json.loads((broken / "pack_manifest.json").read_text())["counts"]["eos_id"]
    data = np.memmap(broken / "train.bin", dtype=np.uint16, mode="r+")
    i = int(np.flatnonzero(data != eos)[1000])
    data[i] = eos  # one extra document boundary, same file size
    data.flush()
    del data
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 1 and status(cp.stdout)[4] == "FAIL"
    text = item_text(cp.stdout, 4)
    assert "packer" in text and "rerun pack_parallel.py" in text
    # the size still matches; the digest the manifest records does not
    assert status(cp.stdout)[1] == "FAIL"
    assert "train.bin does not match its xxh3-128 digest" in item_text(cp.stdout, 1)


def test_a_token_changed_in_place_fails_the_digest(broken, tmp_path):
    """One token changed inside train.bin, or a val id changed in val_ids.txt, keeps every
    size and count; item 1 compares the bytes with the digests pack_manifest.json records."""
    data = np.memmap(broken / "train.bin", dtype=np.uint16, mode="r+")
    eos = json.loads((broken / "pack_manifest.json").read_text())["counts"]["eos_id"]
    i = int(np.flatnonzero(data != eos)[500])
    data[i] = 1 if data[i] != 1 else 2
    data.flush()
    del data
    ids = broken / "pack_report" / "val_ids.txt"
    ids.write_text(ids.read_text().replace("-", "_", 1) if "-" in ids.read_text()
                   else "X" + ids.read_text()[1:])
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 1 and status(cp.stdout)[1] == "FAIL"
    text = item_text(cp.stdout, 1)
    assert "train.bin does not match its xxh3-128 digest" in text
    assert "val_ids.txt does not match its xxh3-128 digest" in text


def test_val_document_in_train_is_found_exactly_and_nearly(broken, tmp_path):
    val_id = (broken / "pack_report" / "val_ids.txt").read_text().split()[0]
    shard = next(p for p in sorted((broken / "dedup").glob("*.parquet"))
                 if val_id in pq.read_table(p, columns=["id"]).column("id").to_pylist())
    t = pq.read_table(shard)
    text = t.column("text").to_pylist()[t.column("id").to_pylist().index(val_id)]
    exact = "  " + "\n".join(text.split()).upper()          # same after normalise()
    words = text.split()
    near = " ".join(words[: int(len(words) * 0.97)]) + " and a new ending of a few words"
    extra = pa.table({c: [f"copy-{val_id}", f"near-{val_id}"] if c == "id" else
                      ([exact, near] if c == "text" else [t.column(c)[0].as_py()] * 2)
                      for c in t.column_names}, schema=t.schema)
    pq.write_table(pa.concat_tables([t, extra]), shard)
    cp, _ = run_verify(broken, tmp_path)
    assert status(cp.stdout)[8] == "FAIL"
    text8 = item_text(cp.stdout, 8)
    assert "val documents also in train" in text8 and val_id in text8
    assert "near-duplicates in train" in text8
    assert "split was done on tokens, not documents" in text8


def test_garbled_decoder_is_caught(broken, tmp_path):
    tj = broken / "tokenizer" / "tokenizer.json"
    spec = json.loads(tj.read_text())
    spec["decoder"] = None  # the ByteLevel pre-tokenizer without its decoder (section 7)
    tj.write_text(json.dumps(spec))
    cp, _ = run_verify(broken, tmp_path)
    st = status(cp.stdout)
    assert st[2] == st[3] == "FAIL" and cp.returncode == 1
    assert "pre_tokenizer and decoder not paired" in item_text(cp.stdout, 2)
    assert "changed since packing" in item_text(cp.stdout, 1)


def test_cleaning_rule_above_30_percent_is_flagged(broken, tmp_path):
    m = broken / "cleaned" / "manifest.json"
    spec = json.loads(m.read_text())
    c = spec["counts"]
    c["removed"]["lang"] = int(c["docs_in"] * 0.4)
    c["removed"]["dup_lines"] = 0                  # listed, but removed nothing
    m.write_text(json.dumps(spec))
    cp, _ = run_verify(broken, tmp_path)
    text5 = item_text(cp.stdout, 5)
    assert status(cp.stdout)[5] == "FAIL" and "FLAG" in text5 and "clean.py" in text5
    some = sum(1 for n in c["removed"].values() if n)
    assert f"{some} rules removed some" in text5 and some == len(c["removed"]) - 1
    # the counts no longer add up either: item 10 names the stage that lost documents
    assert status(cp.stdout)[10] == "FAIL" and "clean.py" in item_text(cp.stdout, 10)


def test_bins_are_read_in_chunks(pipeline_layout):
    eos = json.loads((pipeline_layout / "pack_manifest.json").read_text())["counts"]["eos_id"]
    p = pipeline_layout / "train.bin"
    full = np.fromfile(p, dtype=np.uint16)
    assert count_token(p, eos, chunk=1000) == (len(full), int((full == eos).sum()),
                                                      int(full[-1]))


def test_bad_arguments_are_one_line(tmp_path):
    cp = run_script("verify.py", "--data-dir", tmp_path / "nope", check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr and "make demo" in cp.stderr
    # a value that would switch a check off (NaN, out of range) is refused, not obeyed
    for flag, value in [("--size-tolerance", "nan"), ("--near-dup-threshold", "2"),
                        ("--max-rule-removal", "-1"), ("--seed", "-1"), ("--task-mb", "0"),
                        ("--workers", "0")]:
        cp = run_script("verify.py", "--data-dir", tmp_path, flag, value, check=False)
        assert cp.returncode == 2 and cp.stderr.startswith(f"error: {flag}" if flag not in (
            "--task-mb", "--workers") else "error: --workers") and "Traceback" not in cp.stderr


def _minhash_settings(dedup: Path) -> dict:
    cfg = json.loads((dedup / "manifest.json").read_text())["config"]
    return {k: cfg[k] for k in ("num_perm", "ngram", "seed", "bands", "rows")}


def test_kept_band_hashes_are_the_ones_the_texts_give(pipeline_layout, tmp_path):
    """dedup_minhash.py's kept band hashes, less its removed rows, are for every document
    of its output the band hashes its text gives (the sample removes near-duplicates
    from several units, so the rows really are picked out)."""
    from algorithms import minhash
    from pipeline.kept_bands import band_rows, output_band_sources

    d = pipeline_layout / "dedup"
    mh = _minhash_settings(d)
    sources, note = output_band_sources(d, mh, minhash.SIGNATURE_VERSION)
    files = sorted(d.glob("part-*.parquet"))
    assert files and set(sources) == {f.name for f in files}, note
    hasher = minhash.MinHasher(mh["num_perm"], mh["ngram"], mh["seed"])
    thinned = 0
    for f in files:
        texts = pq.read_table(f, columns=["text"]).column("text").to_pylist()
        want = minhash.band_hashes(hasher.signatures(texts), mh["bands"], mh["rows"])
        src = sources[f.name]
        thinned += src["hi"] - src["lo"] > len(texts)
        assert np.array_equal(band_rows(src, 0, len(texts)), want), f.name
        assert np.array_equal(band_rows(src, 3, 5), want[:, 3:8]), f.name
        assert band_rows(src, len(texts) - 2, 5) is None          # past the file's rows
    assert thinned >= 2
    # other MinHash settings, or another signature version: nothing is used
    assert output_band_sources(d, {**mh, "rows": 4, "bands": 32}, minhash.SIGNATURE_VERSION)[0] == {}
    assert output_band_sources(d, mh, minhash.SIGNATURE_VERSION + 1)[0] == {}
    assert output_band_sources(pipeline_layout / "dedup_exact", mh, minhash.SIGNATURE_VERSION)[0] == {}
    # removed rows kept at another threshold than the output's: not this output's rows
    c = tmp_path / "dedup"
    shutil.copytree(d, c)
    m = json.loads((c / "manifest.json").read_text())
    m["config"]["threshold"] = 0.9
    (c / "manifest.json").write_text(json.dumps(m))
    got, note = output_band_sources(c, mh, minhash.SIGNATURE_VERSION)
    assert got == {} and "removed rows are not this output's" in note
    # a band index edited since the run (the rows of an entry set where each output
    # file's columns start, and no file's digest covers them): not used
    e = tmp_path / "edited"
    shutil.copytree(d, e)
    idx = json.loads((e / "bands" / "index.json").read_text())
    (e / "bands" / "index.json").write_text(json.dumps(idx, indent=1))   # same content
    got, note = output_band_sources(e, mh, minhash.SIGNATURE_VERSION)
    assert got == {} and "edited since" in note


def test_verify_reuses_the_kept_band_hashes_and_checks_them(broken, tmp_path):
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    n = len(list((broken / "dedup").glob("part-*.parquet")))
    assert f"dedup_minhash.py's kept ones for {n} of {n} units" in item_text(cp.stdout, 8)
    # a kept band file that is not the one its index names is not read: computed instead
    band = sorted((broken / "dedup" / "bands").glob("*.npy"))[1]
    raw = bytearray(band.read_bytes())
    raw[-1] ^= 0xFF
    band.write_bytes(bytes(raw))
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 0 and status(cp.stdout) == {k: "PASS" for k in range(1, 11)}
    assert f"kept ones for {n - 1} of {n} units" in item_text(cp.stdout, 8)
    # the removed rows changed: no kept band hash is used, and the note says why
    removed = broken / "dedup" / "removed" / "removed.npy"
    np.save(removed, np.load(removed)[1:])
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 0 and status(cp.stdout) == {k: "PASS" for k in range(1, 11)}
    text8 = item_text(cp.stdout, 8)
    assert f"kept ones for 0 of {n} units" in text8 and "removed.npy: digest mismatch" in text8


def test_decoded_windows_show_control_characters_as_symbols():
    """A window goes to the terminal and to verify_report.md: an escape sequence or a NUL
    from a document must not act there, and a carriage return must not vanish."""
    assert shown("a\nb\rc\x1b[31md\x00e") == "a⏎ b␍c␛[31md␀e"
    assert all(ord(c) >= 32 and c != "\x7f" for c in shown("".join(map(chr, range(128)))))


def test_english_is_held_to_its_minimum_when_none_was_held_out(broken, tmp_path):
    """A tokenizer trained with --heldout-bytes 0 (the advice of train_tokenizer's 'all
    documents fell in the held-out share') holds out nothing, and the sample's few val
    documents may all be Chinese: item 7 said 'no English document in the corpus' and
    held English to no minimum, though the tokenizer's manifest counts hundreds of English
    documents in its training sample. They count as the corpus's English now."""
    from conftest import stage_args

    run_script("train_tokenizer.py", *stage_args(broken, "train_tokenizer.py",
                                                 "--heldout-bytes", "0", "--workers", "2"))
    run_script("pack_parallel.py", *stage_args(broken, "pack_parallel.py", "--workers", "2"))
    en_docs = json.loads((broken / "tokenizer" / "manifest.json").read_text())["sample"]["en_docs"]
    cp, _ = run_verify(broken, tmp_path, "--min-cpt-en", "50")
    seven = item_text(cp.stdout, 7)
    # nothing held out and no English val document: only the training sample says English
    assert re.search(r"en: .*0 documents held out by train_tokenizer\.py, 0 val documents", seven)
    assert f"{en_docs:,} documents in the tokenizer's training sample; minimum 50" in seven
    assert "no English document" not in seven and en_docs > 100
    assert status(cp.stdout)[7] == "FAIL" and "en compression" in seven
    # the likely cause names the vocabulary's size too (a small one fails both languages)
    vocab = json.loads((broken / "tokenizer" / "tokenizer.json").read_text())
    size = len(vocab["model"]["vocab"]) + sum(
        t["id"] >= len(vocab["model"]["vocab"]) for t in vocab["added_tokens"])
    assert f"or a vocabulary too small for it ({size:,} tokens); rebalance, or raise " \
           "--vocab-size, and rerun train_tokenizer.py" in seven, seven


def test_a_chinese_only_corpus_is_not_failed_for_lacking_english(tmp_path):
    """The sample's Chinese documents alone, through every stage: item 7 still gives the
    English figure of its fixed paragraphs, but holds it to no minimum (the corpus has no
    English to measure on); the Chinese figure keeps its minimum; the windows show a
    character their ends cut as "…", not as a replacement character."""
    import pyarrow.compute as pc

    from conftest import SAMPLE, run_pipeline

    t = pq.read_table(SAMPLE)
    pq.write_table(t.filter(pc.equal(t["lang"], "zh")).select(["id", "text"]), tmp_path / "zh.parquet")
    d = tmp_path / "data"
    run_script("download_data.py", "--input", tmp_path / "zh.parquet", "--output", d / "raw")
    run_pipeline(d, None, "--workers", "2")
    cp, _ = run_verify(d, tmp_path)
    st = status(cp.stdout)
    assert st[7] == "PASS", item_text(cp.stdout, 7)
    seven = item_text(cp.stdout, 7)
    assert "no English document in the corpus: not held to the minimum 2.0" in seven
    assert re.search(r"zh: [\d.]+ characters per token \(.*; minimum 0\.6\)", seven)
    # the same corpus held to a Chinese minimum it misses: a FAIL naming Chinese
    cp, _ = run_verify(d, tmp_path, "--min-cpt-zh", "50")
    assert status(cp.stdout)[7] == "FAIL"
    assert "each Chinese character takes several tokens" in item_text(cp.stdout, 7)
    assert all(st[i] == "PASS" for i in (1, 2, 3, 4, 8, 10)), cp.stdout
    windows = item_text(cp.stdout, 2).split("\n", 1)[1]
    # some window's start did cut a character: shown as "…", never as U+FFFD
    assert re.search(r"tokens [\d,]+\.\.[\d,]+: …", windows) and "\ufffd" not in windows


def test_two_verify_runs_at_once_do_not_share_a_work_folder(broken, tmp_path):
    """verify.py empties its work folder (.verify.partial) at its start and end: while one
    run holds it, a second stops with one line instead of breaking the first (they used
    to fail each other's items, and once hang)."""
    from pipeline.lock import FolderLock

    held = FolderLock(broken, "another verify.py", name="verify")
    try:
        cp, _ = run_verify(broken, tmp_path)
        assert cp.returncode == 2 and "Traceback" not in cp.stderr
        assert "verify's work folder" in cp.stderr and "is locked by" in cp.stderr
    finally:
        held.release()
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr


def _verify_under_file_size_limit(data: Path, report: Path, limit: int, *extra):
    """verify.py as run_verify runs it, under `ulimit -f`: a write past `limit` bytes fails
    with EFBIG, in the driver and in the workers it starts (a full disk, on every machine)."""
    import os
    import resource
    import subprocess
    import sys

    from conftest import ROOT

    def limit_file_size():
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    return subprocess.run([sys.executable, str(ROOT / "verify.py"), "--input", str(data),
                           "--output", str(report), *map(str, extra)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=600, preexec_fn=limit_file_size)


def test_its_own_failed_writes_are_one_line_and_keep_the_previous_report(broken, tmp_path):
    """A write of verify.py's own that fails is no FAIL of the data: one line naming the path
    and why, exit 2, and the previous report as it was. The scan's work folder failing
    gave FAILs of items 1, 7 and 8, exit 1 and a report of them over the good one; the
    .json failing left a new .md beside the old .json and a line that named no file."""
    cp, report = run_verify(broken, tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]

    def files():
        return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}

    before = files()
    assert set(before) == {"report.md", "report.json"}
    # the scan's files (band hashes, samples: 40-70 KB each on the sample) pass 30 KB
    cp = _verify_under_file_size_limit(broken, report, 30_000)
    err = cp.stderr.strip()
    assert cp.returncode == 2 and "[FAIL]" not in cp.stdout, cp.stdout[-2000:] + cp.stderr
    assert err.startswith("error: cannot write ") and "\n" not in err, err
    # the work folder, or the file in it whose write failed (a mapped one is named)
    assert re.search(r"\.verify\.partial(/\S+)?: file too large", err), err
    assert "report.md is unchanged" in err, err
    assert files() == before and not (broken / ".verify.partial").exists()
    # 100 windows: the scan and the .md (~66 KB) fit in 100 KB, the .json (~130 KB) does not
    cp = _verify_under_file_size_limit(broken, report, 100_000, "--windows", "100")
    err = cp.stderr.strip()
    assert cp.returncode == 2 and "10 of 10 items PASS" in cp.stdout, cp.stdout[-2000:] + err
    assert err.startswith("error: cannot write ") and "\n" not in err, err
    assert "report.json: file too large" in err and "report.md is unchanged" in err, err
    assert files() == before   # neither replaced, no temporary file left
    # a file where the report's folder goes: one line before any check (was a traceback)
    (tmp_path / "taken").write_text("not a folder")
    cp, _ = run_verify(broken, tmp_path / "taken")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr[-2000:]
    assert cp.stderr.strip() == f"error: --output {tmp_path / 'taken' / 'report.md'}: " \
                                f"{tmp_path / 'taken'} is a file, not a folder"


def test_a_retrained_tokenizer_makes_pack_stale_and_item_9_says_so(broken, tmp_path):
    """The tokenizer is one of pack's inputs: retraining it prints that pack's output is
    now stale (it printed nothing: only the main input was looked at), and item 9's
    chain is not 'fresh' any more."""
    cp = run_script("train_tokenizer.py", "--input", broken / "dedup", "--output",
                    broken / "tokenizer", "--vocab-size", "1900", "--workers", "2")
    assert "pack_manifest.json was built from the previous output and is now stale" in cp.stderr
    cp, _ = run_verify(broken, tmp_path)
    nine = item_text(cp.stdout, 9)
    assert status(cp.stdout)[9] == "FAIL" and "changed after pack_parallel.py read it" in nine
    assert "every manifest in the chain is fresh" not in nine


def test_a_tokenizer_trained_elsewhere_fails_item_9(broken, tmp_path):
    """Packed with a tokenizer.json that train_tokenizer.py did not write here (the same
    file, copied to a folder without its manifest): pack records no tokenizer manifest,
    and item 9, which asks for the whole chain, fails and says why."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(broken / "tokenizer" / "tokenizer.json", elsewhere / "tokenizer.json")
    run_script("pack_parallel.py", "--input", broken / "dedup", "--output", broken,
               "--tokenizer", elsewhere / "tokenizer.json", "--workers", "2")
    assert "tokenizer" not in json.loads((broken / "pack_manifest.json").read_text()) \
        .get("extra_inputs", {})
    cp, _ = run_verify(broken, tmp_path)
    nine = item_text(cp.stdout, 9)
    assert status(cp.stdout)[9] == "FAIL", nine
    assert "pack_manifest.json records no train_tokenizer manifest" in nine, nine
    assert "tokenizer from train_tokenizer.py" not in nine


def _edit_counts(manifest: Path, **add) -> None:
    m = json.loads(manifest.read_text())
    for k, v in add.items():
        m["counts"][k] += v
    manifest.write_text(json.dumps(m))


def test_a_truncated_bin_and_a_missing_final_eos_fail_item_1_and_item_4(broken, tmp_path):
    eos = json.loads((broken / "pack_manifest.json").read_text())["counts"]["eos_id"]
    with open(broken / "val.bin", "r+b") as f:   # the last token is no longer the EOS
        f.seek(-2, 2)
        f.write(np.array([eos + 1], np.uint16).tobytes())
    with open(broken / "train.bin", "r+b") as f:
        f.truncate(f.seek(0, 2) - 2)   # one token short
    cp, _ = run_verify(broken, tmp_path)
    assert cp.returncode == 1
    one, four = item_text(cp.stdout, 1), item_text(cp.stdout, 4)
    train = json.loads((broken / "pack_manifest.json").read_text())["counts"]["train"]["tokens"]
    assert f"train.bin is {2 * train - 2:,} bytes, manifest says 2 x {train:,}" in one, one
    assert "val.bin does not match its xxh3-128 digest" in one, one
    assert "val.bin does not end with EOS" in four and "packer truncated" in four, four


def test_documents_lost_between_stages_fail_item_10(broken, tmp_path):
    # dedup_exact says it wrote one more document than dedup_minhash read, and pack says
    # it packed one more than train.bin and val.bin hold
    _edit_counts(broken / "dedup_exact" / "manifest.json", docs_in=1, docs_out=1)
    _edit_counts(broken / "pack_manifest.json", docs_out=1, docs_in=1)
    cp, _ = run_verify(broken, tmp_path)
    ten = item_text(cp.stdout, 10)
    assert cp.returncode == 1 and status(cp.stdout)[10] == "FAIL"
    c = json.loads((broken / "dedup_exact" / "manifest.json").read_text())["counts"]
    assert f"dedup_minhash read {c['docs_out'] - 1:,} documents, the stage before wrote " \
           f"{c['docs_out']:,}" in ten, ten
    pc = json.loads((broken / "pack_manifest.json").read_text())["counts"]
    assert f"!= pack docs_out {pc['docs_out']:,}" in ten, ten


def test_the_report_leaves_the_files_beside_it_alone(pipeline_layout, tmp_path):
    """The report and its .json are written under names of their own before the renames:
    a user's report.md.tmp or report.json.new (the fixed names they had) is neither
    overwritten nor renamed away."""
    mine = {tmp_path / "report.md.tmp": b"draft", tmp_path / "report.json.new": b"notes",
            tmp_path / "report.json.tmp": b"more"}
    for p, b in mine.items():
        p.write_bytes(b)
    cp, report = run_verify(pipeline_layout, tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert {p: p.read_bytes() for p in mine if p.exists()} == mine
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(
        ["report.md", "report.json", *(p.name for p in mine)])
