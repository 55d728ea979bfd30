"""Shared test fixtures: run stage scripts for real, on real parquet files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "sample.parquet"
for _p in (ROOT, ROOT / "bench", ROOT / "scripts"):  # stage, bench and script modules
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def pytest_configure(config):
    """The tests run against requirements-dev.txt (the reference tokenizers, Ray, the
    benchmarks' anchors): one line naming it when a package is missing, before any test."""
    from pipeline.requirements import install_line, missing_from

    gone = missing_from("requirements-dev.txt")
    if gone:
        pytest.exit(install_line("the test suite", gone, "requirements-dev.txt"), returncode=2)


WATCH = '''
import os, runpy, sys, traceback
LOG, NAMES = os.environ["IMPORT_WATCH_LOG"], os.environ["IMPORT_WATCH"].split(",")
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in NAMES:
            with open(LOG, "a") as f:
                stack = [s for s in traceback.format_stack() if "<frozen importlib" not in s]
                f.write(f"{name} imported in pid {os.getpid()}, argv {sys.argv}:\\n"
                        + "".join(stack[-14:]) + "\\n")
        return None
sys.meta_path.insert(0, Watch())   # inherited by every worker the stage forks
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
'''


def run_watching_imports(script: str, args: list, modules: str, tmp_path: Path) -> str:
    """Run a stage as run_script does, and return where any process it starts (driver or
    forked worker) imported one of `modules` (comma-separated): "" when none did."""
    watch = tmp_path / "watch_imports.py"
    watch.write_text(WATCH)
    log = tmp_path / "imports.txt"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IMPORT_WATCH_LOG": str(log),
           "IMPORT_WATCH": modules}
    cp = subprocess.run([sys.executable, str(watch), str(ROOT / script), *map(str, args)],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, f"{script}: {cp.stdout[-2000:]} {cp.stderr[-2000:]}"
    return log.read_text()[:4000] if log.exists() else ""


# runs a script as if the modules named (comma-separated) were not installed: None in
# sys.modules is what Python's import and importlib.util.find_spec then see
WITHOUT = '''
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
script = sys.argv[2]
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
'''


def run_without(modules: str, script: str, *args, tmp_path: Path,
                timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a script as run_script does, with the modules `modules` (comma-separated)
    missing, as they are where the requirements file that installs them is not."""
    runner = tmp_path / "without.py"
    runner.write_text(WITHOUT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(runner), modules, str(ROOT / script),
                           *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run_script(script: str, *args: str, cwd: Path | None = None, check: bool = True,
               env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a stage script as a user would (python script.py ...) and capture its output."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT)
    e.update(env or {})
    cp = subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], cwd=cwd or ROOT,
                        env=e, capture_output=True, text=True, timeout=timeout)
    if check and cp.returncode != 0:
        raise AssertionError(f"{script} {' '.join(map(str, args))} exited {cp.returncode}\n"
                             f"stdout:\n{cp.stdout[-4000:]}\nstderr:\n{cp.stderr[-4000:]}")
    return cp


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under folder (by its path relative to it) with its mtime and bytes:
    two snapshots are equal only if no file was added, removed or rewritten."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def data_files(out: Path) -> dict[str, bytes]:
    """Every file of a stage's output but its report and manifest (the shards, and the
    kept signals or signatures): what a rerun must give byte for byte."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.parent.name != "report" and p.name != "manifest.json"}


@pytest.fixture(scope="session")
def sample_layout(tmp_path_factory) -> Path:
    """A data/ folder holding data/raw/ made from the bundled sample (read-only for tests)."""
    d = tmp_path_factory.mktemp("layout") / "data"
    d.mkdir()
    run_script("download_data.py", "--dataset", "sample", "--output", d / "raw", "--workers", "2")
    return d


@pytest.fixture
def layout_copy(sample_layout, tmp_path) -> Path:
    """A private, writable copy of the session's data/ folder."""
    d = tmp_path / "data"
    shutil.copytree(sample_layout, d)
    return d


# The pipeline in order: (script, input under data/, output under data/, extra flags).
# The tokenizer is trained with a small vocabulary: the sample is only a few MB.
PIPELINE = [
    ("clean.py", "raw", "cleaned", []),
    ("dedup_exact.py", "cleaned", "dedup_exact", []),
    ("dedup_minhash.py", "dedup_exact", "dedup", []),
    ("train_tokenizer.py", "dedup", "tokenizer", ["--vocab-size", "2000"]),
    ("pack_parallel.py", "dedup", ".", ["--tokenizer", "{data}/tokenizer/tokenizer.json"]),
]

# download_data.py reads no earlier stage: on the sample it takes --dataset instead of --input
ALL_STAGES = [("download_data.py", None, "raw", ["--dataset", "sample"])] + PIPELINE


def stage_args(data: Path, script: str, *extra: str) -> list[str]:
    """The command-line arguments that run `script` on the layout under `data`."""
    for s, inp, out, flags in ALL_STAGES:
        if s == script:
            return [*(["--input", data / inp] if inp else []), "--output", data / out,
                    *[f.format(data=data) for f in flags], *extra]
    raise KeyError(script)


def run_pipeline(data: Path, upto: str | None = None, *extra: str) -> None:
    """Run the stages after download on `data`, in order, up to and including `upto`."""
    for script, *_ in PIPELINE:
        run_script(script, *stage_args(data, script, *extra))
        if script == upto:
            return


def output_files(data: Path, script: str) -> dict[str, bytes]:
    """The data files a stage wrote (as its manifest lists them), name -> bytes."""
    import json

    for s, _, out, _ in ALL_STAGES:
        if s == script:
            m = data / out / ("pack_manifest.json" if s == "pack_parallel.py" else "manifest.json")
            files = json.loads(m.read_text())["files"]
            return {f["name"]: (m.parent / f["name"]).read_bytes() for f in files}
    raise KeyError(script)


@pytest.fixture(scope="session")
def pipeline_layout(sample_layout, tmp_path_factory) -> Path:
    """The whole pipeline run once on the bundled sample with the local executor (read-only)."""
    d = tmp_path_factory.mktemp("pipeline") / "data"
    shutil.copytree(sample_layout, d)
    run_pipeline(d, None, "--workers", "2")
    return d
