"""download_data.py: local formats, sharding, the section 1.3 summary, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import SAMPLE, run_script
from dataprep.manifest import read_manifest
from dataprep.shards import list_shards

import download_data as dd

PROSE = ("Data engineering turns raw web text into training tokens. Each stage reads the "
         "previous stage's output and explains what it removed. ")


def _write_inputs(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(250)],
                             "text": [f"{PROSE} parquet {i}" for i in range(250)],
                             "url": [f"https://example.org/{i}" for i in range(250)]}),
                   d / "a.parquet")
    with gzip.open(d / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        for i in range(30):
            f.write(json.dumps({"text": f"{PROSE} 机器学习 jsonl {i}"}, ensure_ascii=False) + "\n")
        f.write(json.dumps({"text": None}) + "\n")
        f.write(json.dumps({"text": 12345}) + "\n")
    (d / "c.txt").write_text(f"{PROSE} one<|endoftext|>{PROSE} two<|endoftext|>  ", encoding="utf-8")


def test_local_formats_are_sharded_with_bounded_rows(tmp_path):
    _write_inputs(tmp_path / "in")
    out = tmp_path / "raw"
    cp = run_script("download_data.py", "--input", tmp_path / "in", "--output", out,
                    "--shard-rows", 100, "--txt-delimiter", "<|endoftext|>", "--workers", 1)
    shards = list_shards(out)
    rows = [pq.ParquetFile(s).metadata.num_rows for s in shards]
    assert sum(rows) == 250 + 30 + 2 and max(rows) <= 100 and len(shards) == 3
    m = read_manifest(out / "manifest.json")
    assert m["counts"]["rows"] == 282
    assert m["counts"]["skipped"] == {"null text": 1, "non-string text": 1, "empty text": 1}
    t = pq.read_table(shards[0])
    assert t.column_names[:3] == ["id", "text", "source"]
    assert t.column("id")[0].as_py() == "p0"
    ids = [i for s in shards for i in pq.read_table(s).column("id").to_pylist()]
    assert len(set(ids)) == len(ids)
    # section 1.3: rows, columns, bytes, the text field, three sample texts
    assert "rows      282" in cp.stdout and "columns" in cp.stdout and "text field" in cp.stdout
    assert cp.stdout.count("=" * 60) >= 3 and "skipped: null text" in cp.stdout


def test_write_shards_bounds_bytes(tmp_path):
    t = pa.table({"id": [str(i) for i in range(50)], "text": ["x" * 1000] * 50,
                  "source": ["s"] * 50})
    recs = dd.write_shards([t], tmp_path, "part", max_rows=1000, max_bytes=10_000)
    assert [r["rows"] for r in recs] == [10] * 5
    assert all(r["text_bytes"] <= 10_000 for r in recs)


def test_sample_dataset_and_determinism(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_script("download_data.py", "--dataset", "sample", "--output", a, "--workers", 1)
    run_script("download_data.py", "--dataset", "sample", "--output", b, "--workers", 2)
    sa, sb = list_shards(a), list_shards(b)
    assert len(sa) > 3  # the sample is split so later stages have shards to parallelise over
    assert [p.read_bytes() for p in sa] == [p.read_bytes() for p in sb]
    n = pq.ParquetFile(SAMPLE).metadata.num_rows
    assert read_manifest(a / "manifest.json")["counts"]["rows"] == n
    cols = pq.ParquetFile(sa[0]).schema_arrow.names
    assert {"id", "text", "source", "planted", "lang"} <= set(cols)


def _good_run(tmp_path: Path) -> tuple[Path, bytes]:
    _write_inputs(tmp_path / "in")
    out = tmp_path / "raw"
    run_script("download_data.py", "--input", tmp_path / "in" / "a.parquet", "--output", out)
    return out, (out / "manifest.json").read_bytes()


def _bad(tmp_path: Path, out: Path, *args) -> str:
    cp = run_script("download_data.py", *args, "--output", out, check=False)
    assert cp.returncode == 2, cp.stderr
    assert "Traceback" not in cp.stderr
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), cp.stderr
    return lines[0]


def test_bad_input_gives_one_line_and_keeps_previous_output(tmp_path):
    out, before = _good_run(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    # a missing input
    assert "no such file" in _bad(tmp_path, out, "--input", tmp_path / "nope")
    # a corrupt parquet file: the error names it
    (bad / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    assert "broken.parquet" in _bad(tmp_path, out, "--input", bad / "broken.parquet")
    # a missing text column
    pq.write_table(pa.table({"body": ["x" * 300]}), bad / "notext.parquet")
    msg = _bad(tmp_path, out, "--input", bad / "notext.parquet")
    assert "notext.parquet" in msg and "'text'" in msg
    # a text column that is not a string
    pq.write_table(pa.table({"text": [1, 2]}), bad / "ints.parquet")
    assert "ints.parquet" in _bad(tmp_path, out, "--input", bad / "ints.parquet")
    # invalid UTF-8 in jsonl and txt: file and place named
    (bad / "latin1.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    assert "latin1.jsonl:2" in _bad(tmp_path, out, "--input", bad / "latin1.jsonl")
    (bad / "latin1.txt").write_bytes(b"caf\xe9 au lait")
    assert "latin1.txt" in _bad(tmp_path, out, "--input", bad / "latin1.txt")
    # empty input: no rows at all, and only null texts
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), bad / "empty.parquet")
    assert "no documents" in _bad(tmp_path, out, "--input", bad / "empty.parquet")
    (bad / "nulls.jsonl").write_text('{"text": null}\n')
    assert "null text" in _bad(tmp_path, out, "--input", bad / "nulls.jsonl")
    # the good output from before is untouched
    assert (out / "manifest.json").read_bytes() == before
    assert len(list_shards(out)) == 1


def test_unreachable_hub_is_one_line(tmp_path):
    cp = run_script("download_data.py", "--dataset", "tinystories", "--output", tmp_path / "raw",
                    env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2"},
                    check=False, timeout=120)
    assert cp.returncode == 2
    assert "cannot list roneneldan/TinyStories on http://127.0.0.1:9" in cp.stderr
    assert "Traceback" not in cp.stderr
    assert not (tmp_path / "raw").exists()
