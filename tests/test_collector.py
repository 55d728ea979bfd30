"""Python's collector during a stage's set-up (pipeline.collector): paused while the stage
sets up, frozen right before the worker pool forks when run from the shell, and never
left off, whatever happens."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLE

GC_WATCH = '''
import gc, os, runpy, sys
LOG = os.environ["GC_WATCH_LOG"]
def child():   # every process the stage forks: is its collector on, and what is frozen
    with open(LOG, "a") as f:
        f.write(f"fork {os.getpid()} enabled={gc.isenabled()} frozen={gc.get_freeze_count()}\\n")
os.register_at_fork(after_in_child=child)
def driver():   # at the driver's exit: a stage ends without the interpreter's tear-down,
    with open(LOG, "a") as f:   # but with its exit handlers
        f.write(f"driver enabled={gc.isenabled()}\\n")
import atexit; atexit.register(driver)
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
'''


def test_pause_then_resume_turns_the_collector_back_on():
    from pipeline import collector

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    collector.pause(freeze=False)
    assert not gc.isenabled()
    collector.resume()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    collector.resume()                       # a second resume changes nothing
    assert gc.isenabled()
    # a collector already off is left off by pause and resume (not theirs to turn on)
    gc.disable()
    try:
        collector.pause(freeze=True)
        collector.resume()
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.enable()


def test_running_as_names_the_script_of_this_process(tmp_path):
    from pipeline import collector

    assert not collector.running_as("dedup_exact.py")   # pytest is this process's script
    script = tmp_path / "some_stage.py"
    script.write_text("from pipeline import collector\n"
                      "print(collector.running_as('some_stage.py'), "
                      "collector.running_as('other.py'))\n")
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    assert out.split() == ["True", "False"]


def test_a_stage_called_in_process_leaves_the_collector_on_and_freezes_nothing(tmp_path):
    """Called from another program (here pytest), a stage pauses the collector for its
    set-up only, also when its flags are wrong, and never freezes the caller's objects."""
    import dedup_exact
    from pipeline.errors import StageError

    frozen = gc.get_freeze_count()
    with pytest.raises(StageError):
        dedup_exact.main(["--input", str(tmp_path / "missing"), "--output",
                          str(tmp_path / "out"), "--workers", "0"])
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    raw = tmp_path / "raw"
    subprocess.run([sys.executable, str(ROOT / "download_data.py"), "--input", str(SAMPLE),
                    "--output", str(raw), "--workers", "1"], cwd=ROOT, check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert dedup_exact.main(["--input", str(raw), "--output", str(tmp_path / "out"),
                             "--workers", "1"]) in (0, None)
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_a_stage_run_from_the_shell_freezes_its_set_up_before_its_workers_fork(tmp_path):
    """Run from the shell with a pool, every worker starts with the collector on and the
    driver's set-up frozen, so its collections never walk (or copy) those objects, and
    the driver ends with its collector on. Without pipeline.collector the workers start
    with nothing frozen (0 objects: this test fails on the code before it)."""
    raw = tmp_path / "raw"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(ROOT / "download_data.py"), "--input", str(SAMPLE),
                    "--output", str(raw), "--workers", "1"], cwd=ROOT, check=True,
                   capture_output=True, env=env)
    watch, log = tmp_path / "gc_watch.py", tmp_path / "gc.txt"
    watch.write_text(GC_WATCH)
    cp = subprocess.run([sys.executable, str(watch), str(ROOT / "dedup_exact.py"), "--input",
                         str(raw), "--output", str(tmp_path / "out"), "--workers", "2",
                         "--task-mb", "1"], cwd=ROOT, capture_output=True, text=True,
                        env={**env, "GC_WATCH_LOG": str(log)}, timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    lines = log.read_text().splitlines()
    forks = [ln for ln in lines if ln.startswith("fork ")]
    assert len(forks) >= 2, lines                    # the pool's two workers at least
    for ln in forks:
        enabled, frozen = ln.split()[2:4]
        assert enabled == "enabled=True", ln
        assert int(frozen.split("=")[1]) > 20_000, ln   # numpy, pyarrow, numba, datatrove...
    assert lines[-1].startswith("driver enabled=True"), lines
