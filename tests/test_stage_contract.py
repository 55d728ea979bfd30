"""The stage contract: manifests, stale-input refusal, atomic commit and resume."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import run_script
from pipeline.errors import StageError
from pipeline.manifest import check_input, read_manifest
from pipeline.shards import list_shards, read_table, write_table
from pipeline.staging import StageRun


def _raw(tmp_path: Path, rows: int) -> Path:
    src = tmp_path / "src.jsonl"
    src.write_text("".join(json.dumps({"text": f"document number {i} " * 20}) + "\n"
                           for i in range(rows)))
    out = tmp_path / "data" / "raw"
    run_script("download_data.py", "--input", src, "--output", out, "--shard-rows", 10)
    return out


def _downstream(raw: Path, out: Path, name="clean") -> dict:
    """A minimal stage: copy the input shards through StageRun, as every stage does."""
    run = StageRun(name, out, {"copy": True}, input_manifest=raw / "manifest.json")
    recs = [write_table(run.staging / s.name, read_table(s)) for s in list_shards(raw)]
    return run.commit(recs, {"docs_in": 1, "docs_out": 1, "bytes_in": 0, "bytes_out": 0,
                             "removed": {}})


def test_manifest_records_config_fingerprint_counts_timings(tmp_path):
    raw = _raw(tmp_path, 25)
    m = _downstream(raw, tmp_path / "data" / "cleaned")
    up = read_manifest(raw / "manifest.json")
    assert m["input"]["fingerprint"] == up["output_fingerprint"]
    assert m["input"]["manifest"] == "../raw/manifest.json"
    assert m["config"] == {"copy": True} and "total" in m["timings"]
    assert [f["name"] for f in m["files"]] == [s.name for s in list_shards(raw)]
    assert all(len(f["xxh3_128"]) == 32 for f in m["files"])


def test_missing_manifest_is_refused_naming_the_stage(tmp_path):
    raw = _raw(tmp_path, 5)
    (raw / "manifest.json").unlink()
    with pytest.raises(StageError, match="rerun download_data.py"):
        _downstream(raw, tmp_path / "data" / "cleaned")


def test_rerun_upstream_makes_downstream_stale(tmp_path):
    raw = _raw(tmp_path, 25)
    cleaned = tmp_path / "data" / "cleaned"
    _downstream(raw, cleaned)
    check_input(cleaned / "manifest.json")  # fresh: accepted
    # rerun the upstream stage with another setting: its output changes
    src = tmp_path / "src.jsonl"
    cp = run_script("download_data.py", "--input", src, "--output", raw, "--shard-rows", 7)
    assert "data/cleaned was built from the previous output and is now stale" in cp.stderr
    with pytest.raises(StageError, match=r"cleaned is stale: .* rerun clean.py"):
        check_input(cleaned / "manifest.json")
    # and a third stage reading the stale folder is refused too, naming the stage to rerun
    with pytest.raises(StageError, match="rerun clean.py"):
        _downstream(cleaned, tmp_path / "data" / "dedup_exact", name="dedup_exact")


def test_identical_rerun_keeps_downstream_fresh(tmp_path):
    raw = _raw(tmp_path, 25)
    cleaned = tmp_path / "data" / "cleaned"
    _downstream(raw, cleaned)
    # --force: converted again (an unforced rerun would find its output current and do
    # nothing), to the same bytes, the same fingerprint: still fresh (check_input raises
    # on a stale input)
    cp = run_script("download_data.py", "--input", tmp_path / "src.jsonl", "--output", raw,
                    "--shard-rows", 10, "--force")
    assert "up to date" not in cp.stdout
    m = check_input(cleaned / "manifest.json")
    assert m["input"]["fingerprint"] == read_manifest(raw / "manifest.json")["output_fingerprint"]


def test_edited_output_file_is_detected(tmp_path):
    raw = _raw(tmp_path, 25)
    shard = list_shards(raw)[0]
    write_table(shard, pa.table({"id": ["x"], "text": ["tampered"], "source": ["s"]}))
    with pytest.raises(StageError, match="changed size"):
        check_input(raw / "manifest.json")


def test_uncommitted_run_leaves_previous_output_and_resumes(tmp_path):
    raw = _raw(tmp_path, 25)
    out = tmp_path / "data" / "cleaned"
    first = _downstream(raw, out)
    # a run that dies before commit: staging holds partial work, the output is untouched
    run = StageRun("clean", out, {"copy": True, "threshold": 2}, input_manifest=raw / "manifest.json")
    (run.staging / "part-done.marker").write_text("finished task")
    assert read_manifest(out / "manifest.json") == first
    # same config again: the staging folder is reused (resume) ...
    again = StageRun("clean", out, {"copy": True, "threshold": 2}, input_manifest=raw / "manifest.json")
    assert again.resumed and (again.staging / "part-done.marker").exists()
    # ... another config starts afresh
    other = StageRun("clean", out, {"copy": True, "threshold": 3}, input_manifest=raw / "manifest.json")
    assert not other.resumed and not (other.staging / "part-done.marker").exists()


def test_output_is_current_only_while_a_run_would_write_the_same_bytes(tmp_path):
    raw = _raw(tmp_path, 25)
    (tmp_path / "t").mkdir()
    tok = _raw(tmp_path / "t", 5)            # stands in for an extra input (pack's tokenizer)
    out = tmp_path / "data" / "cleaned"
    run = StageRun("clean", out, {"copy": True}, input_manifest=raw / "manifest.json",
                   extra_inputs={"tok": tok / "manifest.json"})
    recs = [write_table(run.staging / s.name, read_table(s)) for s in list_shards(raw)]
    first = run.commit(recs, {"docs_in": 1, "docs_out": 1, "bytes_in": 0, "bytes_out": 0,
                              "removed": {}})

    def again(config=None) -> StageRun:
        return StageRun("clean", out, config or {"copy": True}, reuse_current=True,
                        input_manifest=raw / "manifest.json",
                        extra_inputs={"tok": tok / "manifest.json"})

    same = again()
    assert same.current == first and not same.staging.exists()   # nothing staged
    assert "cleaned is up to date" in same.current_line()
    assert "unfinished" not in same.current_line()
    # a --force run that died left its staging folder: the line says so, and leaves it
    forced = StageRun("clean", out, {"copy": True}, input_manifest=raw / "manifest.json",
                      extra_inputs={"tok": tok / "manifest.json"})
    (forced.staging / "part-00000.parquet").write_bytes(b"x" * 2500)
    line = again().current_line()
    assert re.search(r"\.cleaned\.partial \(2\.\d KB\): rerun with --force", line)
    assert forced.staging.is_dir()
    shutil.rmtree(forced.staging)
    # not asked to reuse (--force): the stage runs
    assert StageRun("clean", out, {"copy": True}, input_manifest=raw / "manifest.json",
                    extra_inputs={"tok": tok / "manifest.json"}).current is None
    assert again({"copy": True, "threshold": 2}).current is None     # another config
    shard = out / first["files"][0]["name"]
    good = shard.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 1
    for bad in (bytes(flipped), good[:-10], good + b"x"):   # edited in place, cut, grown
        shard.write_bytes(bad)
        assert again().current is None
    shard.write_bytes(good)
    assert again().current == first
    mfile = out / "manifest.json"
    text = mfile.read_text()
    for bad in (text[: len(text) // 2], text.replace('"version": 1', '"version": 0'), "[]"):
        mfile.write_text(bad)
        assert again().current is None            # unreadable, older or foreign manifest
    mfile.write_text(text)
    assert again().current == first
    # an input rerun with other output: the input fingerprint no longer matches
    run_script("download_data.py", "--input", tmp_path / "t" / "src.jsonl", "--output", tok,
               "--shard-rows", 2)
    assert again().current is None
    run_script("download_data.py", "--input", tmp_path / "t" / "src.jsonl", "--output", tok,
               "--shard-rows", 10)
    assert again().current == first                # the same bytes again: current again
    run_script("download_data.py", "--input", tmp_path / "src.jsonl", "--output", raw,
               "--shard-rows", 7)
    assert again().current is None


def test_crash_between_the_commit_renames_is_mended(tmp_path):
    import os

    raw = _raw(tmp_path, 25)
    out = tmp_path / "data" / "cleaned"
    first = _downstream(raw, out)
    old = out.parent / ".cleaned.old"
    # crash after the old output was moved aside, before the staged one was moved in
    os.replace(out, old)
    StageRun("clean", out, {"copy": True, "x": 1}, input_manifest=raw / "manifest.json")
    assert read_manifest(out / "manifest.json") == first and not old.exists()
    # same crash, but the staged output was complete (its manifest written): finish it
    run = StageRun("clean", out, {"copy": True, "x": 2}, input_manifest=raw / "manifest.json")
    recs = [write_table(run.staging / s.name, read_table(s)) for s in list_shards(raw)]
    from pipeline.manifest import write_json
    write_json(run.staging / "manifest.json", {"stage": "clean", "files": recs,
                                               "output_fingerprint": "new"})
    os.replace(out, old)
    StageRun("clean", out, {"copy": True, "x": 3}, input_manifest=raw / "manifest.json")
    assert read_manifest(out / "manifest.json")["output_fingerprint"] == "new"
    assert not old.exists() and not (out / "_run.json").exists()


def _files_run(out: Path, version: int) -> tuple[StageRun, list[dict]]:
    """A stage that writes files into a folder, as pack writes train.bin, val.bin and
    pack_report/ into data/: version decides their bytes."""
    from pipeline.shards import file_record

    run = StageRun("files", out, {"v": version}, files_into=True, manifest_name="m.json")
    (run.staging / "rep").mkdir(exist_ok=True)
    for name in ("a.bin", "b.bin", "rep/x.txt"):
        (run.staging / name).write_text(f"{name} of run {version}\n")
    return run, [file_record(run.staging / n, name=n) for n in ("a.bin", "b.bin", "rep/x.txt")]


def _second_run(out: Path) -> tuple[dict, StageRun, list[dict]]:
    """Run 1 committed into out; (its manifest, run 2 ready to commit, run 2's records)."""
    from pipeline.manifest import read_manifest

    run, recs = _files_run(out, 1)
    run.commit(recs, {"rows": 3})
    return (read_manifest(out / "m.json"), *_files_run(out, 2))


def _files_now(out: Path) -> dict[str, str]:
    return {n: (out / n).read_text() for n in ("a.bin", "b.bin", "rep/x.txt")
            if (out / n).exists()}


def _crash_commit_at(monkeypatch, run, recs, n: int) -> bool:
    """Commit, the process dying at the n-th os.replace or shutil.rmtree (0: the first);
    True when the commit finished first."""
    import os

    real = {"replace": os.replace, "rmtree": shutil.rmtree}
    calls = [0]

    def crashing(fn):
        def call(*a, **k):
            calls[0] += 1
            if calls[0] > n:
                raise KeyboardInterrupt   # the process dies here: nothing is undone
            return fn(*a, **k)
        return call

    monkeypatch.setattr(os, "replace", crashing(real["replace"]))
    monkeypatch.setattr(shutil, "rmtree", crashing(real["rmtree"]))
    try:
        run.commit(recs, {"rows": 3})
        return True
    except KeyboardInterrupt:
        return False
    finally:
        monkeypatch.setattr(os, "replace", real["replace"])
        monkeypatch.setattr(shutil, "rmtree", real["rmtree"])


def test_a_crash_at_any_rename_of_a_files_commit_is_mended(tmp_path, monkeypatch):
    """Files committed into a folder (pack's train.bin, val.bin, pack_report/) are all or
    none: a crash at any rename of the commit leaves, once the next run has started, the
    previous set whole with its manifest and the new one whole in the staging folder (the
    rerun resumes and commits it), or the new set whole with its manifest."""
    from pipeline.manifest import read_manifest as read
    from pipeline.shards import file_record

    crashed_at, mended = [], set()
    for n in range(100):
        out = tmp_path / f"d{n}"
        old, run, recs = _second_run(out)
        finished = _crash_commit_at(monkeypatch, run, recs, n)
        if finished:
            break
        crashed_at.append(n)
        # the rerun: _recover_files mends it first
        again = StageRun("files", out, {"v": 2}, files_into=True, manifest_name="m.json")
        now = read(out / "m.json")
        assert not (out / ".files.old").exists()
        mended.add("previous" if now == old else "new")
        if now == old:
            assert _files_now(out) == {k: f"{k} of run 1\n" for k in ("a.bin", "b.bin", "rep/x.txt")}
            assert again.resumed and _files_now(again.staging) == {
                k: f"{k} of run 2\n" for k in ("a.bin", "b.bin", "rep/x.txt")}
            again.commit([file_record(again.staging / k, name=k)
                          for k in ("a.bin", "b.bin", "rep/x.txt")], {"rows": 3})
            assert not (out / ".files.partial").exists()
        assert _files_now(out) == {k: f"{k} of run 2\n" for k in ("a.bin", "b.bin", "rep/x.txt")}
        assert read(out / "m.json")["config"] == {"v": 2} and not (out / ".files.old").exists()
    # 4 renames aside, 4 in, then the previous set deleted
    assert finished and len(crashed_at) >= 9 and mended == {"previous", "new"}, crashed_at


def test_a_crash_once_a_files_commit_is_through_leaves_no_unfinished_run(tmp_path, monkeypatch):
    """Once the new manifest is in place, a crash while the commit deletes the previous set
    or its staging folder leaves, after the next run's start, nothing beside the new set:
    an up-to-date rerun no longer finds the staging folder (its key and task parts) and
    calls it an unfinished run to resume with --force."""
    from pipeline.manifest import read_manifest as read

    through = 0
    for n in range(100):
        out = tmp_path / f"d{n}"
        _, run, recs = _second_run(out)
        (run.staging / "_parts").mkdir()
        (run.staging / "_parts" / "a-00000.bin").write_text("a part\n")
        if _crash_commit_at(monkeypatch, run, recs, n):
            break
        if not (out / "m.json").exists() or read(out / "m.json")["config"] != {"v": 2}:
            continue   # before the new manifest: the other test's case
        through += 1
        again = StageRun("files", out, {"v": 2}, files_into=True, manifest_name="m.json",
                         reuse_current=True)
        assert again.current is not None
        assert not (out / ".files.old").exists() and not (out / ".files.partial").exists(), n
        assert "unfinished run" not in again.current_line()
        assert _files_now(out) == {k: f"{k} of run 2\n" for k in ("a.bin", "b.bin", "rep/x.txt")}
    assert through >= 2


def test_a_crash_mended_by_putting_the_previous_set_back_keeps_the_task_markers(
        tmp_path, monkeypatch):
    """The commit moves the task logs (with their completion markers) out of the staging
    folder before its renames; a crash mended by putting the new set back into the staging
    folder brings them back too, so the rerun resumes its finished tasks instead of
    running them all again (as a rename that fails already did)."""
    from pipeline.manifest import read_manifest as read

    rolled_back = 0
    for n in range(100):
        out = tmp_path / f"d{n}"
        old, run, recs = _second_run(out)
        (run.staging / "_logs" / "encode" / "completions").mkdir(parents=True)
        (run.staging / "_logs" / "encode" / "completions" / "00000").touch()
        if _crash_commit_at(monkeypatch, run, recs, n):
            break
        if not (out / ".files.old").is_dir():
            continue   # before the commit's renames, or after them
        again = StageRun("files", out, {"v": 2}, files_into=True, manifest_name="m.json")
        if read(out / "m.json") != old:
            continue
        rolled_back += 1
        assert again.resumed
        assert (again.staging / "_logs" / "encode" / "completions" / "00000").exists(), n
        assert not (out / "logs" / "files").exists()
    assert rolled_back >= 4


def test_unbalanced_counts_are_never_committed(tmp_path):
    raw = _raw(tmp_path, 5)
    out = tmp_path / "data" / "cleaned"
    run = StageRun("clean", out, {"copy": True}, input_manifest=raw / "manifest.json")
    with pytest.raises(StageError, match="5 documents in != 3 out \\+ 1 removed"):
        run.commit([], {"docs_in": 5, "docs_out": 3, "removed": {"too_short": 1}})
    assert not out.exists()


def test_an_algorithms_refusal_becomes_one_line_and_a_library_error_does_not():
    """algorithms/ raises ValueError for bad input (it imports nothing of pipeline/); the
    skeleton turns exactly those into the one-line error, which promises no resume (the
    same input fails the same way). A ValueError raised inside a library an algorithm
    calls is a bug, and keeps its traceback."""
    import numpy as np

    from algorithms import loader, packing
    from pipeline.errors import InputError, refusal

    with pytest.raises(ValueError) as e:
        loader.bin_path("test")
    bad = refusal(e.value)
    assert isinstance(bad, InputError) and isinstance(bad, StageError)
    assert str(bad) == "split 'test': use one of train, val"
    with pytest.raises(ValueError) as e:     # numpy's, from inside val_threshold
        packing.val_threshold(["not", "a hash"], 0.5)
    assert refusal(e.value) is None
    with pytest.raises(ValueError) as e:     # not raised in algorithms/
        np.zeros(2).reshape(3)
    assert refusal(e.value) is None
