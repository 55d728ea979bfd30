"""Every script answers --help and carries the stage contract's flags; the bench suite runs."""

from __future__ import annotations

import json
import math

import pytest

from conftest import run_script

STAGES = ["download_data.py", "clean.py", "dedup_exact.py", "dedup_minhash.py",
          "train_tokenizer.py", "pack_parallel.py", "verify.py"]
CLUSTER_STAGES = ["clean.py", "dedup_exact.py", "dedup_minhash.py", "pack_parallel.py"]
OTHERS = ["minhash_demo.py", "bpe_demo.py", "compare_tokenizers.py", "bench/run_all.py"]


@pytest.mark.parametrize("script", STAGES)
def test_stage_flags(script):
    out = run_script(script, "--help").stdout
    for flag in ("--input", "--output", "--workers"):
        assert flag in out, f"{script} lacks {flag}"
    if script in CLUSTER_STAGES:
        for flag in ("--executor", "--ray-address", "--slurm-partition", "--slurm-time",
                     "--slurm-cpus", "--slurm-job-name"):
            assert flag in out, f"{script} lacks {flag}"


@pytest.mark.parametrize("script", OTHERS)
def test_other_scripts_answer_help(script):
    assert "usage:" in run_script(script, "--help").stdout


@pytest.mark.parametrize("script", STAGES + OTHERS[:-1] + ["report.py"])
def test_a_bad_flag_is_one_line(script):
    """A flag argparse refuses is one line naming it, as any other bad input is (argparse
    printed the whole usage first: 15 lines for a stage)."""
    bad = ("--workers", "abc") if script in STAGES else ("--no-such-flag",)
    cp = run_script(script, *bad, check=False)
    assert cp.returncode == 2 and cp.stdout == ""
    why = "argument --workers: invalid int value: 'abc'" if script in STAGES else \
        "unrecognized arguments: --no-such-flag"
    assert cp.stderr == f"error: {why} ({script} --help lists the flags)\n"


@pytest.mark.parametrize("script", ["clean.py", "verify.py"])
def test_more_workers_than_cores_is_noted(script, tmp_path):
    """--workers above the cores this process may use runs, with a note saying what the
    extra workers cost; as many as the cores, no note."""
    from pipeline.layout import default_workers

    where = ("--data-dir" if script == "verify.py" else "--input"), tmp_path / "missing"
    for n, noted in ((default_workers(), False), (default_workers() + 1, True)):
        cp = run_script(script, *where, "--workers", n, check=False)
        assert cp.returncode == 2 and cp.stderr.strip().splitlines()[-1].startswith("error: ")
        assert (f"note: --workers {n} is more than the {default_workers()} cores this process "
                "may use" in cp.stderr) is noted, cp.stderr


def test_verify_checks_a_whole_layout_flag():
    out = run_script("verify.py", "--help").stdout
    assert "--data-dir DATA_DIR, --input" in out and "--report REPORT, --output" in out


def test_bench_suite_smoke(tmp_path):
    """`make bench` on a tiny corpus: every benchmark runs and reports its rows (no timing)."""
    cp = run_script("bench/run_all.py", "--quick", "--out", tmp_path, timeout=900)
    results = json.loads((tmp_path / "quick.json").read_text())
    names = {r["bench"] for r in results}
    assert names == {"clean", "quality_signals", "decont", "dedup_exact", "minhash",
                     "tokenizer", "trainer", "pack", "rerun"}, cp.stdout
    for r in results:
        assert not r.get("error"), (r["bench"], r.get("error"))
        assert r["rows"] and r["peak_rss_mb"] > 0
        for row in r["rows"]:
            if r["bench"] == "rerun":   # a ratio of wall times (not judged here), bytes must match
                assert math.isfinite(row["ratio"]) and "own work" in row["name"]
                assert all(v > 0 for v in r["extra"]["fixed_s"].values())
                assert all(v > 0 for v in r["extra"]["rerun_share"].values())
                assert r["extra"]["identical_to_fresh"] == {"clean": True, "dedup_minhash": True}
                assert r["extra"]["rerun_measured_nothing"] == {"clean": True, "dedup_minhash": True}
                assert r["extra"]["unchanged_rerun_linked_every_file"] == {"clean": True,
                                                                          "dedup_minhash": True}
                assert r["extra"]["unchanged_download_rewrote_nothing"] is True
            elif "mb_per_s_per_core" not in row:   # a judged figure that is not a speed
                assert row["name"] and 0 <= row["ratio"] <= 1 and row["ok"] is not None
            else:
                assert row["mb_per_s_per_core"] > 0 and row["name"]
    assert "projected wall time for FineWeb-Edu sample-10BT" in cp.stdout
    assert "dominant stage" in cp.stdout
    assert (tmp_path / "quick.md").read_text().startswith("Command: `python bench/run_all.py --quick")


def test_bench_scale_smoke(tmp_path):
    """`make bench-scale` on two tiny prefixes of the bundled sample: every stage runs and
    is measured, phases report core use, the projection and the target table are printed
    (the figures themselves belong to make bench-scale, not to a test)."""
    from conftest import ROOT
    cp = run_script("bench/scale.py", "--quick", "--gb", "0.002,0.004",
                    "--corpus", ROOT / "data" / "sample", "--out", tmp_path,
                    "--work", tmp_path / "work", timeout=900)
    res = json.loads((tmp_path / "scale_quick.json").read_text())
    assert [r["gb"] for r in res["runs"]] == [0.002, 0.004]
    for run in res["runs"]:
        stages = {s["stage"]: s for s in run["stages"]}
        assert list(stages) == ["download_data", "clean", "dedup_exact", "dedup_minhash",
                                "train_tokenizer", "pack_parallel", "verify"]
        for s in stages.values():
            assert s["wall_s"] > 0 and s["cpu_s"] > 0 and s["driver_rss_mb"] > 0
        assert stages["clean"]["phases"]["clean"]["tasks"] >= 1
        assert stages["dedup_minhash"]["phases"]["signatures"]["task_cpu_s"] > 0
    assert len(res["projection_minutes"]) == 7
    assert "projected wall time for FineWeb-Edu sample-10BT" in cp.stdout
    assert "targets:" in cp.stdout
    # no size reached 0.2 GB: the core-use targets say so instead of passing
    names = [t[0] for t in res["targets"]]
    assert "clean clean: core use" in names
    assert all(t[1].startswith("not measured") for t in res["targets"] if "core use" in t[0])


def test_bench_scale_targets_flag_a_missed_target():
    """check_targets names the worst size and marks a phase below 80% MISSED."""
    import sys
    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "bench"))
    from scale import check_targets
    def run(gb, use):
        phases = {"clean": [("clean", use)], "dedup_exact": [("hash", 0.9), ("filter", 0.9)],
                  "dedup_minhash": [("signatures", 0.9), ("filter", 0.9)],
                  "pack_parallel": [("encode", 0.9)]}
        return {"gb": gb, "bytes": gb * 1e9,
                "stages": [{"stage": st, "phases": {n: {"core_use": u} for n, u in ph}}
                           for st, ph in phases.items()]}
    rows = {r[0]: r for r in check_targets([run(0.25, 0.75), run(1, 0.95)], 46.0, 11.0)}
    assert rows["clean clean: core use"][1:] == ["0.75 (at 0.25 GB)", ">= 0.80", "MISSED"]
    assert rows["dedup_exact hash: core use"][-1] == "ok"
    assert rows["sample-10BT projected on 2 cores"][1:] == ["46.0 min", "<= 45 min", "MISSED"]
    assert rows["sample-10BT projected on 64 cores"][1:] == ["11.0 min", "<= 12 min", "ok"]
    rows = {r[0]: r for r in check_targets([run(0.1, 0.1), run(0.5, 0.85)], 45.0, 12.5)}
    assert rows["clean clean: core use"][1:] == ["0.85 (at 0.5 GB)", ">= 0.80", "ok"]
    assert rows["sample-10BT projected on 2 cores"][-1] == "ok"
    assert rows["sample-10BT projected on 64 cores"][-1] == "MISSED"


def test_bench_scale_projection_splits_fixed_costs():
    """project(): with a smaller run, serial seconds and task CPU are each a fixed part
    plus a part per byte (the line through both runs); without one, or when the noise
    gives a negative slope or fixed part, everything scales per byte."""
    import sys
    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "bench"))
    from scale import project

    def run(wall, par_wall, par_cpu, use=1.0):
        return {"stage": "clean", "wall_s": wall,
                "phases": {"clean": {"wall_s": par_wall, "task_cpu_s": par_cpu, "core_use": use}}}
    big, small = run(4.0, 2.0, 4.0), run(2.5, 1.0, 2.2)   # at 1 GB and 0.5 GB
    # serial 2.0 s = 1.0 fixed + 1.0 s/GB; task CPU 4.0 = 0.4 fixed + 3.6 s/GB
    want = (1.0 + 1.0 * 10 + (0.4 + 3.6 * 10) / 2) / 60
    assert abs(project(big, 1e9, 2, 10e9, small=small, small_size=0.5e9) - want) < 1e-9
    assert abs(project(big, 1e9, 2, 10e9) - (2.0 * 10 + 4.0 * 10 / 2) / 60) < 1e-9
    # train_tokenizer: training and its tasks' word counting grow with its sample (5% of
    # the corpus, 1 GB floor: 1 GB at 10 GB), the rest of its tasks' CPU with the corpus
    tok = {**run(4.0, 2.0, 4.0), "stage": "train_tokenizer", "timings": {"train": 1.0},
           "word_count_cpu_s": 1.5}
    # measured on 0.5 GB: serial 4.0 - 2.0 - 1.0 = 1.0 s and tasks 4.0 - 1.5 = 2.5 s grow
    # 20 times, the sample from 0.5 GB to 1 GB
    want = (1.0 * 20 + 2.5 * 20 / 2 + 1.0 * 2 + 1.5 * 2 / 2) / 60
    assert abs(project(tok, 0.5e9, 2, 10e9) - want) < 1e-9
    # a smaller run that took longer (noise): no negative slope, all per byte
    assert project(big, 1e9, 2, 10e9, small=run(5.0, 2.5, 5.0), small_size=0.5e9) == \
        project(big, 1e9, 2, 10e9)


def test_output_into_a_closed_pipe_is_one_line(tmp_path):
    """`python bpe_demo.py | head -1`: a reader that quits gives one line on stderr and
    SIGPIPE's exit status, not a traceback."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    r, w = os.pipe()
    os.close(r)   # the reader quit before anything was written
    p = subprocess.run([sys.executable, str(ROOT / "bpe_demo.py")], stdout=w,
                       stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=120)
    os.close(w)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.startswith("stopped: standard output "
                                                               "was closed")


@pytest.mark.parametrize("script", [s for s in STAGES if s != "verify.py"])  # it has none
def test_every_size_in_bytes_takes_units(script):
    """Every flag that is a number of bytes reads a size as a person types it, as
    --memory-budget does: `--max-bytes 500MB` is `--max-bytes 500000000` (the same run,
    the same manifest); a size that is not one is refused naming the flag."""
    import importlib

    from pipeline.tables import size_arg

    stage = importlib.import_module(script[:-3]).STAGE
    p = stage.parser([])
    sized = [a for a in p._actions if a.type is size_arg]
    assert all(a.dest.endswith("_bytes") for a in sized)
    named = {a.dest for a in p._actions if a.dest.endswith("_bytes")}
    assert {a.dest for a in sized} == named    # none left reading plain integers only
    for a in sized:
        flag = a.option_strings[0]
        for typed, want in (("500MB", 500_000_000), ("1.5kb", 1500), ("2GiB", 2 << 30),
                            ("1000000", 1_000_000), ("0", 0)):
            assert getattr(p.parse_args([flag, typed]), a.dest) == want
        with pytest.raises(SystemExit):
            p.parse_args([flag, "lots"])
    sizes = {"download_data.py": {"shard_bytes"}, "pack_parallel.py": {"check_bytes"},
             "train_tokenizer.py": {"min_bytes", "max_bytes", "heldout_bytes"}}
    assert named == sizes.get(script, set())



EXIT_WATCH = '''
import atexit, os, runpy, sys
LOG = os.environ["EXIT_WATCH_LOG"]
def note(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")
atexit.register(note, "exit handlers ran")
if os.environ.get("EXIT_WATCH_THREAD"):   # a thread still at work when the stage returns
    import threading, time
    threading.Thread(target=lambda: (time.sleep(1), note("thread done"))).start()
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
'''


def _exit_watch(tmp_path, *prefix: str, thread: bool = False):
    """download_data.py on the sample, run under EXIT_WATCH with `python -v` (which
    prints a "# cleanup" line per module the interpreter tears down) after `prefix` (a
    profiler, say): what it noted, the completed process."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, SAMPLE

    watch, log = tmp_path / "exit_watch.py", tmp_path / "exit.txt"
    watch.write_text(EXIT_WATCH)
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXIT_WATCH_LOG": str(log)}
    if thread:
        env["EXIT_WATCH_THREAD"] = "1"
    cp = subprocess.run([sys.executable, "-v", *prefix, str(watch),
                         str(ROOT / "download_data.py"), "--input", str(SAMPLE),
                         "--output", str(tmp_path / "raw"), "--workers", "2", "--force"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return log.read_text().splitlines(), cp


def test_a_stage_ends_without_the_interpreters_tear_down_but_with_its_exit_handlers(tmp_path):
    """A finished stage runs its exit handlers (the pool's, the locks', loguru's), flushes
    its output and ends, without the interpreter's tear-down: freeing numba's, pyarrow's
    and datatrove's modules and objects cost 0.2-0.3 s of every large run. On the code
    before, the interpreter tore down every module ("# cleanup" lines under -v)."""
    noted, cp = _exit_watch(tmp_path)
    assert noted == ["exit handlers ran"], noted
    assert "# cleanup" not in cp.stderr
    assert "wrote" in cp.stdout and cp.stdout.endswith("\n")   # the last lines, whole
    assert (tmp_path / "raw" / "manifest.json").exists()


def test_a_stage_waits_for_a_running_thread_and_for_a_profiler(tmp_path):
    """The usual exit, tear-down included, when a thread still runs (it finishes its
    work) or under a profiler (cProfile writes its file after the script returns)."""
    noted, cp = _exit_watch(tmp_path, thread=True)
    assert noted == ["thread done", "exit handlers ran"], noted
    assert "# cleanup" in cp.stderr
    prof = tmp_path / "stage.prof"
    noted, cp = _exit_watch(tmp_path, "-m", "cProfile", "-o", str(prof))
    assert prof.stat().st_size > 0 and noted == ["exit handlers ran"], noted


def test_a_stage_runs_under_cprofile_with_its_tasks_in_the_driver(tmp_path):
    """`python -m cProfile -o F stage.py --workers 1`: the tasks run in the driver and are
    named by the script's file, not by __main__ (cProfile's module there: the code
    before stopped with "module 'cProfile' has no attribute 'convert_task'")."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, SAMPLE

    prof = tmp_path / "stage.prof"
    cp = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof),
                         str(ROOT / "download_data.py"), "--input", str(SAMPLE), "--output",
                         str(tmp_path / "raw"), "--workers", "1"], cwd=tmp_path,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert prof.stat().st_size > 0 and (tmp_path / "raw" / "manifest.json").exists()


def test_a_negative_size_with_its_unit_reaches_the_flags_own_check():
    """`--check-bytes -1MB` is a value, as `-5` is: the flag's own check says what is wrong
    (argparse took it for a flag and said "expected one argument")."""
    for flag, value, want in (("--check-bytes", "-1MB", "--check-bytes -1000000: must be 0"),
                              ("--check-bytes", "-0.5KB", "--check-bytes -500: must be 0"),
                              ("--val-ratio", "-1e-3", "--val-ratio -0.001: must be above 0")):
        cp = run_script("pack_parallel.py", flag, value, check=False)
        assert cp.returncode == 2 and want in cp.stderr, cp.stderr
        assert len(cp.stderr.strip().splitlines()) == 1
    cp = run_script("pack_parallel.py", "-x", check=False)   # a flag still is one
    assert cp.returncode == 2 and "unrecognized arguments: -x" in cp.stderr


def test_standard_output_on_a_full_disk_is_named_as_such(tmp_path):
    """`stage.py > file` on a full disk (/dev/full): the failed write of standard output was
    reported as the data folder's disk being full ("cannot write data/.pack_parallel.partial:
    no space left ... this run needs about 135 MB there"): it is named for what it is."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, SAMPLE

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open("/dev/full", "w") as full:
        cp = subprocess.run([sys.executable, str(ROOT / "download_data.py"), "--input",
                             str(SAMPLE), "--output", str(tmp_path / "raw"), "--workers", "1"],
                            cwd=tmp_path, env=env, stdout=full, stderr=subprocess.PIPE,
                            text=True, timeout=600)
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.strip().splitlines()[-1] == ("error: standard output could not be "
                                                  "written (No space left on device); rerun "
                                                  "with it going elsewhere")
    assert "raw" not in cp.stderr.strip().splitlines()[-1] and "Traceback" not in cp.stderr
