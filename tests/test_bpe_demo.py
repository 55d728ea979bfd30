"""bpe_demo.py reproduces the tutorial's section 4.2 printout line by line."""

from __future__ import annotations

import pytest

import bpe_demo
from conftest import run_script

# The tutorial's printout (section 4.2), with its one misprint corrected: after merge 5
# the tutorial shows `ne w est</w> ×6`, but no n+e merge has happened.
EXPECTED = """\
--- 第 1 次合并 ---
  频次最高的几对: (e+s):9, (s+t):9, (t+</w>):9, (w+e):8
  合并: e + s  ->  es   (出现 9 次)
  结果: l o w </w> ×5 | l o w e r </w> ×2 | n e w es t </w> ×6 | w i d es t </w> ×3

--- 第 2 次合并 ---
  频次最高的几对: (es+t):9, (t+</w>):9, (l+o):7, (o+w):7
  合并: es + t  ->  est   (出现 9 次)
  结果: l o w </w> ×5 | l o w e r </w> ×2 | n e w est </w> ×6 | w i d est </w> ×3

--- 第 3 次合并 ---
  频次最高的几对: (est+</w>):9, (l+o):7, (o+w):7, (n+e):6
  合并: est + </w>  ->  est</w>   (出现 9 次)
  结果: l o w </w> ×5 | l o w e r </w> ×2 | n e w est</w> ×6 | w i d est</w> ×3

--- 第 4 次合并 ---
  频次最高的几对: (l+o):7, (o+w):7, (n+e):6, (e+w):6
  合并: l + o  ->  lo   (出现 7 次)
  结果: lo w </w> ×5 | lo w e r </w> ×2 | n e w est</w> ×6 | w i d est</w> ×3

--- 第 5 次合并 ---
  频次最高的几对: (lo+w):7, (n+e):6, (e+w):6, (w+est</w>):6
  合并: lo + w  ->  low   (出现 7 次)
  结果: low </w> ×5 | low e r </w> ×2 | n e w est</w> ×6 | w i d est</w> ×3
""".splitlines()


def test_script_output_matches_tutorial_line_by_line():
    out = run_script("bpe_demo.py").stdout.splitlines()
    assert len(out) == len(EXPECTED)
    for i, (got, want) in enumerate(zip(out, EXPECTED), 1):
        assert got == want, f"line {i}: {got!r} != {want!r}"


def test_misprint_is_corrected():
    last = bpe_demo.run(bpe_demo.split_words(bpe_demo.parse_corpus(bpe_demo.TUTORIAL_CORPUS)), 5)[-1]
    assert "n e w est</w> ×6" in last and "ne w" not in last


def test_ties_go_to_the_pair_seen_first():
    # every pair occurs once; the first one seen wins, not the alphabetically smallest
    pairs = bpe_demo.count_pairs(bpe_demo.split_words([("zy", 1)]))
    assert pairs == [(("z", "y"), 1), (("y", "</w>"), 1)]
    # a+b (first seen in "cab") and b+</w> both occur twice: a+b is merged first
    lines = bpe_demo.run(bpe_demo.split_words([("cab", 1), ("ab", 1)]), 1)
    assert lines[2] == "  合并: a + b  ->  ab   (出现 2 次)"


def test_more_merges_continue_from_the_tutorial():
    out = run_script("bpe_demo.py", "--merges", "7").stdout.splitlines()
    assert out[:len(EXPECTED)] == EXPECTED
    assert out[len(EXPECTED) + 1] == "--- 第 6 次合并 ---"
    assert sum(line.startswith("--- 第") for line in out) == 7
    # merge 6 takes the first of the 6-count ties: n+e
    assert out[len(EXPECTED) + 3] == "  合并: n + e  ->  ne   (出现 6 次)"


def test_own_corpus_and_running_out_of_pairs():
    out = run_script("bpe_demo.py", "--corpus", "ab:3, c:1", "--merges", "4").stdout.splitlines()
    assert out[1] == "  频次最高的几对: (a+b):3, (b+</w>):3, (c+</w>):1"
    assert out[3] == "  结果: ab </w> ×3 | c </w> ×1"
    assert out[-2] == "--- 第 4 次合并 ---"
    assert out[-1].startswith("  没有相邻的符号对了")


def test_corpus_from_file(tmp_path):
    f = tmp_path / "words.txt"
    f.write_text("low:5\nlower:2\nnewest:6\nwidest:3\n", encoding="utf-8")
    assert run_script("bpe_demo.py", "--corpus", f).stdout.splitlines() == EXPECTED


@pytest.mark.parametrize("args, says", [
    (["--corpus", "low"], "no such file"), (["--corpus", "low:0"], "bad entry 'low:0'"),
    (["--merges", "0"], "--merges"), (["--corpus", "low:\u00b2"], "bad entry"),
    (["--corpus", "latin1.txt"], "not UTF-8 text (byte 6)")])
def test_bad_arguments_give_one_line_errors(args, says, tmp_path):
    (tmp_path / "latin1.txt").write_bytes(b"low:5 \xff\xfe:3\n")
    cp = run_script("bpe_demo.py", *args, check=False, cwd=tmp_path)
    assert cp.returncode == 2 and len(cp.stderr.splitlines()) == 1
    assert cp.stderr.startswith("error: ") and says in cp.stderr, cp.stderr
