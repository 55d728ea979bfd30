"""minhash_demo.py: the section 3.4 and 3.5 tables and the S-curve figure."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import run_script

from algorithms import minhash as dedup_minhash
import minhash_demo as demo

# Section 3.5's table as printed in the tutorial: s, then (b=8,r=16), (16,8), (32,4).
TUTORIAL = """
0.30	0.000	0.001	0.229
0.50	0.000	0.061	0.873
0.60	0.002	0.237	0.988
0.70	0.026	0.613	1.000
0.80	0.204	0.947	1.000
0.90	0.806	1.000	1.000
0.95	0.990	1.000	1.000
"""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "figs" / "s_curve.png"
    cp = run_script("minhash_demo.py", "--out", out, "--trials", "1500")
    return out, cp


def test_section_3_5_table_equals_the_tutorial(demo_run):
    _, cp = demo_run
    printed = {}
    for line in cp.stdout.splitlines():
        m = re.fullmatch(r"\s*(0\.\d\d)" + r"\s+([01]\.\d{3})" * 6 + r"\s*", line)
        if m:
            v = [float(x) for x in m.groups()[1:]]
            printed[m.group(1)] = (v[0::2], v[1::2])        # formula columns, measured columns
    want = {line.split()[0]: [float(x) for x in line.split()[1:]]
            for line in TUTORIAL.strip().splitlines()}
    assert set(printed) == set(want)
    for s, (formula, measured) in printed.items():
        assert formula == want[s], s                        # identical to three decimals
        # the simulated rate through the real code agrees with the formula:
        # 4 binomial standard errors at 1500 pairs, plus a little slack
        for f, e in zip(formula, measured):
            assert abs(f - e) <= 4 * np.sqrt(max(f * (1 - f), 1e-3) / 1500) + 0.005, (s, f, e)
    assert "identical to three decimals" in cp.stdout


def test_section_3_4_table(demo_run):
    _, cp = demo_run
    assert "A~B = 0.6571, A~C = 0.0000" in cp.stdout
    rows = {}
    for line in cp.stdout.splitlines():
        m = re.fullmatch(r"\s*(16|64|128|256)" + r"\s+(\S+)" * 6 + r"\s*", line)
        if m:
            rows[int(m.group(1))] = [float(x) for x in m.groups()[1:]]
    assert sorted(rows) == [16, 64, 128, 256]
    means = []
    for k, (est_ab, err_ab, std, mean_err, est_ac, err_ac) in rows.items():
        assert err_ab == pytest.approx(abs(est_ab - 0.6571), abs=2e-4)
        assert std == pytest.approx(np.sqrt(0.6571 * 0.3429 / k), abs=2e-4)
        assert err_ab < 4 * std                             # a sane estimator at every k
        # the mean |error| of a normal estimate is 0.8 std. errors; 100 seeds: within ~15%
        assert 0.6 * std < mean_err < 1.0 * std, (k, mean_err, std)
        means.append(mean_err)
        assert est_ac == 0.0 and err_ac == 0.0
    assert means == sorted(means, reverse=True)             # shrinks as k grows


def test_estimates_come_from_the_stage_minhash():
    rows = demo.estimate_table()
    k128 = next(r for r in rows if r["k"] == 128)
    sa, sb = dedup_minhash.MinHasher(128).signatures([demo.A, demo.B], normalised=True)
    assert k128["est_ab"] == float(dedup_minhash.similarity(sa, sb))
    assert demo.MinHasher is dedup_minhash.MinHasher        # no second implementation


def test_pairs_have_exact_jaccard():
    rng = np.random.default_rng(0)
    for s in demo.S_VALUES:
        a, b = demo.pair_with_jaccard(s, rng)
        sa, sb = set(a.tolist()), set(b.tolist())
        assert len(sa & sb) / len(sa | sb) == pytest.approx(s)


def test_png_saved_and_bad_flags(demo_run, tmp_path):
    out, cp = demo_run
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert f"saved the S-curve to {out}" in cp.stdout
    bad = run_script("minhash_demo.py", "--out", tmp_path / "x.png", "--trials", "0", check=False)
    assert bad.returncode == 2 and "--trials" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_script("minhash_demo.py", "--out", tmp_path / "x.jpg", check=False)
    assert bad.returncode == 2 and "PNG" in bad.stderr
    bad = run_script("minhash_demo.py", "--out", tmp_path / "x.png", "--seed", "-1", check=False)
    assert bad.returncode == 2 and bad.stderr == "error: --seed -1: must be >= 0\n"
    (tmp_path / "f").write_text("a file")
    bad = run_script("minhash_demo.py", "--out", tmp_path / "f" / "x.png", check=False)
    assert bad.returncode == 2 and f"{tmp_path / 'f'} is a file, not a folder" in bad.stderr
    assert len(bad.stderr.splitlines()) == 1
