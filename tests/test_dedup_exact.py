"""dedup_exact.py: digests, first-occurrence selection (in memory and spilled), and the
stage on the bundled sample against the tutorial's own exact_dedup."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE, run_script

from algorithms import exact_dedup as de
from pipeline.errors import StageError
from pipeline.tables import parse_size
from pipeline.shards import list_shards
from pipeline.units import plan_units
# section 3.2 verbatim, kept once in the benchmark: the reference the stage must agree with
from bench_dedup_exact import exact_dedup as tutorial_exact_dedup


def test_normalise_and_digest():
    assert de.normalise("  Hello\t\tWORLD \n\u3000中文 ") == "hello world 中文"
    assert de.normalise(None) == ""
    d = de.digest("Hello   world")
    assert isinstance(d, bytes) and len(d) == 16          # 128 bits, bytes, not hex
    assert d == de.digest("hello world\n") != de.digest("hello  worlds")
    arr = de.digests_to_array([d, de.digest("x")])
    assert arr.dtype == np.uint64 and arr.shape == (2, 2)
    assert arr[0].tobytes() != d  # integers, big-endian words: hi, lo
    assert int(arr[0, 0]).to_bytes(8, "big") + int(arr[0, 1]).to_bytes(8, "big") == d


def test_compiled_digests_are_digest_of_each_text():
    """algorithms/exact_dedup_fast.py (what the stage runs) against digest() (section
    3.2's definition): the sample; every code point, in pieces of 4,096 with every kind
    of whitespace between them; and texts built on the corner cases: whitespace runs at
    either end and alone, empty and null texts, capital sigma and U+0130 (left to
    digest()), characters whose lowercase is longer in UTF-8, on a sliced column."""
    import pyarrow as pa

    from algorithms import exact_dedup_fast as fast

    ws = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    every = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    pieces = ["".join(every[i:i + 4096]) + ws[(i // 4096) % len(ws)] * 3
              for i in range(0, len(every), 4096)]
    corner = ["", None, " ", "\u3000\u2028 \t", "  Hello\t\tWORLD \n\u3000中文 ",
              "ΣΊΣΥΦΟΣ ΟΔΟΣ", "İstanbul İ", "ȺȾ ⱥ Ɐ", "\x1c\x1dA\x1e\x1f", "a" + "\x85" * 5 + "b",
              "ǅ ǈ ǋ ǲ", "\u0345\u0399 ΘΕΟΣ.", "k\u212a\u2126"]
    texts = [t for t in pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()]
    for batch in (texts, pieces, corner, corner[::-1] * 3):
        col = pa.array(["pad"] + batch, pa.string()).slice(1)
        assert fast.batch_digests(col) == [de.digest(t) for t in batch]
    # most documents need no help from digest(): the kernel's own bytes are what count
    col = pa.array(texts, pa.string())
    data, offsets = fast.text_buffers(col)
    special = np.zeros(len(texts), np.bool_)
    out = np.empty(2 * len(data) + 8, np.uint8)
    out_off = np.empty(len(texts) + 1, np.int64)
    fast._normalise_docs(data, offsets, fast._char_map(), out, out_off, special)
    assert special.sum() < len(texts) // 100
    assert all(out[out_off[d]:out_off[d + 1]].tobytes() == de.normalise(t).encode("utf-8")
               for d, t in enumerate(texts) if not special[d])


def reference_first(keys: list[int]) -> tuple[list[int], list[int]]:
    first: dict[int, int] = {}
    dup, kept = [], []
    for i, k in enumerate(keys):
        if k in first:
            dup.append(i)
            kept.append(first[k])
        else:
            first[k] = i
    return dup, kept


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 16])
def test_first_occurrences_matches_a_dict(chunk):
    rng = np.random.default_rng(chunk)
    n = 5000
    hi = rng.integers(0, 50, n).astype(np.uint64)     # many collisions on hi alone
    lo = rng.integers(0, 40, n).astype(np.uint64)
    dup, kept = de.first_occurrences(hi, lo, chunk=chunk)
    order = np.argsort(dup)
    want_dup, want_kept = reference_first([int(h) * 1000 + int(l) for h, l in zip(hi, lo)])
    assert dup[order].tolist() == want_dup
    assert kept[order].tolist() == want_kept


def test_spilled_selection_equals_in_memory(tmp_path):
    rng = np.random.default_rng(7)
    files, offsets = [], [0]
    for s in range(4):
        n = int(rng.integers(50, 300))
        hl = rng.integers(0, 30, size=(n, 2)).astype(np.uint64)
        f = tmp_path / f"{s:05d}.npy"
        np.save(f, hl)
        files.append(f)
        offsets.append(offsets[-1] + n)
    offsets = np.array(offsets)
    d1, k1, p1 = de.select_first(files, offsets, budget=10**9, spill_dir=tmp_path / "spill")
    d2, k2, p2 = de.select_first(files, offsets, budget=1000, spill_dir=tmp_path / "spill")
    assert p1 == 1 and p2 > 4
    assert d1.tolist() == d2.tolist() and k1.tolist() == k2.tolist()
    assert len(d1) > 0 and (k1 < d1).all()
    assert not (tmp_path / "spill").exists()


def test_parse_size():
    assert parse_size("2GB", "--memory-budget") == 2 * 10**9
    assert parse_size("512mb", "--memory-budget") == 512 * 10**6
    assert parse_size("1GiB", "--memory-budget") == 2**30
    for bad in ("lots", "0", "-1GB", "5XB"):
        with pytest.raises(StageError, match="--memory-budget"):
            parse_size(bad, "--memory-budget")


@pytest.fixture(scope="module")
def exact_runs(sample_layout, tmp_path_factory):
    """The stage on the raw sample three ways: 2 workers, 1 worker, 1 worker spilling."""
    base = tmp_path_factory.mktemp("exact")
    outs = {}
    for name, args in {"w2": ["--workers", "2"], "w1": ["--workers", "1"],
                       "spill": ["--workers", "1", "--memory-budget", "20KB"]}.items():
        out = base / name / "dedup_exact"
        cp = run_script("dedup_exact.py", "--input", sample_layout / "raw", "--output", out, *args)
        outs[name] = (out, cp)
    return outs


def test_stage_agrees_with_the_tutorial(exact_runs):
    out, cp = exact_runs["w2"]
    t = pq.read_table(SAMPLE, columns=["id", "text", "planted"]).to_pylist()
    kept_ref = list(tutorial_exact_dedup([r["text"] for r in t]))
    # the generator yields the very str objects it was given: map them back to their ids
    ids_ref, k = [], 0
    for r in t:
        if k < len(kept_ref) and r["text"] is kept_ref[k]:
            ids_ref.append(r["id"])
            k += 1
    got = pq.read_table(sorted(out.glob("*.parquet")), columns=["id"]).column("id").to_pylist()
    assert len(got) == len(kept_ref)
    assert got == ids_ref                       # same documents, first occurrences, in order
    removed = pq.read_table(out / "report" / "removed.parquet").to_pylist()
    planted = {r["id"] for r in t if r["planted"] == "exact_dup"}
    assert planted <= {r["id"] for r in removed}
    pos = {r["id"]: i for i, r in enumerate(t)}
    assert all(pos[r["kept_id"]] < pos[r["id"]] for r in removed)


def test_counts_report_and_layout(exact_runs, sample_layout):
    out, cp = exact_runs["w2"]
    m = json.loads((out / "manifest.json").read_text())
    c = m["counts"]
    assert c["docs_in"] == c["docs_out"] + sum(c["removed"].values())
    assert c["removed"]["exact_duplicate"] >= 30
    raw_bytes = json.loads((sample_layout / "raw" / "manifest.json").read_text())["counts"]["text_bytes"]
    assert c["bytes_in"] == raw_bytes and 0 < c["bytes_out"] < c["bytes_in"]
    units = plan_units(list_shards(sample_layout / "raw"))
    assert sorted(p.name for p in out.glob("*.parquet")) == [u.name for u in units]
    assert sorted(p.name for p in (out / "report").iterdir()) == [
        "dedup_exact_stats.json", "dedup_exact_stats.md", "removed.parquet", "resources.json",
        "resources.md"]
    assert not (out / "_work").exists() and not (out / "_results").exists()
    assert "largest duplicate groups" in cp.stdout and "documents" in cp.stdout
    stats = json.loads((out / "report" / "dedup_exact_stats.json").read_text())
    assert stats["largest_groups"] and stats["largest_groups"][0]["copies"] >= 2
    # group sizes add up to the removals: a group of n copies removed n - 1
    assert sum((int(n) - 1) * k for n, k in stats["group_sizes"].items()) == \
        c["removed"]["exact_duplicate"]


def test_output_identical_for_any_workers_and_when_spilling(exact_runs):
    (a, _), (b, _), (c, cp) = exact_runs["w2"], exact_runs["w1"], exact_runs["spill"]
    assert "hash partitions" in cp.stdout
    assert json.loads((c / "report" / "dedup_exact_stats.json").read_text())["partitions"] > 1
    for f in sorted(a.glob("*.parquet")) + [a / "report" / "removed.parquet"]:
        rel = f.relative_to(a)
        assert f.read_bytes() == (b / rel).read_bytes() == (c / rel).read_bytes(), rel


def test_bad_input_is_one_line_error_and_keeps_previous_output(exact_runs, tmp_path, sample_layout):
    out, _ = exact_runs["w1"]
    before = {p.name: p.read_bytes() for p in out.glob("*.parquet")}
    cp = run_script("dedup_exact.py", "--input", sample_layout / "raw", "--output", out,
                    "--memory-budget", "lots", check=False)
    assert cp.returncode == 2 and "--memory-budget" in cp.stderr and "Traceback" not in cp.stderr
    cp = run_script("dedup_exact.py", "--input", tmp_path / "missing", "--output", out, check=False)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in out.glob("*.parquet")} == before


def test_bench_smoke():
    import bench_dedup_exact

    texts = pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist()[:150]
    res = bench_dedup_exact.run(texts + texts[:20], quick=True)
    assert res["kept"] == len(set(de.normalise(t) for t in texts))
    for r in res["rows"]:
        assert {"name", "mb_per_s_per_core", "ratio", "target", "ok"} <= set(r)
        assert r["mb_per_s_per_core"] > 0


def test_a_budget_that_needs_too_many_open_files_is_refused_first():
    """The spilled selection keeps 3 files open per partition: a --memory-budget so small
    that they pass `ulimit -n` is one line naming the budget that fits, before any work
    (it was 'Too many open files' in the middle of the run)."""
    import resource

    import dedup_exact

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        with pytest.raises(StageError, match=r"--memory-budget 300: 390 spill partitions would "
                                             r"keep 1,170 files open, more than this process "
                                             r"may \(1,024, ulimit -n\)"):
            dedup_exact.check_spill_files(1821, 300, "300")
        dedup_exact.check_spill_files(1821, 365, "365")     # the least it names: fits
        with pytest.raises(StageError):
            dedup_exact.check_spill_files(1821, 364, "364")
        # in KB and MB too, the budget it names fits (1,344 B, shown as 1.3 KB, did not)
        from pipeline.tables import parse_size

        for docs in (7_000, 9_999, 123_457, 5_000_001):
            with pytest.raises(StageError) as e:
                dedup_exact.check_spill_files(docs, 10, "10")
            named = str(e.value).rsplit("at least ", 1)[1].replace(" ", "")
            dedup_exact.check_spill_files(docs, parse_size(named, "--memory-budget"), named)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_refusal_before_any_task_leaves_no_staging_folder(sample_layout, tmp_path):
    """A run stopped by a one-line error before any task finished (here the spill files'
    check) says nothing of 'work kept' and leaves no staging folder behind."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))   # the stage inherits it
    try:
        cp = run_script("dedup_exact.py", "--input", sample_layout / "raw", "--output",
                        tmp_path / "dx", "--memory-budget", "1B", check=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert cp.returncode == 2 and "raise --memory-budget to at least" in cp.stderr
    assert "kept in" not in cp.stderr and not (tmp_path / ".dx.partial").exists()


def test_a_small_input_digests_without_numba_and_gives_the_same_output(sample_layout, tmp_path,
                                                                       monkeypatch):
    """Below KERNEL_FROM_BYTES of text (the sample: 4 MB), the digests are the readable
    version's and no process of the run imports numba (its set-up, about 0.45 CPU s, cost
    more than the kernel saved); the output is byte for byte the kernel's."""
    from conftest import run_watching_imports

    import dedup_exact

    def args(folder):
        return argparse.Namespace(input=str(folder), engine="fast")

    py = tmp_path / "py"
    assert not dedup_exact.use_kernel(args(sample_layout / "raw"))
    log = run_watching_imports("dedup_exact.py", ["--input", sample_layout / "raw", "--output",
                                                  py, "--workers", "2"], "numba", tmp_path)
    assert log == "", log
    monkeypatch.setattr(dedup_exact, "KERNEL_FROM_BYTES", 0)   # the kernel, in this process
    assert dedup_exact.use_kernel(args(sample_layout / "raw"))
    kernel = tmp_path / "kernel"
    assert dedup_exact.main(["--input", str(sample_layout / "raw"), "--output", str(kernel),
                             "--workers", "1"]) == 0
    parts = sorted(p.name for p in py.glob("part-*.parquet"))
    assert parts and parts == sorted(p.name for p in kernel.glob("part-*.parquet"))
    for name in parts:
        assert (py / name).read_bytes() == (kernel / name).read_bytes()
    fp = [json.loads((d / "manifest.json").read_text())["output_fingerprint"] for d in (py, kernel)]
    assert fp[0] == fp[1]
    # an input whose size cannot be read: the kernel, as before
    assert dedup_exact.use_kernel(args(tmp_path / "nowhere"))
    # the reference engine never uses the kernel
    assert not dedup_exact.use_kernel(argparse.Namespace(input=str(tmp_path / "nowhere"),
                                                         engine="reference"))
