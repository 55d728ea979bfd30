"""Beyond one machine: Ray and Slurm executors give the local bytes; SIGKILL then rerun
gives the bytes of an uninterrupted run, skipping the tasks that had finished."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (ALL_STAGES, PIPELINE, ROOT, output_files, run_script, run_without,
                      stage_args)
from pipeline.manifest import check_input

EXECUTOR_STAGES = ["clean.py", "dedup_exact.py", "dedup_minhash.py", "pack_parallel.py"]
VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A real Ray head on loopback, started for these tests and stopped after them."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # keep Ray on 127.0.0.1
    tmp = Path(tempfile_short())
    port = _free_port()
    cmd = [str(VENV_BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1",
           f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={tmp}", "--object-store-memory=200000000"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=180)
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        subprocess.run([str(VENV_BIN / "ray"), "stop", "--force"], env=env,
                       capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


def tempfile_short() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="ray", dir="/tmp")  # unix socket paths must stay short


def _fresh_layout(sample_layout: Path, tmp_path: Path) -> Path:
    d = tmp_path / "data"
    shutil.copytree(sample_layout, d)
    return d


def test_ray_executor_gives_the_local_bytes(ray_head, pipeline_layout, sample_layout, tmp_path):
    address, env = ray_head
    d = _fresh_layout(sample_layout, tmp_path)
    for script, *_ in PIPELINE:
        extra = (["--executor", "ray", "--ray-address", address, "--workers", "2"]
                 if script in EXECUTOR_STAGES else ["--workers", "2"])
        if script == "dedup_minhash.py":   # the clusters in rounds of tasks on the head,
            extra += ["--cluster", "tasks"]   # against the local run's union-find
        run_script(script, *stage_args(d, script, *extra), env=env)
        assert output_files(d, script) == output_files(pipeline_layout, script), script
    m = json.loads((d / "dedup" / "manifest.json").read_text())
    assert m["cluster"] == "tasks" and "components-roots" in m["resources"]["phases"]


def test_ray_executor_downloads_local_files_to_the_local_bytes(ray_head, tmp_path):
    """download_data.py's conversion tasks (one per group of local files) on the Ray head
    write the shards a local run with one worker writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    address, env = ray_head
    src = tmp_path / "in"
    src.mkdir()
    for k in range(3):
        pq.write_table(pa.table({"id": [f"f{k}-{i}" for i in range(200)],
                                 "text": [f"document {i} of file {k}, " * (1 + i % 7)
                                          for i in range(200)]}), src / f"part-{k}.parquet")
    shard_bytes = 16 * min(f.stat().st_size for f in src.iterdir())   # a task per file

    def run(out, *extra):
        run_script("download_data.py", "--input", src, "--output", out,
                   "--shard-bytes", shard_bytes, *extra, env=env)
        return {p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))}

    local = run(tmp_path / "local", "--workers", "1")
    ray = run(tmp_path / "ray", "--executor", "ray", "--ray-address", address, "--workers", "2")
    assert len(local) == 3 and ray == local
    m = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert m["resources"]["phases"]["download_and_shard"]["tasks"] == 3


FAKE_SBATCH = r"""#!/bin/bash
# Stands in for a Slurm cluster: keeps the script and arguments, then runs every array
# task of the script here, one after another, as the cluster's nodes would.
set -e
script="${@: -1}"
n=$(ls "$SLURM_FAKE_LOG" | grep -c '^job' || true)
cp "$script" "$SLURM_FAKE_LOG/job$n.sh"
printf '%s\n' "$@" > "$SLURM_FAKE_LOG/job$n.args"
for a in "$@"; do case "$a" in --export=*RUN_OFFSET=*) export RUN_OFFSET="${a##*RUN_OFFSET=}";; esac; done
range=$(sed -n 's/^#SBATCH --array=\([0-9]*-[0-9]*\).*/\1/p' "$script")
export SLURM_NODELIST=localhost SLURM_JOB_ID=42$n SLURM_ARRAY_JOB_ID=42$n SLURM_NODEID=0
if [ -n "$range" ]; then
  for i in $(seq "${range%-*}" "${range#*-}"); do SLURM_ARRAY_TASK_ID=$i bash "$script" >/dev/null 2>&1; done
else
  bash "$script" >/dev/null 2>&1
fi
echo "Submitted batch job 42$n"
"""
FAKE_SRUN = '#!/bin/bash\n# srun -l -n 1 CMD ARG: run CMD ARG here\nexec "${@: -2}"\n'


def test_slurm_sbatch_scripts_and_bytes(pipeline_layout, sample_layout, tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "slurm"
    bin_dir.mkdir()
    log.mkdir()
    tools = [("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("squeue", "#!/bin/bash\n"),
             ("scontrol", '#!/bin/bash\n# scontrol show hostnames LIST\necho "${@: -1}"\n')]
    for name, body in tools:
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{VENV_BIN}:{os.environ['PATH']}", "SLURM_FAKE_LOG": str(log)}
    d = _fresh_layout(sample_layout, tmp_path)
    slurm = ["--executor", "slurm", "--slurm-partition", "cpu", "--slurm-time", "01:30:00",
             "--slurm-cpus", "2", "--slurm-job-name", "prep", "--workers", "3"]
    run_script("clean.py", *stage_args(d, "clean.py", *slurm), env=env)
    assert output_files(d, "clean.py") == output_files(pipeline_layout, "clean.py")

    shards = len(list((d / "raw").glob("*.parquet")))
    jobs = sorted(log.glob("job*.sh"))
    assert jobs, "no sbatch script was submitted"
    main_job = jobs[0].read_text()
    for directive in ["#SBATCH --partition=cpu", "#SBATCH --time=01:30:00",
                      "#SBATCH --cpus-per-task=2", "#SBATCH --job-name=prep",
                      f"#SBATCH --array=0-{shards - 1}%3"]:
        assert directive in main_job, directive
    assert "launch_pickled_pipeline" in main_job and "srun" in main_job
    assert f"cd {ROOT}" in main_job and f"export PYTHONPATH={ROOT}" in main_job
    assert "source " in main_job and "bin/activate" in main_job
    args = (log / "job0.args").read_text().splitlines()
    assert "--export=ALL,RUN_OFFSET=0" in args


def test_a_cluster_that_is_not_there_is_one_line_before_any_work(sample_layout, tmp_path):
    """No sbatch on PATH, or nothing answering at --ray-address: one line, exit 2, at once
    (a traceback from the submission before; ray.init retried for as long as it ran,
    holding the stage's locks), and no staging folder is made."""
    d = _fresh_layout(sample_layout, tmp_path)
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin"}
    assert shutil.which("sbatch", path=env["PATH"]) is None
    port = _free_port()      # nothing listens there
    for flags, says in (
            (["--executor", "slurm", "--slurm-partition", "cpu"], "sbatch is not on PATH"),
            (["--executor", "slurm"], "needs --slurm-partition"),
            (["--executor", "ray", "--ray-address", f"127.0.0.1:{port}"],
             f"cannot connect to Ray at 127.0.0.1:{port}: nothing answers there")):
        for script in ("clean.py", "verify.py"):
            args = (stage_args(d, script, *flags) if script != "verify.py"
                    else ["--data-dir", d, *flags])
            t0 = time.time()
            cp = run_script(script, *args, env=env, check=False, timeout=120)
            assert cp.returncode == 2 and cp.stderr.count("\n") == 1, cp.stderr
            assert says in cp.stderr and time.time() - t0 < 30
    assert not list(d.glob(".*.partial")) and not (d / "cleaned").exists()


def test_ray_not_installed_is_one_line_naming_the_file_that_installs_it(sample_layout,
                                                                        tmp_path):
    """Ray is in requirements-cluster.txt, not requirements.txt: --executor ray without it
    is one line naming that file, exit 2, before any work."""
    d = _fresh_layout(sample_layout, tmp_path)
    for script in ("clean.py", "verify.py"):
        flags = ["--executor", "ray", "--ray-address", f"127.0.0.1:{_free_port()}"]
        args = stage_args(d, script, *flags) if script != "verify.py" else ["--data-dir", d, *flags]
        cp = run_without("ray", script, *args, tmp_path=tmp_path, timeout=120)
        assert cp.returncode == 2, cp.stderr
        assert cp.stderr == ("error: --executor ray needs ray: "
                             "pip install -r requirements-cluster.txt\n")
    assert not list(d.glob(".*.partial")) and not (d / "cleaned").exists()


# -- crash safety ----------------------------------------------------------------------

def _finished_tasks(d: Path) -> dict[tuple[str, str], int]:
    """Tasks a killed run had finished: (phase, rank) -> mtime of that task's log.

    datatrove writes logs/task_RANK.log when it starts a task and skips a task whose
    completion marker exists, so an unchanged log proves the rerun did not redo it."""
    out = {}
    for staging in d.glob(".*.partial"):
        for comp in staging.glob("_logs/*/completions/*"):
            phase, rank = comp.parent.parent.name, comp.name
            log = comp.parent.parent / "logs" / f"task_{int(rank):05d}.log"
            if log.exists():
                out[(phase, rank)] = log.stat().st_mtime_ns
    return out


def remove_output(d, script: str):
    """Remove one stage's output from the layout `d`, keep its input; return the output
    folder (for pack_parallel.py, the data folder, where its files were)."""
    out_dir = next(d / o for s, _, o, _ in ALL_STAGES if s == script)
    if script == "pack_parallel.py":
        for n in ("train.bin", "val.bin", "pack_manifest.json"):
            (d / n).unlink()
    else:
        shutil.rmtree(out_dir)
    return out_dir


@pytest.mark.parametrize("script", [s for s, *_ in ALL_STAGES])
def test_sigkill_then_rerun_gives_uninterrupted_bytes(script, pipeline_layout, tmp_path):
    seed = int(os.environ.get("KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout, d)
    out_dir = remove_output(d, script)
    reference = output_files(pipeline_layout, script)
    m = json.loads((next(pipeline_layout / o for s, _, o, _ in ALL_STAGES if s == script) /
                    ("pack_manifest.json" if script == "pack_parallel.py" else "manifest.json")).read_text())
    total = float(m["timings"]["total"])
    delay = rng.uniform(0.3, 1.0 + 0.8 * total)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / script), *map(str, stage_args(d, script, "--workers", "1"))],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = _finished_tasks(d)
    # whatever the kill left, the final name holds nothing or a complete output
    final_manifest = d / "pack_manifest.json" if script == "pack_parallel.py" else out_dir / "manifest.json"
    if final_manifest.exists():
        check_input(final_manifest)
    run_script(script, *stage_args(d, script, "--workers", "1"))
    assert output_files(d, script) == reference, f"seed {seed}, killed after {delay:.2f}s"
    # a task the killed run had finished was not redone
    stage = script[:-3]
    for (phase, rank), mtime in finished.items():
        log = d / "logs" / stage / phase / "logs" / f"task_{int(rank):05d}.log"
        assert log.stat().st_mtime_ns == mtime, f"{phase} task {rank} was redone (seed {seed})"
    print(f"seed {seed}: killed after {delay:.2f}s with {len(finished)} tasks finished")


@pytest.mark.parametrize("script", [s for s, *_ in ALL_STAGES])
def test_rerun_after_a_failed_commit_gives_uninterrupted_bytes(script, pipeline_layout, tmp_path):
    """A run that dies after its work is done, in the commit: the staging folder holds
    whatever the stage did with its tasks' work files (kept stores moved, samples
    dropped) while the tasks' completion markers remain. The rerun resumes there and must
    give the same bytes, not trust a marker whose files are gone. The commit is made to
    fail for real: the folder it moves the task logs to is taken by a file."""
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout, d)
    remove_output(d, script)
    reference = output_files(pipeline_layout, script)
    blocker = d / "logs" / script[:-3]
    shutil.rmtree(blocker, ignore_errors=True)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("in the way")
    cp = run_script(script, *stage_args(d, script, "--workers", "2"), check=False)
    assert cp.returncode == 2, cp.stdout
    last = cp.stderr.strip().splitlines()[-1]
    assert "Traceback" not in cp.stderr, cp.stderr
    assert last.startswith("error: ") and str(blocker) in last, cp.stderr
    assert "a file stands where a folder is expected" in last and "is unchanged" in last
    assert list(d.glob(".*.partial")), "the failed run left no staging folder to resume"
    blocker.unlink()
    cp = run_script(script, *stage_args(d, script, "--workers", "2"))
    assert "resuming in" in cp.stderr
    assert output_files(d, script) == reference


def _session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes of a session: everything a stage started, however
    deep, unless it left the session on purpose."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            out.append(int(p))
    return out


@pytest.mark.parametrize("script", [s for s, *_ in ALL_STAGES])
def test_sigkill_of_the_driver_alone_leaves_no_process(script, pipeline_layout, tmp_path):
    """The OOM killer takes the driver only: its workers (and the pool's helpers) must not
    live on holding memory. Within 10 s no process of the stage remains, and a rerun
    still gives the bytes of an uninterrupted run."""
    d = tmp_path / "data"
    shutil.copytree(pipeline_layout, d)
    remove_output(d, script)
    reference = output_files(pipeline_layout, script)
    args = stage_args(d, script, "--workers", "2")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    # wait until the stage has worker processes (or, for a stage without a pool, a moment)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if len(_session_processes(proc.pid)) >= 3 or script == "download_data.py":
            break
        time.sleep(0.01)
    time.sleep(0.05)   # the sample's stages take well under a second: kill it at once
    assert proc.poll() is None, f"{script} finished before it could be killed"
    seen = _session_processes(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)          # the driver alone, not its process group
    proc.wait()
    deadline = time.time() + 10
    while _session_processes(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    left = _session_processes(proc.pid)
    for p in left:  # do not leak them into the rest of the suite, then fail
        os.kill(p, signal.SIGKILL)
    assert not left, f"{script}: {len(left)} of {len(seen)} processes still alive 10 s after the driver died"
    run_script(script, *args)
    assert output_files(d, script) == reference


KILLED_WORKER_RULE = """import os, signal
import multiprocess
import numpy as np
from algorithms.cleaning import Rule
def dies_in_a_worker(texts):
    if multiprocess.current_process().name != "MainProcess":   # in one of the pool's
        os.kill(os.getpid(), signal.SIGNAL)   # workers, as the out-of-memory killer does
    return np.ones(len(texts))
RULES = [Rule("x", "d", "xs", dies_in_a_worker, 0.5, "below", "--x-min", bins=(0, 1))]
"""


@pytest.mark.parametrize("sig, says", [
    ("SIGKILL", "(SIGKILL: the out-of-memory killer?) while running tasks; if memory ran out"),
    # a write through a memory map on a full disk, or a mapped file truncated: not memory
    ("SIGBUS", "(SIGBUS) while running tasks: a write through a memory-mapped file found the "
               "disk full, or a file it had mapped was truncated or changed")])
def test_a_worker_killed_mid_task_stops_the_stage_in_one_line(sample_layout, tmp_path, sig,
                                                               says):
    # the pool replaces a dead worker but loses its task: without a check the stage
    # waited for that result forever
    rule = tmp_path / "dies.py"
    rule.write_text(KILLED_WORKER_RULE.replace("SIGNAL", sig))
    out = tmp_path / "cleaned"
    t0 = time.time()
    cp = run_script("clean.py", "--input", sample_layout / "raw", "--output", out, "--workers",
                    "2", "--rules", f"tutorial,{rule}", check=False, timeout=120)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    line = cp.stderr.strip().splitlines()[-1]
    signum = int(getattr(signal, sig))
    assert "a worker process (pid " in line, line
    assert f"was killed by signal {signum} {says}" in line, line
    assert sig != "SIGBUS" or "memory ran out" not in line
    assert time.time() - t0 < 60
    assert not out.exists() and "the work done so far is kept in" in line


BETWEEN_PHASES = """
import os, signal, sys, time
from pipeline import local_pool as lp

def square(x):
    return x * x

pool = lp._stage_pool(2, "fork")
assert sorted(lp._results_or_dead_worker(pool, pool.imap_unordered(square, range(6)))) == \\
    [0, 1, 4, 9, 16, 25]
time.sleep(0.3)   # both idle: one waits for a task holding the queue's read lock
for p in list(pool._pool):
    os.kill(p.pid, signal.SIGKILL)
time.sleep(0.5)
again = lp._stage_pool(2, "fork")
assert again is not pool
assert sorted(lp._results_or_dead_worker(again, again.imap_unordered(square, range(6)))) == \\
    [0, 1, 4, 9, 16, 25]
assert lp._stage_pool(2, "fork") is again   # kept while its workers live
lp.close_pool()
print("ok")
"""


def test_workers_killed_between_phases_get_the_stage_a_new_pool(tmp_path):
    # an idle worker holds the task queue's read lock: killed then, the next phase of the
    # same pool waited forever, and so did Pool.terminate(); the pool is replaced instead.
    # In its own process: a pool forked from pytest's threads is not what a stage runs.
    cp = subprocess.run([sys.executable, "-c", BETWEEN_PHASES], cwd=ROOT, timeout=120,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True)
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]


SLOW_RULE = """import time
import numpy as np
from algorithms.cleaning import Rule
def slow(texts):
    time.sleep(0.4)   # a run of several seconds, whatever the machine
    return np.ones(len(texts))
RULES = [Rule("slow", "d", "slow_xs", slow, 0.5, "below", "--slow-min", bins=(0, 1))]
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_stops_like_ctrl_c(sig, sample_layout, tmp_path):
    """A scheduler's time limit (SIGTERM to the job's processes) or a closed terminal
    (SIGHUP) ended the stage without a word; now it stops as Ctrl-C does: one line, exit
    128 + the signal, no process left, and a rerun resumes to the same bytes."""
    rule = tmp_path / "slow.py"
    rule.write_text(SLOW_RULE)
    out = tmp_path / "cleaned"
    args = ["--input", sample_layout / "raw", "--output", out, "--workers", "2", "--task-mb",
            "0.2", "--rules", f"tutorial,{rule}"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "clean.py"), *map(str, args)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 60   # until some task has finished (its completion marker)
    while time.time() < deadline and proc.poll() is None and not any(
            (tmp_path / ".cleaned.partial").rglob("completions/0*")):
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    os.killpg(proc.pid, sig)                     # the whole job, as Slurm and a terminal do
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    last = err.strip().splitlines()[-1]
    assert last == (f"stopped by {signal.Signals(sig).name}: partial work is kept for resume; "
                    "the previous output is untouched"), err
    assert "Traceback" not in err
    time.sleep(1)
    assert _session_processes(proc.pid) == []
    again = run_script("clean.py", *args)
    assert "resuming" in again.stderr
    fresh = run_script("clean.py", *[a if a != out else tmp_path / "fresh" for a in args])
    assert fresh.returncode == 0
    shards = sorted(p.name for p in out.glob("*.parquet"))
    assert shards and all((out / n).read_bytes() == (tmp_path / "fresh" / n).read_bytes()
                          for n in shards)


FORKED_CHILD = """
import os, signal, sys, time
from pipeline.errors import catch_stop_signals
catch_stop_signals()
pid = os.fork()
if pid == 0:   # a child that never reset the driver's handler
    time.sleep(30)
    os._exit(0)
time.sleep(0.3)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM)
"""


def test_a_forked_child_still_dies_of_sigterm():
    # the driver turns SIGTERM into an exception; a child forked from it (a pool worker
    # starting, terminated at exit) must still die of it: as an exception swallowed by
    # an at-fork hook it lived on, and the driver waited for it forever
    cp = subprocess.run([sys.executable, "-c", FORKED_CHILD], cwd=ROOT, timeout=60,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True)
    assert cp.stdout.strip() == "True", cp.stdout + cp.stderr


SIGNAL_ON_A_SIDE_THREAD = """
import os, signal, threading, time
from pipeline.errors import catch_stop_signals
from pipeline import local_pool

def task():
    # a thread of the worker's own (pyarrow's pool, the orphan watch) gets the SIGTERM
    # while the main thread waits for the next task
    threading.Thread(target=lambda: (time.sleep(0.5),
                                     signal.pthread_kill(threading.get_ident(), signal.SIGTERM)),
                     daemon=True).start()
    return os.getpid()

catch_stop_signals()
pool = local_pool._stage_pool(2, "fork")
pid = pool.apply_async(task).get(timeout=30)
gone = False
for _ in range(100):
    time.sleep(0.1)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:   # reaped (by the pool's handler thread, which may not have
        gone = True              # recorded its exit code yet: _dead would not see it)
        break
    if local_pool._dead(local_pool._POOL["procs"]):
        break
print("dead" if gone or local_pool._dead(local_pool._POOL["procs"]) else "alive")
local_pool.abandon_pool()
"""


def test_a_pool_worker_dies_of_sigterm_on_any_thread():
    """A SIGTERM to a pool worker ends it whichever of its threads the kernel hands it to.
    With the driver's handler inherited, one delivered to a side thread only set a flag
    for the main thread, which sat waiting for a task and never looked: the pool's
    SIGTERM at exit left the worker alive and the stage hung at exit (3 runs in 100)."""
    cp = subprocess.run([sys.executable, "-c", SIGNAL_ON_A_SIDE_THREAD], cwd=ROOT, timeout=120,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True)
    assert cp.stdout.strip() == "dead", cp.stdout + cp.stderr


A_WORKER_STARTED_DURING_ABANDON = """
import os, signal, time
from multiprocess.pool import Pool
from pipeline import local_pool

real = Pool._repopulate_pool_static

def slow(*args, **kwargs):    # the pool starts a replacement worker 0.4 s late
    time.sleep(0.4)
    return real(*args, **kwargs)

Pool._repopulate_pool_static = staticmethod(slow)
pool = local_pool._stage_pool(2, "fork")
os.kill(pool._pool[0].pid, signal.SIGKILL)
time.sleep(0.15)              # its handler is now starting the replacement
local_pool.abandon_pool()
time.sleep(0.6)
alive = []
for p in os.listdir("/proc"):
    try:
        with open(f"/proc/{p}/stat") as f:
            state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError):
        continue
    if int(ppid) == os.getpid() and state != "Z":
        alive.append(int(p))
        os.kill(int(p), signal.SIGKILL)
print(len(alive))
"""


def test_a_worker_the_pool_starts_while_it_is_abandoned_is_killed_too():
    """abandon_pool (a worker died: stop the pool without terminate()) killed the workers
    it listed, while the pool's handler thread could be starting a replacement for the
    dead one just then: that worker lived on, holding the pool's pipes, and a test that
    waited for the stage's output never saw it end (1 run in 150-300). The handler is
    now woken and joined first. The replacement is delayed here to hit that moment."""
    cp = subprocess.run([sys.executable, "-c", A_WORKER_STARTED_DURING_ABANDON], cwd=ROOT,
                        timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
                        capture_output=True, text=True)
    assert cp.returncode == 0 and cp.stdout.strip() == "0", cp.stdout + cp.stderr


A_WORKER_THAT_OUTLIVES_SIGTERM = """
import signal, sys, time
from pipeline import errors, local_pool

def outlives_sigterm():   # as a worker whose SIGTERM was lost: one sent between its fork
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # and Python's after-fork reset of the
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # signal flags is dropped

local_pool.default_stop_signals = outlives_sigterm
pool = local_pool._stage_pool(2, "fork")
print(" ".join(str(p.pid) for p in pool._pool), flush=True)
for _ in range(2):
    pool.apply_async(time.sleep, (600,))
time.sleep(0.5)           # both workers are in a task
if sys.argv[1] == "stage":
    errors._exit(2)       # how a stage exits
sys.exit(3)               # any other exit: the interpreter's own, with its exit handlers
"""


@pytest.mark.parametrize("how,code", [("stage", 2), ("interpreter", 3)])
def test_a_worker_that_outlives_sigterm_cannot_hang_the_exit(how, code):
    """At exit the pool's own finalizer sent SIGTERM to its workers and waited for each
    without a time limit; a worker that lived on hung the stage for good. One did in CI:
    a stage that failed at once on a missing input sat at exit for minutes, joining a
    worker that had just been forked. Every exit now kills the workers (SIGKILL, which
    nothing drops) and waits for them a bounded time. Here the workers ignore SIGTERM and
    are busy for ten minutes: the process must still exit at once, leaving none."""
    proc = subprocess.Popen([sys.executable, "-c", A_WORKER_THAT_OUTLIVES_SIGTERM, how],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    workers = proc.stdout.readline().split()
    try:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == code, out + err
        time.sleep(0.2)
        left = _session_processes(proc.pid)
        assert len(workers) == 2 and left == [], (workers, left)
    finally:
        proc.kill()
        for p in _session_processes(proc.pid):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


COUNT_FORKS = """
import atexit, os, runpy, sys
forks = []
real_fork = os.fork

def fork():
    forks.append(1)
    return real_fork()

os.fork = fork
atexit.register(lambda: print(f"forks {len(forks)}", file=sys.stderr))
script, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""


def test_a_run_whose_input_has_no_manifest_forks_no_pool(sample_layout, tmp_path):
    """A missing input (or one without its manifest) stops the run at its input check,
    with one line: no worker pool is forked for it first. The same command on a real
    input of several shards does fork one (the count is not trivially zero)."""
    def run(inp):
        cp = subprocess.run([sys.executable, "-c", COUNT_FORKS, str(ROOT / "clean.py"),
                             "--input", str(inp), "--output", str(tmp_path / "out"),
                             "--workers", "2", "--task-mb", "1"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=120)
        return cp.returncode, cp.stderr

    (tmp_path / "no_manifest").mkdir()
    shutil.copy(next((sample_layout / "raw").glob("*.parquet")), tmp_path / "no_manifest")
    for inp in (tmp_path / "missing", tmp_path / "no_manifest"):
        code, err = run(inp)
        assert code == 2 and "forks 0" in err, err
        assert len([ln for ln in err.splitlines() if ln.startswith("error: ")]) == 1, err
    code, err = run(sample_layout / "raw")
    assert code == 0 and "forks 2" in err, err


POOL_WORKER_SIGNALS = """
import signal
from pipeline.errors import catch_stop_signals
from pipeline import local_pool

def task(_):
    return [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]

catch_stop_signals()
pool = local_pool._stage_pool(2, "fork")
got = pool.map(task, range(4))
print(all(g == [signal.SIG_IGN, signal.SIG_DFL, signal.SIG_DFL] for g in got))
local_pool.close_pool()
"""


def test_pool_workers_leave_ctrl_c_to_the_driver():
    """A pool worker ignores Ctrl-C (the driver answers it in one line and drops the
    workers): each worker's KeyboardInterrupt printed a traceback, and one raised while
    the worker read the task queue held its lock, so the pool's shutdown waited forever
    (4 Ctrl-C in 10 during train_tokenizer). SIGTERM and SIGHUP take their default action."""
    cp = subprocess.run([sys.executable, "-c", POOL_WORKER_SIGNALS], cwd=ROOT, timeout=120,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                        text=True)
    assert cp.stdout.strip() == "True", cp.stdout + cp.stderr


def test_a_link_onto_its_own_file_leaves_no_tmp(tmp_path):
    """link_or_copy where dst is already a link of src (a rerun relinking a kept file):
    renaming one link onto another of the same file does nothing, and the .tmp link
    stayed in the output (stray files after a resumed clean or dedup_minhash)."""
    from pipeline.shards import link_or_copy

    src = tmp_path / "a.parquet"
    src.write_bytes(b"x" * 10)
    dst = tmp_path / "out" / "a.parquet"
    dst.parent.mkdir()
    link_or_copy(src, dst)
    link_or_copy(src, dst)
    assert sorted(p.name for p in dst.parent.iterdir()) == ["a.parquet"]
    assert dst.read_bytes() == src.read_bytes()


def test_a_file_size_limit_is_a_write_error_line(tmp_path):
    import errno

    from pipeline.disk import write_error_line

    line = write_error_line(OSError(errno.EFBIG, "File too large", str(tmp_path / "x.bin")))
    assert line is not None and "file too large" in line and tmp_path.name in line


HUB_SHIM = '''
import sys
from pipeline.datatrove_import import import_datatrove_io
import_datatrove_io()
from datatrove.executor import LocalPipelineExecutor  # noqa: F401
import datatrove.io as dio
from fsspec.implementations.local import LocalFileSystem
print("hub client", "huggingface_hub.hf_api" in sys.modules,
      "huggingface_hub.hf_file_system" in sys.modules)
print("local is hub", isinstance(LocalFileSystem(), dio.HfFileSystem),
      isinstance(3, dio.HfFileSystem))
print("still unimported", "huggingface_hub.hf_file_system" in sys.modules)
import huggingface_hub
from huggingface_hub import HfFileSystem, cached_assets_path
print("real names", HfFileSystem.__module__, cached_assets_path.__module__,
      huggingface_hub.HfFileSystem is HfFileSystem)
fs = HfFileSystem()
print("hub is hub", isinstance(fs, dio.HfFileSystem),
      isinstance(LocalFileSystem(), dio.HfFileSystem),
      issubclass(HfFileSystem, dio.HfFileSystem), type(dio.HfFileSystem()) is HfFileSystem)
print("assets", dio.cached_assets_path(library_name="datatrove", namespace="filters", subfolder="x")
      == cached_assets_path(library_name="datatrove", namespace="filters", subfolder="x"))
'''


def test_datatrove_io_imports_without_the_hub_client(tmp_path):
    """A stage's datatrove executor does not load the Hugging Face hub's client (0.13-0.15
    CPU s of every stage's start-up), yet datatrove.io's two uses of it still answer as the
    hub's own names would, and any later import gets the real names."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_OFFLINE": "1"}
    cp = subprocess.run([sys.executable, "-c", HUB_SHIM], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr[-3000:]
    out = cp.stdout.splitlines()
    assert out[0] == "hub client False False", cp.stdout
    assert out[1] == "local is hub False False", cp.stdout
    assert out[2] == "still unimported False", cp.stdout
    name, cached, same = out[3].split()[2:]
    assert (name, same) == ("huggingface_hub.hf_file_system", "True"), cp.stdout
    assert cached.startswith("huggingface_hub."), cp.stdout
    assert cached != "pipeline.datatrove_import", cp.stdout
    assert out[4] == "hub is hub True False True True", cp.stdout
    assert out[5] == "assets True", cp.stdout


FORKSERVER_PROBE = '''
def probe(_):
    import sys
    return ("datatrove.io" in sys.modules, "huggingface_hub.hf_api" in sys.modules)
if __name__ == "__main__":
    import multiprocess
    from pipeline.local_pool import _preload_in_forkserver
    _preload_in_forkserver("pipeline.progress")
    with multiprocess.get_context("forkserver").Pool(1) as p:
        print(p.map(probe, [0]))
'''


def test_the_fork_server_imports_datatrove_without_the_hub_client(tmp_path):
    """A pool started by datatrove's fork server (a phase whose stage started no pool
    early, or a new pool after a worker died): its workers have datatrove's executor
    imported, without the hub's client."""
    script = tmp_path / "probe.py"
    script.write_text(FORKSERVER_PROBE)
    cp = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert cp.stdout.strip() == "[(True, False)]", cp.stdout
