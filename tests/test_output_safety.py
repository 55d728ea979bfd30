"""The stage skeleton owns the output's safety (pipeline/lock.py, pipeline/disk.py):

- a run locks its output: a second run on it exits 2 with one line naming the process
  and host that hold it; a lock left by a dead process is taken over, with a line;
- a run does not read an input another run is writing, and a run does not rewrite an
  output another run is reading;
- a full disk, a read-only folder or a permission error gives one line naming the
  folder, the space needed and the space free, exit 2; the previous output stays
  byte-identical, and a rerun after the fault is mended equals a fresh run; a run warns
  before any work when the space it needs is not free; a run that fails while it takes
  its locks or makes its staging folder leaves none of them behind.

Real processes, real locks, a real small file system (a tmpfs mounted for the test:
that needs root, as CI has; without it those tests are skipped, saying so).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, run_script, snapshot


def _copy_raw(sample_layout: Path, tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    shutil.copytree(sample_layout / "raw", d / "raw")
    return d


def _start(script: str, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _wait_for_lock(lock: Path, proc: subprocess.Popen, timeout: float = 60) -> dict:
    """The holder a lock file names, once the process has written it."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before locking: {proc.stderr.read()}")
        try:
            h = json.loads(lock.read_text())
            if h.get("pid") == proc.pid:
                return h
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"{lock} never named pid {proc.pid}")


def _one_error_line(cp) -> str:
    lines = cp.stderr.strip().splitlines()
    errors = [x for x in lines if x.startswith("error: ")]
    assert cp.returncode == 2, cp.stderr
    assert len(errors) == 1 and "Traceback" not in cp.stderr, cp.stderr
    return errors[0]


def _data_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "report" not in p.parts and p.name != "manifest.json"}


def test_a_second_run_on_the_same_output_stops_naming_the_first(sample_layout, tmp_path):
    d = _copy_raw(sample_layout, tmp_path)
    first = _start("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--workers", 2)
    try:
        holder = _wait_for_lock(d / ".cleaned.lock", first)
        os.killpg(first.pid, signal.SIGSTOP)          # hold the lock as long as we like
        cp = run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                        "--min-chars", 300, check=False)
        line = _one_error_line(cp)
        assert f"pid {first.pid} on host {socket.gethostname()}" in line
        assert "is locked by clean.py" in line and holder["since"] in line
        # a sweep writes beside the output too: it waits its turn the same way
        cp = run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                        "--sweep", "min_chars=100,300", check=False)
        assert f"pid {first.pid}" in _one_error_line(cp)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert first.wait(120) == 0, first.stderr.read()
    assert not (d / ".cleaned.lock").exists()          # released at the end
    run_script("clean.py", "--input", d / "raw", "--output", tmp_path / "fresh")
    assert _data_files(d / "cleaned") == _data_files(tmp_path / "fresh")


def test_a_lock_left_by_a_dead_run_is_taken_over(sample_layout, tmp_path):
    d = _copy_raw(sample_layout, tmp_path)
    first = _start("dedup_exact.py", "--input", d / "raw", "--output", d / "dx", "--workers", 2)
    _wait_for_lock(d / ".dx.lock", first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert json.loads((d / ".dx.lock").read_text())["pid"] == first.pid   # left behind
    cp = run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "dx")
    assert (f"took over the lock of {d / 'dx'}" in cp.stderr or "took over the lock of" in cp.stderr)
    assert f"pid {first.pid}" in cp.stderr and "that process is gone" in cp.stderr
    run_script("dedup_exact.py", "--input", d / "raw", "--output", tmp_path / "fresh")
    assert _data_files(d / "dx") == _data_files(tmp_path / "fresh")


def test_no_run_reads_an_input_being_written_nor_rewrites_one_being_read(sample_layout,
                                                                          tmp_path):
    d = _copy_raw(sample_layout, tmp_path)
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned")
    writer = _start("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                    "--min-chars", 300)
    try:
        _wait_for_lock(d / ".cleaned.lock", writer)
        os.killpg(writer.pid, signal.SIGSTOP)
        cp = run_script("dedup_exact.py", "--input", d / "cleaned", "--output", d / "dx",
                        check=False)
        line = _one_error_line(cp)
        assert "cleaned is locked by clean.py" in line and f"pid {writer.pid}" in line
        assert not (d / "dx").exists() and not (d / ".dx.partial").exists()
    finally:
        os.killpg(writer.pid, signal.SIGCONT)
    assert writer.wait(120) == 0
    # the other way round: a reader holds the input, a rewrite of it waits
    reader = _start("dedup_exact.py", "--input", d / "cleaned", "--output", d / "dx")
    try:
        t0 = time.time()
        while not list(d.glob(".cleaned.lock.reader-*")):
            assert time.time() - t0 < 60 and reader.poll() is None, reader.stderr.read()
            time.sleep(0.02)
        os.killpg(reader.pid, signal.SIGSTOP)
        before = snapshot(d / "cleaned")
        cp = run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                        "--min-chars", 400, check=False)
        line = _one_error_line(cp)
        assert "is being read by dedup_exact.py" in line and f"pid {reader.pid}" in line
        assert snapshot(d / "cleaned") == before
    finally:
        os.killpg(reader.pid, signal.SIGCONT)
    assert reader.wait(120) == 0
    assert not list(d.glob(".cleaned.lock*"))       # the last reader tidied up


def test_a_lock_from_another_host_is_honoured_while_it_is_fresh(sample_layout, tmp_path):
    d = _copy_raw(sample_layout, tmp_path)
    lock = d / ".dx.lock"
    lock.write_text(json.dumps({"pid": 4242, "host": f"elsewhere-{uuid.uuid4().hex[:6]}",
                                "script": "dedup_exact.py", "since": "2026-12-01T10:00:00Z"}))
    cp = run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "dx", check=False)
    line = _one_error_line(cp)
    assert "pid 4242 on host elsewhere-" in line and "another host" in line
    old = time.time() - 3600
    os.utime(lock, (old, old))              # its holder stopped touching it an hour ago
    cp = run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "dx")
    assert "took over the lock" in cp.stderr and "minutes ago" in cp.stderr


# --------------------------------------------------------------------------------------
# A full disk, a read-only folder, a permission error.
# --------------------------------------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path):
    """A 32 MB tmpfs mounted at tmp_path/fs (root only), unmounted afterwards."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    cp = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)],
                        capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({cp.stderr.strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(fs: Path, leave: int) -> Path:
    """A ballast file that leaves about `leave` bytes free on fs."""
    ballast = fs / "ballast"
    free = shutil.disk_usage(fs).free
    with open(ballast, "wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(0, free - leave))
    return ballast


@pytest.mark.parametrize("script", ["clean.py", "pack_parallel.py"])
def test_a_full_disk_is_one_line_and_loses_nothing(sample_layout, small_fs, tmp_path, script,
                                                   tok_dir):
    d = small_fs / "data"
    shutil.copytree(sample_layout / "raw", d / "raw")
    if script == "clean.py":
        first = ["--input", d / "raw", "--output", d / "out"]
        again = first + ["--min-chars", 300]
        fresh = ["--input", d / "raw", "--output", tmp_path / "fresh", "--min-chars", 300]
        out, fresh_out = d / "out", tmp_path / "fresh"
    else:
        common = ["--tokenizer", tok_dir / "tokenizer.json", "--input", d / "raw"]
        first = common + ["--output", d]
        again = first + ["--seed", 7]
        fresh = common + ["--output", tmp_path, "--seed", 7]
        out, fresh_out = d, tmp_path
    run_script(script, *first, "--workers", 2)
    before = snapshot(out)
    ballast = _fill(small_fs, 150_000)
    cp = run_script(script, *again, "--workers", 2, check=False)
    line = _one_error_line(cp)
    assert "no space left on the device" in line and "needs about" in line and "free" in line
    assert "is unchanged" in line
    assert "warning:" in cp.stderr and "it may stop for lack of space" in cp.stderr
    after = {k: v for k, v in snapshot(out).items() if not k.startswith(".pack_parallel.partial")}
    assert after == before                  # nothing lost or touched (the staging is kept)
    ballast.unlink()
    run_script(script, *again, "--workers", 2)                     # resumes, completes
    run_script(script, *fresh, "--workers", 2)
    if script == "clean.py":
        assert _data_files(out) == _data_files(fresh_out)
    else:
        for name in ("train.bin", "val.bin"):
            assert (out / name).read_bytes() == (fresh_out / name).read_bytes()


def test_a_read_only_output_is_one_line(sample_layout, small_fs):
    d = small_fs / "data"
    shutil.copytree(sample_layout / "raw", d / "raw")
    run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "dx")
    before = snapshot(d / "dx")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        cp = run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "dx",
                        "--task-mb", 1, check=False)
        line = _one_error_line(cp)
        assert "read-only" in line and "free" in line and str(small_fs.name) in line
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    assert snapshot(d / "dx") == before


MAP_A_FILE = """
import errno, sys
import numpy as np
from pipeline.work_files import mapped_npy
path, rows = sys.argv[1], int(sys.argv[2])
try:
    a = mapped_npy(path, np.uint32, (rows, 1024))
except OSError as e:
    print(errno.errorcode[e.errno], e.filename)
    sys.exit(0)
a[:] = 7                     # every page written through the map
a.flush()
print("written")
"""


@pytest.mark.parametrize("case", ["larger than the disk", "disk already full", "fits"])
def test_a_file_written_through_a_map_is_enospc_not_sigbus(small_fs, tmp_path, case):
    """A .npy written through a memory map (pipeline.work_files.mapped_npy) has its blocks
    reserved before it is mapped: on a full file system that is OSError ENOSPC naming the
    file (removed), not a SIGBUS at the first page written (np.lib.format.open_memmap's
    file is only extended, its blocks are allocated page by page as they are written)."""
    script = tmp_path / "map_a_file.py"
    script.write_text(MAP_A_FILE)
    target = small_fs / "sig.tmp.npy"
    rows = 16_000 if case == "larger than the disk" else 1_000   # 64 MB, 4 MB (of 32)
    if case == "disk already full":
        _fill(small_fs, 0)
    cp = subprocess.run([sys.executable, str(script), str(target), str(rows)], cwd=ROOT,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, f"exited {cp.returncode} (-7 is SIGBUS): {cp.stderr[-2000:]}"
    if case == "fits":
        assert cp.stdout.split() == ["written"]
        import numpy as np

        a = np.load(target)
        assert a.shape == (rows, 1024) and a.dtype == np.uint32 and (a == 7).all()
    else:
        assert cp.stdout.split() == ["ENOSPC", str(target)], cp.stdout
        assert not target.exists()


def test_a_file_system_that_cannot_reserve_maps_the_file_as_before(tmp_path, monkeypatch):
    import errno

    import numpy as np

    from pipeline.work_files import mapped_npy

    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    a = mapped_npy(tmp_path / "a.npy", np.uint64, (3, 5))
    a[:] = np.arange(15).reshape(3, 5)
    a.flush()
    del a
    b = tmp_path / "b.npy"
    np.save(b, np.arange(15, dtype=np.uint64).reshape(3, 5))
    assert (tmp_path / "a.npy").read_bytes() == b.read_bytes()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_full_disk_under_minhash_signatures_is_one_line_not_a_signal(sample_layout, small_fs,
                                                                       tmp_path, workers):
    """dedup_minhash.py writes each task's signatures through a memory map: with the disk
    full there it stopped by SIGBUS (the stage itself with one worker, a 'worker killed by
    signal 7 ... if memory ran out' with more) instead of the one write-error line."""
    d = small_fs / "data"
    shutil.copytree(sample_layout / "raw", d / "raw")
    out = d / "dedup"
    run_script("dedup_minhash.py", "--input", d / "raw", "--output", out, "--workers", 2)
    before = snapshot(out)
    ballast = _fill(small_fs, 100_000)      # less than one task's signatures (200 KB)
    again = ["--input", d / "raw", "--output", out, "--seed", 7, "--workers", workers]
    cp = run_script("dedup_minhash.py", *again, check=False)
    assert "signal" not in cp.stderr and cp.returncode != -signal.SIGBUS, cp.stderr
    line = _one_error_line(cp)
    assert f"cannot write {small_fs}" in line and "no space left on the device" in line, line
    assert "is unchanged" in line
    assert snapshot(out) == before
    ballast.unlink()
    run_script("dedup_minhash.py", *again)                      # resumes, completes
    fresh = tmp_path / "fresh"
    run_script("dedup_minhash.py", "--input", d / "raw", "--output", fresh, "--seed", 7,
               "--workers", 2)
    assert _data_files(out) == _data_files(fresh)


def _entries(folder: Path) -> set[str]:
    """Every path under folder (hidden ones too): what a run added or left behind."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


@pytest.mark.parametrize("script", ["clean.py", "download_data.py"])
def test_a_disk_full_from_the_start_names_the_folder_it_could_not_write(sample_layout, small_fs,
                                                                        script):
    """0 bytes free before the run starts: the first write is a lock's record (an input's,
    or the output's), before the run knows its staging folder. The line said "cannot
    write: no space left on the device" naming nothing (clean.py), or named the staging
    folder it had not even made (download_data.py); it names the folder of the lock."""
    d = small_fs / "data"
    shutil.copytree(sample_layout / "raw", d / "raw")
    if script == "clean.py":
        args, out = ["--input", d / "raw", "--output", d / "out"], d / "out"
        run_script(script, *args, "--workers", 1)
        args += ["--min-chars", 300]
    else:
        args, out = ["--dataset", "sample", "--output", d / "raw", "--shard-rows", 500], d / "raw"
    before, entries = snapshot(out), _entries(d)
    _fill(small_fs, 0)
    line = _one_error_line(run_script(script, *args, "--workers", 1, check=False))
    assert line.startswith(f"error: cannot write {d}: no space left on the device ("), line
    assert snapshot(out) == before and _entries(d) == entries


def _run_limited(fsize: int, script: str, *args) -> subprocess.CompletedProcess:
    """A stage run under a limit on the size of any file it writes (ulimit -f): a write
    beyond it fails with EFBIG (Python ignores SIGXFSZ)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=limit,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("case", ["file size limit", "second input being written",
                                  "verify: a later folder being written",
                                  "disk full after the output lock"])
def test_a_run_that_fails_while_it_sets_up_leaves_nothing_behind(sample_layout, small_fs,
                                                                 tmp_path, tok_dir, case):
    """A failure while the locks are taken or the staging folder is made left files that
    no run would tidy soon: an empty reader record (.tmp-.raw.lock.reader-HOST-PID) and
    the lock file beside the input, when its record could not be written; the first
    input's reader record and lock file, when the second input was refused; a staging
    folder holding only a half-written run key. The failed run leaves none of them."""
    d = small_fs / "data" if case == "disk full after the output lock" else tmp_path / "data"
    shutil.copytree(sample_layout / "raw", d / "raw")
    entries = _entries(d)
    if case == "file size limit":   # a reader record is longer than 100 bytes
        cp = _run_limited(100, "clean.py", "--input", d / "raw", "--output", d / "out",
                          "--workers", 1)
        says = f"error: cannot write {d}: file too large"
    elif case == "second input being written":
        from pipeline.lock import FolderLock

        held = FolderLock(tok_dir, "train_tokenizer.py")   # as a run rewriting it holds it
        try:
            cp = run_script("pack_parallel.py", "--input", d / "raw", "--output", d,
                            "--tokenizer", tok_dir / "tokenizer.json", "--workers", 1,
                            check=False)
        finally:
            held.release()
        says = f"error: {tok_dir} is locked by train_tokenizer.py"
    elif case == "verify: a later folder being written":   # cleaned is locked before it
        from pipeline.lock import FolderLock

        (d / "cleaned").mkdir()
        (d / "tokenizer").mkdir()
        entries = _entries(d)
        held = FolderLock(d / "tokenizer", "train_tokenizer.py")
        try:
            cp = run_script("verify.py", "--data-dir", d, check=False)
        finally:
            held.release()
        says = f"error: {d / 'tokenizer'} is locked by train_tokenizer.py"
    else:   # one page free: the output lock's record takes it, the run key finds none
        _fill(small_fs, 6000)
        cp = run_script("download_data.py", "--dataset", "sample", "--output", d / "out",
                        "--workers", 1, check=False)
        says = f"error: cannot write {d / '.out.partial'}: no space left on the device"
    assert _entries(d) == entries, sorted(_entries(d) - entries)
    assert _one_error_line(cp).startswith(says), cp.stderr


@pytest.fixture
def open_tmp():
    """A temporary folder another user can reach (pytest's own are under a 0700 folder
    of root's, where a stage run as `nobody` could not even read its input)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="dataprep-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_folder_without_write_permission_is_one_line(sample_layout, open_tmp):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a stage as another user")
    tmp_path = open_tmp
    d = tmp_path / "locked"
    d.mkdir()
    shutil.copytree(sample_layout / "raw", d / "raw")
    os.chmod(d, 0o555)                       # nobody may create the output there
    os.chmod(tmp_path, 0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    cp = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                         sys.executable, str(ROOT / "dedup_exact.py"), "--input", str(d / "raw"),
                         "--output", str(d / "dx"), "--workers", "1"],
                        cwd=ROOT, env=env, capture_output=True, text=True)
    line = _one_error_line(cp)
    assert "permission denied" in line and "GB free" in line and f"cannot write {d}:" in line


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    """A small tokenizer trained by the stage on the sample."""
    from conftest import SAMPLE

    d = tmp_path_factory.mktemp("tok")
    run_script("download_data.py", "--input", SAMPLE, "--output", d / "raw")
    run_script("train_tokenizer.py", "--input", d / "raw", "--output", d / "tok",
               "--vocab-size", 1000)
    return d / "tok"


def test_an_output_folder_that_is_not_this_stages_is_never_replaced(sample_layout, tmp_path):
    """A run replaces its output folder whole: pointed by mistake at someone's folder, or at
    another stage's output, it stops with one line before any work, and the folder keeps
    every byte; an empty folder, or the stage's own earlier output, is fine."""
    d = _copy_raw(sample_layout, tmp_path)
    mine = tmp_path / "thesis"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "thesis.tex").write_text("years of work\n")
    before = snapshot(mine)
    cp = run_script("clean.py", "--input", d / "raw", "--output", mine, check=False)
    line = _one_error_line(cp)
    assert str(mine) in line and "not an output of clean.py" in line and "no manifest.json" in line
    assert snapshot(mine) == before
    # another stage's output: dedup_exact pointed at clean's input
    raw_before = snapshot(d / "raw")
    cp = run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "raw", check=False)
    assert cp.returncode == 2     # (refused as its own input, before anything else)
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned")
    cp = run_script("dedup_exact.py", "--input", d / "cleaned", "--output", d / "raw", check=False)
    line = _one_error_line(cp)
    assert "not an output of dedup_exact.py (it is the output of download_data.py)" in line
    assert snapshot(d / "raw") == raw_before
    # a file where the output folder goes: refused before any work, left as it was
    note = tmp_path / "notes.txt"
    note.write_text("keep me\n")
    for script, inp in (("clean.py", d / "raw"), ("dedup_exact.py", d / "cleaned")):
        cp = run_script(script, "--input", inp, "--output", note, check=False)
        assert f"--output {note}: is a file" in _one_error_line(cp)
        assert note.read_text() == "keep me\n" and not (tmp_path / ".notes.txt.old").exists()
    # an empty folder is taken, and the stage's own output is rerun in place
    (tmp_path / "empty").mkdir()
    run_script("clean.py", "--input", d / "raw", "--output", tmp_path / "empty",
               "--min-chars", "300")
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--min-chars", "300")
    assert _data_files(d / "cleaned") == _data_files(tmp_path / "empty")


def test_an_output_nested_with_its_input_is_refused(sample_layout, tmp_path):
    """An --output inside the --input folder would be deleted when the stage that wrote
    the input runs again (it replaces its folder whole); an --input inside the --output
    folder would be deleted by this very run. Both are one line, exit 2, before any work;
    pack, which adds its files to a shared folder, may still write into data/ above its
    input, as by default."""
    d = _copy_raw(sample_layout, tmp_path)
    raw_before = snapshot(d / "raw")
    cp = run_script("clean.py", "--input", d / "raw", "--output", d / "raw" / "cleaned",
                    check=False)
    assert "is inside the input folder" in _one_error_line(cp)
    cp = run_script("clean.py", "--input", d / "raw", "--output", d, check=False)
    assert f"--input {d / 'raw'} is inside --output {d}" in _one_error_line(cp)
    tok = tmp_path / "no-tokenizer.json"   # refused before the tokenizer is looked at
    cp = run_script("pack_parallel.py", "--input", d / "raw", "--output", d / "raw" / "bins",
                    "--tokenizer", tok, check=False)
    assert "is inside the input folder" in _one_error_line(cp)
    assert snapshot(d / "raw") == raw_before and sorted(os.listdir(d)) == ["raw"]
    # download_data reads the user's files: an output among them would be read by the
    # next run (each rerun took in its own output again: 10, 20, 30 documents)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "one document"}\n')
    for spec in (src, f"{src}/*.jsonl", f"{tmp_path}/sr*/a.jsonl"):
        cp = run_script("download_data.py", "--input", spec, "--output", src / "raw", check=False)
        assert "the next run would read this run's output as input" in _one_error_line(cp)
    cp = run_script("download_data.py", "--input", src / "a.jsonl", "--output", tmp_path,
                    check=False)
    assert f"--input {src / 'a.jsonl'} is inside --output {tmp_path}" in _one_error_line(cp)
    cp = run_script("download_data.py", "--input", "", "--output", tmp_path / "x", check=False)
    assert "an empty path" in _one_error_line(cp)
    # a file where a folder above the output goes
    cp = run_script("download_data.py", "--input", src / "a.jsonl", "--output",
                    src / "a.jsonl" / "raw", check=False)
    assert f"{src / 'a.jsonl'} is a file, not a folder" in _one_error_line(cp)
    assert sorted(os.listdir(src)) == ["a.jsonl"]


def test_an_input_with_no_documents_is_one_line_naming_who_kept_none(tmp_path):
    """clean may remove every document (it warns); the next stage then says that the
    stage above kept none, in one line, instead of a traceback (dedup_minhash) or an
    empty output that fails later (dedup_exact)."""
    src = tmp_path / "a.jsonl"
    src.write_text("".join('{"text": "short"}\n' for _ in range(10)))
    run_script("download_data.py", "--input", src, "--output", tmp_path / "raw")
    run_script("clean.py", "--input", tmp_path / "raw", "--output", tmp_path / "cleaned")
    for script in ("dedup_exact.py", "dedup_minhash.py", "train_tokenizer.py"):
        cp = run_script(script, "--input", tmp_path / "cleaned", "--output", tmp_path / "x",
                        check=False)
        assert _one_error_line(cp) == (f"error: {tmp_path / 'cleaned'}: no documents (1 shard(s) "
                                       "of 0 rows): clean.py kept none; see its report and "
                                       "loosen its settings")
        assert not (tmp_path / "x").exists()


def test_a_symlinked_output_folder_is_refused_in_one_line(sample_layout, tmp_path):
    """A run replaces its output folder whole, which would put a folder where a symbolic
    link is (and the commit failed with a traceback, and every later run): one line
    before any work, naming the folder to give instead; the linked folder keeps its bytes."""
    d = _copy_raw(sample_layout, tmp_path)
    run_script("dedup_exact.py", "--input", d / "raw", "--output", tmp_path / "elsewhere")
    before = snapshot(tmp_path / "elsewhere")
    (d / "dx").symlink_to(tmp_path / "elsewhere")
    cp = run_script("dedup_exact.py", "--input", d / "raw", "--output", d / "dx", check=False)
    line = _one_error_line(cp)
    assert "a symbolic link" in line and f"--output {tmp_path / 'elsewhere'}" in line
    assert snapshot(tmp_path / "elsewhere") == before and (d / "dx").is_symlink()
    assert not (d / ".dx.partial").exists()


def test_a_previous_output_that_cannot_be_deleted_is_said_truly(sample_layout, open_tmp):
    """After the swap, the previous output (.NAME.old) could not be deleted: the new
    output is in place and the run says so in a note (it said the output was unchanged,
    and failed); the next run names the leftover in one line and changes nothing."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a stage as another user")
    tmp_path = open_tmp
    d = _copy_raw(sample_layout, tmp_path)
    (tmp_path / "home").mkdir()
    for p in [d, *d.rglob("*"), tmp_path / "home"]:   # the data folder is nobody's
        shutil.chown(p, 65534, 65534)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home")}

    def as_nobody(*flags):
        return subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                               "--clear-groups", sys.executable, str(ROOT / "dedup_exact.py"),
                               "--input", str(d / "raw"), "--output", str(d / "dx"),
                               "--workers", "1", *flags],
                              cwd=ROOT, env=env, capture_output=True, text=True)

    cp = as_nobody()
    assert cp.returncode == 0, cp.stderr
    (d / "dx" / "kept_by_root").mkdir()          # root's: nobody cannot empty it
    (d / "dx" / "kept_by_root" / "f").write_text("x")
    cp = as_nobody("--task-mb", "2")
    assert cp.returncode == 0, cp.stderr
    assert "is the new output, but the previous one could not be deleted" in cp.stderr
    assert json.loads((d / "dx" / "manifest.json").read_text())["config"]["task_mb"] == 2.0
    assert (d / ".dx.old" / "kept_by_root" / "f").exists()
    before = snapshot(d / "dx")
    line = _one_error_line(as_nobody("--task-mb", "3"))
    assert ".dx.old" in line and "could not be deleted" in line and "delete it by hand" in line
    assert snapshot(d / "dx") == before


def test_a_dead_readers_record_is_tidied_by_the_next_reader(tmp_path):
    """A reader killed with SIGKILL leaves its record (.NAME.lock.reader-HOST-PID); the
    next run that reads the folder removes it (it stayed until some run was refused),
    and the last reader then tidies the lock file too."""
    from pipeline.lock import FolderLock, _host

    folder = tmp_path / "cleaned"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = tmp_path / f".cleaned.lock.reader-{_host()}-{dead.pid}"
    record.write_text(json.dumps({"pid": dead.pid, "pid_start": 0, "host": _host(),
                                  "script": "dedup_exact.py"}))
    lock = FolderLock(folder, "verify.py", shared=True)
    assert not record.exists()
    lock.release()
    assert not list(tmp_path.glob(".cleaned.lock*"))


def test_an_input_under_its_first_run_is_named_as_being_written(sample_layout, tmp_path):
    """While a stage writes its output for the first time, the folder does not exist
    yet: a stage that reads it says which run is writing it, not 'run it first'."""
    from pipeline.lock import FolderLock

    d = _copy_raw(sample_layout, tmp_path)
    held = FolderLock(d / "cleaned", "clean.py")   # as clean.py's first run holds it
    try:
        line = _one_error_line(run_script("dedup_exact.py", "--input", d / "cleaned",
                                          "--output", d / "dx", check=False))
        assert "does not exist yet: clean.py (pid" in line and "is writing it" in line
    finally:
        held.release()
    line = _one_error_line(run_script("dedup_exact.py", "--input", d / "cleaned",
                                      "--output", d / "dx", check=False))
    assert "does not exist; run clean.py first" in line


def _all_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_report_never_overwrites_another_file(pipeline_layout, tmp_path):
    # verify's --report and report.py's --output are written whole over their path: a
    # packed .bin, a manifest or a shard given by mistake was replaced (exit 0)
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout, d)
    before = _all_bytes(d)
    shard = next((d / "raw").glob("*.parquet"))
    for script, flag, target, says in [
            ("verify.py", "--output", d / "train.bin", "must name a .md file"),
            ("verify.py", "--output", d / "raw" / "manifest.json", "must name a .md file"),
            ("verify.py", "--output", d / "dedup" / "README.md",   # exists, not a report
             "exists and is not a report this script wrote"),
            ("report.py", "--output", shard, "must name a .html file"),
            ("report.py", "--output", d / "notes.html", "exists and is not a report")]:
        if target.name in ("README.md", "notes.html"):
            target.write_text("my notes\n")
            before[target.relative_to(d).as_posix()] = target.read_bytes()
        line = _one_error_line(run_script(script, "--data-dir", d, flag, target, check=False))
        assert f"{flag} {target}" in line and says in line, line
    assert _all_bytes(d) == before
    # its own earlier report is replaced as before
    run_script("report.py", "--data-dir", d, "--output", tmp_path / "r.html")
    run_script("report.py", "--data-dir", d, "--output", tmp_path / "r.html")
    cp = run_script("verify.py", "--data-dir", d, "--report", tmp_path / "v.md", check=False)
    assert cp.returncode in (0, 1) and (tmp_path / "v.json").exists(), cp.stderr
    cp = run_script("verify.py", "--data-dir", d, "--report", tmp_path / "v.md", check=False)
    assert cp.returncode in (0, 1), cp.stderr


def test_pack_refuses_another_stages_folder_and_stray_shards_are_named(pipeline_layout, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout, d)
    before = _all_bytes(d)
    # train.bin written into clean's folder was deleted by clean's next run
    line = _one_error_line(run_script(
        "pack_parallel.py", "--input", d / "dedup", "--output", d / "cleaned", "--tokenizer",
        d / "tokenizer" / "tokenizer.json", check=False))
    assert f"--output {d / 'cleaned'}: holds another stage's output" in line, line
    # a parquet file its stage did not write was read as input, unchecked
    stray = d / "cleaned" / "extra.parquet"
    shutil.copy(next((d / "raw").glob("*.parquet")), stray)
    line = _one_error_line(run_script("dedup_exact.py", "--input", d / "cleaned", "--output",
                                      tmp_path / "de", check=False))
    assert f"{stray}: in {d / 'cleaned'} but not in its manifest" in line, line
    stray.unlink()
    # verify reads the dedup output the same way: its scan refuses one too
    extra = d / "dedup" / "extra.parquet"
    shutil.copy(next((d / "raw").glob("*.parquet")), extra)
    cp = run_script("verify.py", "--data-dir", d, "--output", tmp_path / "v.md", check=False)
    assert cp.returncode == 1 and f"{extra}: in {d / 'dedup'} but not in its manifest" in cp.stdout
    extra.unlink()
    (tmp_path / "v.md").unlink()
    (tmp_path / "v.json").unlink()
    assert _all_bytes(d) == before and not (tmp_path / "de").exists()


@pytest.mark.parametrize("drop", ["output_fingerprint", "files", "stage"])
def test_a_manifest_without_a_key_every_reader_needs_is_one_line(sample_layout, tmp_path, drop):
    d = _copy_raw(sample_layout, tmp_path)
    m = json.loads((d / "raw" / "manifest.json").read_text())
    del m[drop]
    (d / "raw" / "manifest.json").write_text(json.dumps(m))
    line = _one_error_line(run_script("clean.py", "--input", d / "raw", "--output",
                                      d / "cleaned", "--workers", "1", check=False))
    assert f'unreadable manifest (no "{drop}"' in line and "rerun download_data.py" in line, line


@pytest.mark.parametrize("flag, value, says", [
    ("--task-mb", "nan", "--task-mb nan"), ("--task-mb", "inf", "--task-mb inf"),
    ("--min-cpt-zh", "inf", "--min-cpt-zh inf: must be >= 0"),
    ("--tokenizer", "/no/such/tokenizer.json", "--tokenizer /no/such/tokenizer.json: no such file"),
    ("--smoke-dir", "/no/such/folder", "--smoke-dir /no/such/folder is not a folder")])
def test_verify_refuses_a_bad_flag_in_one_line(pipeline_layout, tmp_path, flag, value, says):
    # before: the run went on, wrote its report and blamed the data with FAIL items
    cp = run_script("verify.py", "--data-dir", pipeline_layout, flag, value,
                    "--report", tmp_path / "v.md", check=False)
    assert says in _one_error_line(cp) and not (tmp_path / "v.md").exists()


def test_an_input_caught_between_its_commit_renames_names_the_stage_to_rerun(sample_layout,
                                                                            tmp_path):
    # clean.py stopped after moving its old output aside, before moving the new one in:
    # the next stage said only "does not exist; run clean.py first"
    d = _copy_raw(sample_layout, tmp_path)
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--workers", "1")
    (d / "cleaned").rename(d / ".cleaned.old")
    line = _one_error_line(run_script("dedup_exact.py", "--input", d / "cleaned", "--output",
                                      d / "dedup_exact", "--workers", "1", check=False))
    assert "was stopped while it swapped in its output" in line and "rerun clean.py" in line
    assert str(d / ".cleaned.old") in line, line
    run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned", "--workers", "1")
    assert (d / "cleaned" / "manifest.json").exists() and not (d / ".cleaned.old").exists()


def test_a_file_standing_at_data_logs_is_one_line_and_the_rerun_resumes(layout_copy):
    """A file where the stages keep their task logs (data/logs): the commit stops with
    the one line naming it (it was a FileExistsError traceback from mkdir), the previous
    output untouched, and once it is moved away the rerun resumes."""
    d = layout_copy
    out = d / "cleaned"
    run_script("clean.py", "--input", d / "raw", "--output", out, "--workers", "2")
    before = snapshot(out)
    shutil.rmtree(d / "logs")
    (d / "logs").write_text("in the way\n")
    cp = run_script("clean.py", "--input", d / "raw", "--output", out, "--workers", "2",
                    "--min-chars", "300", check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stderr.strip().splitlines()[-1] == (
        f"error: {d / 'logs'}: a file stands where a folder is expected; {out} is "
        "unchanged; fix this and rerun the same command (finished tasks are kept)")
    assert snapshot(out) == before
    (d / "logs").unlink()
    cp = run_script("clean.py", "--input", d / "raw", "--output", out, "--workers", "2",
                    "--min-chars", "300")
    assert "resuming in" in cp.stderr
    assert (d / "logs" / "clean").is_dir()


@pytest.mark.parametrize("frozen", ["logs", "logs/clean", "logs, without logs/clean"])
def test_an_immutable_logs_folder_is_named_in_the_one_line(layout_copy, frozen):
    """data/logs or data/logs/<stage> immutable (chattr +i; root too cannot change it):
    the commit cannot move the task logs there, and the line named the staging folder
    (the rename's source) instead of the logs folder that refused the write."""
    d = layout_copy
    out = d / "cleaned"
    run_script("clean.py", "--input", d / "raw", "--output", out, "--workers", "2")
    before = snapshot(out)
    if frozen == "logs, without logs/clean":   # no previous logs: only the rename fails
        shutil.rmtree(d / "logs" / "clean")
        frozen = "logs"
    if subprocess.run(["chattr", "+i", str(d / frozen)], capture_output=True).returncode:
        pytest.skip("chattr +i is not permitted here")
    try:
        cp = run_script("clean.py", "--input", d / "raw", "--output", out, "--workers", "2",
                        "--min-chars", "300", check=False)
    finally:
        subprocess.run(["chattr", "-i", str(d / frozen)], check=True)
    line = _one_error_line(cp)
    assert line.startswith(f"error: cannot write {d / frozen}: operation not permitted ("), line
    assert f"{out} is unchanged" in line
    assert snapshot(out) == before
    cp = run_script("clean.py", "--input", d / "raw", "--output", out, "--workers", "2",
                    "--min-chars", "300")
    assert "resuming in" in cp.stderr and (d / "logs" / "clean").is_dir()


def test_a_stale_staging_folder_that_cannot_be_deleted_is_named_whole(layout_copy):
    """A staging folder left by a run of another config is deleted before this run starts;
    an entry in it that cannot be deleted (immutable) is named by its whole path (rmtree
    names it relative to its folder: the line said "cannot write ."), and nothing else
    changes."""
    d = layout_copy
    stale = d / ".cleaned.partial"
    (stale / "sub").mkdir(parents=True)
    (stale / "_run.json").write_text('{"key": "another config"}')
    (stale / "sub" / "f").write_text("x")
    if subprocess.run(["chattr", "+i", str(stale / "sub")], capture_output=True).returncode:
        pytest.skip("chattr +i is not permitted here")
    try:
        cp = run_script("clean.py", "--input", d / "raw", "--output", d / "cleaned",
                        "--workers", "2", check=False)
    finally:
        subprocess.run(["chattr", "-i", str(stale / "sub")], check=True)
    line = _one_error_line(cp)
    assert line.startswith(f"error: cannot write {stale / 'sub'}: operation not permitted"), line
    assert not (d / "cleaned").exists()
