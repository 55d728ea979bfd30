"""download_data.py: local formats, sharding, the section 1.3 summary, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import SAMPLE, run_script, snapshot
from hub_server import HubServer
from pipeline.manifest import read_manifest
from pipeline.report.header import config_note
from pipeline.shards import list_shards

from pipeline.sources import write_shards

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
                    "--shard-rows", 100, "--txt-delimiter", "<|endoftext|>", "--workers", 1,
                    "--on-bad-record", "skip")
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
    # the bad record (a number as text) is named by file and line, in the manifest too
    assert m["bad_records"] == [{"file": str(tmp_path / "in" / "b.jsonl.gz"), "where": "line 32",
                                 "reason": "non-string text (int)"}]
    assert "b.jsonl.gz line 32: non-string text" in cp.stdout


def test_write_shards_bounds_bytes(tmp_path):
    t = pa.table({"id": [str(i) for i in range(50)], "text": ["x" * 1000] * 50,
                  "source": ["s"] * 50})
    recs = write_shards([t], tmp_path, "part", max_rows=1000, max_bytes=10_000)
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
    # HF_ENDPOINT is set: the hint is about that mirror, not to set it
    assert "is HF_ENDPOINT's mirror up?" in cp.stderr and "set HF_ENDPOINT" not in cp.stderr
    assert not (tmp_path / "raw").exists()
    # an endpoint that takes the connection and never answers, and one that is no URL
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        cp = run_script("download_data.py", "--dataset", "tinystories", "--output",
                        tmp_path / "raw", check=False, timeout=120,
                        env={"HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
                             "HF_HUB_ETAG_TIMEOUT": "1"})
    finally:
        silent.close()
    assert cp.returncode == 2 and "timed out" in cp.stderr and "Traceback" not in cp.stderr
    cp = run_script("download_data.py", "--dataset", "tinystories", "--output", tmp_path / "raw",
                    env={"HF_ENDPOINT": "http://[::1"}, check=False, timeout=120)
    assert cp.returncode == 2 and "cannot list" in cp.stderr and "Traceback" not in cp.stderr


def _parquet_bytes(texts: list[str]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": texts}), sink)
    return sink.getvalue().to_pybytes()


def _raw_texts(out: Path) -> list[str]:
    return [t for s in list_shards(out) for t in pq.read_table(s)["text"].to_pylist()]


def _shard_bytes(out: Path) -> dict:
    return {p.name: p.read_bytes() for p in list_shards(out)}


def test_hub_dataset_comes_from_one_commit_and_an_unchanged_rerun_fetches_nothing(tmp_path):
    """--dataset tinystories against a hub on this machine (HF_ENDPOINT, as a mirror), with
    the real huggingface_hub client: the files matching the dataset's pattern are fetched
    from the commit "main" points to, re-sharded and deleted; a rerun while "main" still
    points there fetches nothing; a new commit is fetched anew."""
    repo = "roneneldan/TinyStories"
    a = [f"Once upon a time, story {i} of file A." for i in range(30)]
    b = [f"Once upon a time, story {i} of file B." for i in range(20)]
    files = {"data/train-00000-of-00002.parquet": _parquet_bytes(a),
             "data/train-00001-of-00002.parquet": _parquet_bytes(b),
             "data/validation-00000-of-00001.parquet": _parquet_bytes(["not in the pattern"]),
             "README.md": b"# TinyStories"}
    out, dl = tmp_path / "raw", tmp_path / "dl"
    args = ("--dataset", "tinystories", "--output", out, "--download-dir", dl)
    with HubServer() as hub:
        sha = hub.publish(repo, files)
        env = {"HF_ENDPOINT": hub.url}
        run_script("download_data.py", *args, env=env)
        assert sorted(hub.downloads) == ["data/train-00000-of-00002.parquet",
                                         "data/train-00001-of-00002.parquet"]
        assert _raw_texts(out) == a + b
        m = read_manifest(out / "manifest.json")
        assert m["config"]["source"]["commit"] == sha and m["counts"]["rows"] == 50
        assert f"{repo} at commit {sha[:12]}" in config_note("download_data", m)
        fetched = [r for r in hub.requests if "/resolve/" in r]
        assert fetched and all(f"/resolve/{sha}/" in r for r in fetched)   # never "main"
        assert not list(dl.rglob("*.parquet"))                 # each deleted once re-sharded

        before = snapshot(out)
        cp = run_script("download_data.py", *args, env=env)
        assert "is up to date" in cp.stdout and "rows      50" in cp.stdout
        assert len(hub.downloads) == 2                          # nothing fetched
        assert snapshot(out) == before
        assert m["endpoint"] == hub.url
        # a mirror serving the same commit (HF_ENDPOINT changed): the data is named by repo
        # and commit, not by where it came from, so still nothing to fetch
        with HubServer() as mirror:
            assert mirror.publish(repo, files) == sha
            cp = run_script("download_data.py", *args, env={"HF_ENDPOINT": mirror.url})
            assert "is up to date" in cp.stdout and not mirror.downloads

        # the dataset is updated on the hub: the rerun fetches the new commit
        b2 = b + ["Once upon a time, a story added later."]
        sha2 = hub.publish(repo, {**files, "data/train-00001-of-00002.parquet": _parquet_bytes(b2)})
        cp = run_script("download_data.py", *args, env=env)
        assert "up to date" not in cp.stdout and len(hub.downloads) == 4
        assert _raw_texts(out) == a + b2
        assert read_manifest(out / "manifest.json")["config"]["source"]["commit"] == sha2
        # --force fetches again even when nothing changed, to the same bytes
        again = _shard_bytes(out)
        run_script("download_data.py", *args, "--force", env=env)
        assert len(hub.downloads) == 6
        assert _shard_bytes(out) == again
    # the hub cannot be reached: one line, which says what data/raw already holds
    cp = run_script("download_data.py", *args, env=env, check=False)
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert cp.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: cannot list")
    assert f"still holds commit {sha2[:12]} of it (51 rows" in lines[0]
    assert _raw_texts(out) == a + b2
    # a manifest written before the commit was recorded: no made-up commit is named
    mpath = out / "manifest.json"
    old = json.loads(mpath.read_text())
    del old["config"]["source"]["commit"]
    mpath.write_text(json.dumps(old))
    cp = run_script("download_data.py", *args, env=env, check=False)
    assert cp.returncode == 2 and "still holds a download of it (51 rows" in cp.stderr
    assert "commit" not in config_note("download_data", old)


def test_hub_download_resumes_through_a_mirror(tmp_path):
    """A download that fails halfway (the hub stops serving a file) is resumed by a rerun
    through a mirror (HF_ENDPOINT, as section 1.1 suggests): the files already finished
    are not fetched again, and the output is that of an uninterrupted run."""
    repo = "roneneldan/TinyStories"
    parts = [[f"Once upon a time, story {i} of file {k}." for i in range(10 + k)]
             for k in range(3)]
    files = {f"data/train-0000{k}-of-00003.parquet": _parquet_bytes(t)
             for k, t in enumerate(parts)}
    out, dl = tmp_path / "raw", tmp_path / "dl"
    # one worker: files 0 and 1 are finished before file 2 fails (with two, file 2's
    # failure can stop the run while file 1 is still downloading, as a CI run showed)
    args = ("--dataset", "tinystories", "--output", out, "--download-dir", dl, "--workers", "1")
    with HubServer() as hub, HubServer() as mirror:
        hub.publish(repo, files)
        mirror.publish(repo, files)
        hub.withheld.add("data/train-00002-of-00003.parquet")
        cp = run_script("download_data.py", *args, env={"HF_ENDPOINT": hub.url}, check=False)
        assert cp.returncode == 2 and "train-00002-of-00003.parquet failed" in cp.stderr
        assert "rerun to resume" in cp.stderr and not out.exists()
        assert len(hub.downloads) == 2
        cp = run_script("download_data.py", *args, env={"HF_ENDPOINT": mirror.url})
        assert "resuming in" in cp.stderr
        assert mirror.downloads == ["data/train-00002-of-00003.parquet"]
        assert _raw_texts(out) == [t for p in parts for t in p]
        assert read_manifest(out / "manifest.json")["endpoint"] == mirror.url


def test_hub_download_does_not_resume_into_another_commit(tmp_path):
    """The branch moves between a failed run and its rerun: the finished files belong to
    the old commit, so the rerun starts afresh from the new one, never mixing the two."""
    repo = "roneneldan/TinyStories"
    old = {f"data/train-0000{k}-of-00002.parquet": _parquet_bytes([f"old story {k}"])
           for k in range(2)}
    new = {f"data/train-0000{k}-of-00002.parquet": _parquet_bytes([f"new story {k}"])
           for k in range(2)}
    out, dl = tmp_path / "raw", tmp_path / "dl"
    # one worker: file 0 is finished before file 1 fails (with two, file 1's failure can
    # stop the run while file 0 is still downloading, and nothing is finished)
    args = ("--dataset", "tinystories", "--output", out, "--download-dir", dl, "--workers", "1")
    with HubServer() as hub:
        hub.publish(repo, old)
        hub.withheld.add("data/train-00001-of-00002.parquet")
        env = {"HF_ENDPOINT": hub.url}
        assert run_script("download_data.py", *args, env=env, check=False).returncode == 2
        assert hub.downloads == ["data/train-00000-of-00002.parquet"]
        hub.withheld.clear()
        sha = hub.publish(repo, new)
        cp = run_script("download_data.py", *args, env=env)
        assert "resuming in" not in cp.stderr
        assert hub.downloads[1:] == sorted(new)
        assert _raw_texts(out) == ["new story 0", "new story 1"]
        assert read_manifest(out / "manifest.json")["config"]["source"]["commit"] == sha


def test_unchanged_local_rerun_converts_nothing(tmp_path):
    """Local files named by path, size and mtime: the same files again do nothing; a file
    rewritten, another flag or --force converts again, to what a fresh run writes."""
    _write_inputs(tmp_path / "in")
    out = tmp_path / "raw"
    src = tmp_path / "in"

    def run(*flags):
        return run_script("download_data.py", "--input", src, "--output", out,
                          "--on-bad-record", "skip", *flags)

    run("--shard-rows", 100)
    before = snapshot(out)
    cp = run("--shard-rows", 100)
    assert "is up to date" in cp.stdout
    assert snapshot(out) == before
    # a shard damaged in place is not current: converted again, to the same bytes
    shard = list_shards(out)[0]
    good = shard.read_bytes()
    shard.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    cp = run("--shard-rows", 100)
    assert "up to date" not in cp.stdout and shard.read_bytes() == good
    # an input file rewritten with other text
    (src / "c.txt").write_text(f"{PROSE} three<|endoftext|>{PROSE} four", encoding="utf-8")
    run("--shard-rows", 100)
    assert any("three" in t for t in _raw_texts(out))
    # another flag
    cp = run("--shard-rows", 50)
    assert "up to date" not in cp.stdout
    assert max(pq.ParquetFile(p).metadata.num_rows for p in list_shards(out)) == 50
    # --force converts again, to the same bytes
    again = _shard_bytes(out)
    cp = run("--shard-rows", 50, "--force")
    assert "up to date" not in cp.stdout
    assert _shard_bytes(out) == again


def _bad_records_inputs(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "a.jsonl").write_bytes(
        b'{"text": "good one, long enough to matter"}\n'
        b'{"text": "broken json\n'                      # line 2: invalid JSON
        b'{"text": "caf\xe9"}\n'                         # line 3: invalid UTF-8
        b'{"text": ["a", "list"]}\n'                     # line 4: not a string
        b'{"body": "no text field"}\n'                   # line 5: no text field
        b'{"text": "good two"}\n')
    texts = pa.array([b"fine parquet text", b"bad \xff\xfe bytes", b"also fine"],
                     pa.binary()).view(pa.string())     # row 1: invalid UTF-8 in parquet
    pq.write_table(pa.table({"text": texts}), d / "b.parquet")
    (d / "c.txt").write_bytes(b"\xff not utf-8 at all")  # a whole .txt file


def test_bad_records_stop_the_run_by_default_naming_file_and_line(tmp_path):
    _bad_records_inputs(tmp_path / "in")
    cp = run_script("download_data.py", "--input", tmp_path / "in" / "a.jsonl",
                    "--output", tmp_path / "raw", check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert "a.jsonl:2" in cp.stderr and "invalid JSON" in cp.stderr
    assert "--on-bad-record skip" in cp.stderr
    assert not (tmp_path / "raw").exists()
    cp = run_script("download_data.py", "--input", tmp_path / "in" / "b.parquet",
                    "--output", tmp_path / "raw", check=False)
    assert cp.returncode == 2 and "b.parquet:1" in cp.stderr and "invalid UTF-8" in cp.stderr


def test_on_bad_record_skip_counts_names_and_keeps_the_rest(tmp_path):
    _bad_records_inputs(tmp_path / "in")
    out = tmp_path / "raw"
    cp = run_script("download_data.py", "--input", tmp_path / "in", "--output", out,
                    "--on-bad-record", "skip")
    texts = [t for s in list_shards(out) for t in pq.read_table(s).column("text").to_pylist()]
    assert texts == ["good one, long enough to matter", "good two", "fine parquet text",
                     "also fine"]
    m = read_manifest(out / "manifest.json")
    where = [(Path(r["file"]).name, r["where"], r["reason"].split(" (")[0]) for r in m["bad_records"]]
    assert where == [("a.jsonl", "line 2", "invalid JSON"), ("a.jsonl", "line 3", "invalid UTF-8"),
                     ("a.jsonl", "line 4", "non-string text"), ("a.jsonl", "line 5", "no 'text' field"),
                     ("b.parquet", "row 1", "invalid UTF-8"), ("c.txt", "byte 0", "invalid UTF-8")]
    assert m["counts"]["bad_records"] == 6
    assert m["counts"]["skipped"] == {"invalid JSON": 1, "invalid UTF-8": 3, "non-string text": 1,
                                      "no 'text' field": 1}
    lines = (out / "report" / "bad_records.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == m["bad_records"]
    assert "skipped bad record:" in cp.stdout and "bad_records.jsonl" in cp.stdout


def test_many_local_files_convert_in_parallel_tasks_to_the_same_shards(tmp_path):
    """Local files of at least 1/16 of --shard-bytes each are units of their own, converted
    by parallel tasks: the shards are the same bytes with 1 and 2 workers, every document
    is there in file order, smaller files share a unit; a bad record in a later unit
    stops the run with one line naming its file (error), or is counted with the others in
    unit order (skip)."""
    src = tmp_path / "in"
    src.mkdir()
    texts = []
    for k in range(4):   # four parquet files, each well over 1/16 of --shard-bytes
        t = [f"{PROSE} file {k} doc {i} " + "x" * (i % 50) for i in range(300)]
        texts += t
        pq.write_table(pa.table({"id": [f"f{k}-{i}" for i in range(300)], "text": t}),
                       src / f"part-{k}.parquet")
    for k in range(3):   # three small JSON-lines files: one unit together
        with open(src / f"small-{k}.jsonl", "w", encoding="utf-8") as f:
            f.write(json.dumps({"text": f"small file {k} {PROSE}"}) + "\n")
    texts += [f"small file {k} {PROSE}" for k in range(3)]
    sizes = [(src / f"part-{k}.parquet").stat().st_size for k in range(4)]
    shard_bytes = 16 * min(sizes)

    def run(out, workers, *flags, check=True):
        return run_script("download_data.py", "--input", src, "--output", out,
                          "--shard-bytes", shard_bytes, "--workers", workers, *flags, check=check)

    run(tmp_path / "one", 1)
    run(tmp_path / "two", 2)
    assert _shard_bytes(tmp_path / "one") == _shard_bytes(tmp_path / "two")
    # several units: the pool is forked from the stage at its start (start_pool_early),
    # before any thread, not from a fork server that would import datatrove once more
    from conftest import run_watching_imports
    log = run_watching_imports("download_data.py", ["--input", src, "--output", tmp_path / "w",
                                                    "--shard-bytes", shard_bytes, "--workers", 2],
                               "datatrove.executor.local", tmp_path)
    assert "start_pool_early" in log, log
    assert _shard_bytes(tmp_path / "w") == _shard_bytes(tmp_path / "one")
    names = sorted(_shard_bytes(tmp_path / "two"))
    assert [n.split("-")[1] for n in names] == ["00000", "00001", "00002", "00003", "00004"]
    assert _raw_texts(tmp_path / "two") == texts
    m = read_manifest(tmp_path / "two" / "manifest.json")
    assert m["counts"]["rows"] == len(texts)
    assert m["resources"]["phases"]["download_and_shard"]["tasks"] == 5

    # a bad record in the third unit
    bad = pa.array([b"fine", b"bad \xff bytes"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ["b0", "b1"], "text": bad}), src / "part-2.parquet")
    cp = run(tmp_path / "bad", 2, check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert "part-2.parquet:1" in cp.stderr and "invalid UTF-8" in cp.stderr
    assert not (tmp_path / "bad").exists()
    run(tmp_path / "skip", 2, "--on-bad-record", "skip")
    m = read_manifest(tmp_path / "skip" / "manifest.json")
    assert m["counts"]["skipped"] == {"invalid UTF-8": 1}
    assert [(Path(r["file"]).name, r["where"]) for r in m["bad_records"]] == [("part-2.parquet", "row 1")]
    assert "fine" in _raw_texts(tmp_path / "skip")


def test_repeated_ids_are_counted_and_named(tmp_path):
    """Ids are every later stage's key (pack splits val by id): ids that repeat, across
    files too, are counted in the manifest and named in a warning; unique ids say nothing."""
    (tmp_path / "src").mkdir()
    a, b = tmp_path / "src" / "a.parquet", tmp_path / "src" / "b.parquet"
    pq.write_table(pa.table({"id": ["x", "y", "x", "z"], "text": ["one", "two", "three", "four"]}), a)
    pq.write_table(pa.table({"id": ["x", "w"], "text": ["five", "six"]}), b)
    cp = run_script("download_data.py", "--input", tmp_path / "src", "--output",
                    tmp_path / "raw", "--workers", "2", "--shard-bytes", "16")
    assert read_manifest(tmp_path / "raw" / "manifest.json")["counts"]["repeated_ids"] == 3
    assert ("WARNING: 3 documents share their id with another (the id 'x' 3 times)"
            in cp.stderr)
    cp = run_script("download_data.py", "--input", SAMPLE, "--output", tmp_path / "sample")
    assert "repeated_ids" not in read_manifest(tmp_path / "sample" / "manifest.json")["counts"]
    assert "share their id" not in cp.stderr


def test_json_python_cannot_load_and_bad_ids_are_bad_records(tmp_path):
    """Lines that are JSON but not loadable text (a lone surrogate escape, an integer of
    5,000 digits, arrays nested 100,000 deep, a record that is not an object) and parquet
    rows whose id or metadata is not UTF-8 are bad records like any other: counted and
    skipped, or one line naming file and place. A null or empty id gets the file#row (or
    file#line) id a record without one gets."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text(
        '{"text": "kept one"}\n'
        '{"text": "a\\ud800b"}\n'                                      # line 2
        '{"text": "x", "id": "\\udfff"}\n'                             # line 3
        '{"text": "x", "n": ' + "9" * 5000 + '}\n'                     # line 4
        + "[" * 100000 + "]" * 100000 + "\n"                          # line 5
        '["text", "a list"]\n'                                        # line 6
        '{"text": "x", "id": true}\n'                                  # line 7
        '{"text": "x", "id": ["a"]}\n'                                 # line 8
        '{"text": "kept \\u00e9 two", "id": 7}\n'
        '{"text": "kept three", "id": ""}\n', encoding="utf-8")            # line 10
    bad = pa.array([b"ok", b"a\xff", b"ok2"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ["p0", None, "p2", ""], "text": ["t0", "t1", "t2", "t3"],
                             "meta": ["m0", "m1", "m2", "m3"]}), d / "b.parquet")
    pq.write_table(pa.table({"id": bad, "text": ["u0", "u1", "u2"]}), d / "c.parquet")
    pq.write_table(pa.table({"id": ["v0", "v1", "v2"], "text": ["v0", "v1", "v2"],
                             "meta": bad}), d / "e.parquet")
    cp = run_script("download_data.py", "--input", d / "a.jsonl", "--output", tmp_path / "o",
                    check=False)
    assert cp.returncode == 2 and "a.jsonl:2" in cp.stderr and "surrogate" in cp.stderr
    assert "Traceback" not in cp.stderr and not (tmp_path / "o").exists()
    for name, where in (("c.parquet", "c.parquet:1"), ("e.parquet", "e.parquet:1")):
        cp = run_script("download_data.py", "--input", d / name, "--output", tmp_path / "o",
                        check=False)
        assert cp.returncode == 2 and where in cp.stderr and "invalid UTF-8 in column" in cp.stderr
    out = tmp_path / "raw"
    run_script("download_data.py", "--input", d / "a.jsonl", "--output", out,
               "--on-bad-record", "skip")
    m = read_manifest(out / "manifest.json")
    got = [(r["where"], r["reason"].split(" (")[0]) for r in m["bad_records"]]
    assert got == [("line 2", "a lone surrogate escape"), ("line 3", "a lone surrogate escape"),
                   ("line 4", "JSON that cannot be loaded"), ("line 5", "JSON that cannot be loaded"),
                   ("line 6", "not a JSON object"), ("line 7", "an id that is a bool"),
                   ("line 8", "an id that is a list")]
    t = pa.concat_tables([pq.read_table(s) for s in list_shards(out)])
    assert t.column("text").to_pylist() == ["kept one", "kept \u00e9 two", "kept three"]
    assert t.column("id").to_pylist() == ["a.jsonl#1", "7", "a.jsonl#10"]   # "" is no id
    out = tmp_path / "raw_b"
    run_script("download_data.py", "--input", d / "b.parquet", "--output", out)
    t = pq.read_table(list_shards(out)[0])
    assert t.column("id").to_pylist() == ["p0", "b.parquet#1", "p2", "b.parquet#3"]
    assert t.column("meta").to_pylist() == ["m0", "m1", "m2", "m3"]
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])],
                                        names=["text", "text"]), d / "two.parquet")
    cp = run_script("download_data.py", "--input", d / "two.parquet", "--output",
                    tmp_path / "o", check=False)
    assert cp.returncode == 2 and "the column name 'text' is used twice" in cp.stderr
    assert "Traceback" not in cp.stderr
    pq.write_table(pa.table({"id": [["a"], ["b"]], "text": ["x", "y"]}), d / "listid.parquet")
    cp = run_script("download_data.py", "--input", d / "listid.parquet", "--output",
                    tmp_path / "o_ids", check=False)
    assert cp.returncode == 2 and "column 'id' has type list<" in cp.stderr
    assert "ids must be strings or integers" in cp.stderr and "Traceback" not in cp.stderr
    # checked before any task: no staging folder, no "work done so far is kept"
    assert "kept in" not in cp.stderr and not (tmp_path / ".o_ids.partial").exists()
    (d / "t.txt").write_text("one\n\ntwo")
    cp = run_script("download_data.py", "--input", d / "t.txt", "--output", tmp_path / "o",
                    "--txt-delimiter", "", check=False)
    assert cp.returncode == 2 and "--txt-delimiter '': an empty delimiter" in cp.stderr


def test_a_byte_order_mark_is_not_text(tmp_path):
    """A file saved with a UTF-8 byte-order mark (Windows editors write one, Chinese text
    often has it): the mark is not part of the first document, in a .txt (where it would
    defeat the strip and make a copy look new to exact dedup) or a .jsonl (where the
    first line was a bad record)."""
    d = tmp_path / "in"
    d.mkdir()
    text = "显示 改变 当前目录的内容。" * 20
    (d / "a_bom.txt").write_text(text, encoding="utf-8-sig")
    (d / "b_plain.txt").write_text(text, encoding="utf-8")
    (d / "c_bom.jsonl").write_text(json.dumps({"id": "j1", "text": text}, ensure_ascii=False)
                                   + "\n", encoding="utf-8-sig")
    assert (d / "a_bom.txt").read_bytes()[:3] == b"\xef\xbb\xbf"
    out = tmp_path / "raw"
    run_script("download_data.py", "--input", f"{d}/*", "--output", out)
    t = pa.concat_tables([pq.read_table(s) for s in list_shards(out)])
    assert t.column("text").to_pylist() == [text] * 3   # (a bad record would stop the run)
