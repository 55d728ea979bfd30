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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
