"""Every script answers --help and carries the stage contract's flags; the bench suite runs."""

from __future__ import annotations

import json

import pytest

from conftest import run_script

STAGES = ["download_data.py", "clean.py", "dedup_exact.py", "dedup_minhash.py",
          "train_tokenizer.py", "pack_parallel.py"]
CLUSTER_STAGES = ["clean.py", "dedup_exact.py", "dedup_minhash.py", "pack_parallel.py"]
OTHERS = ["verify.py", "minhash_demo.py", "bpe_demo.py", "compare_tokenizers.py", "bench/run_all.py"]


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


def test_verify_checks_a_whole_layout_flag():
    assert "--data-dir" in run_script("verify.py", "--help").stdout


def test_bench_suite_smoke(tmp_path):
    """`make bench` on a tiny corpus: every benchmark runs and reports its rows (no timing)."""
    cp = run_script("bench/run_all.py", "--quick", "--out", tmp_path, timeout=900)
    results = json.loads((tmp_path / "quick.json").read_text())
    names = {r["bench"] for r in results}
    assert names == {"clean", "dedup_exact", "minhash", "tokenizer", "pack", "rerun"}, cp.stdout
    for r in results:
        assert not r.get("error"), (r["bench"], r.get("error"))
        assert r["rows"] and r["peak_rss_mb"] > 0
        for row in r["rows"]:
            if r["bench"] == "rerun":   # a ratio of wall times (not judged here), bytes must match
                assert row["ratio"] > 0 and row["name"]
                assert r["extra"]["identical_to_fresh"] == {"clean": True, "dedup_minhash": True}
            else:
                assert row["mb_per_s_per_core"] > 0 and row["name"]
    assert "projected wall time for FineWeb-Edu sample-10BT" in cp.stdout
    assert "dominant stage" in cp.stdout
    assert (tmp_path / "quick.md").read_text().startswith("Command: `python bench/run_all.py --quick")
