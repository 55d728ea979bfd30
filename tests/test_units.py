"""Tasks fixed by the data: units of at most --task-mb MB, bounded row groups, progress
and resources recorded per phase."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE, run_script
from pipeline import progress
from pipeline.errors import StageError
from pipeline.shards import ROW_GROUP_BYTES, ShardWriter, file_digest, list_shards, writer_options
from pipeline.units import fetch_column, fetch_rows, plan_units, read_unit, split_row_groups, unit_offsets


def _texts(n: int, size: int) -> list[str]:
    return [f"document {i} " + "x" * size for i in range(n)]


def test_split_row_groups_balances_and_never_exceeds_by_much():
    mb = 1e6
    assert split_row_groups(np.full(50, mb), 32 * mb) == [(0, 25), (25, 50)]  # 2 x 25, not 32 + 18
    cuts = split_row_groups(np.full(1000, mb), 32 * mb)
    assert len(cuts) == 32 and cuts[0][0] == 0 and cuts[-1][1] == 1000
    assert all(a < b for a, b in cuts) and all(b == c for (_, b), (c, _) in zip(cuts, cuts[1:]))
    assert max(b - a for a, b in cuts) <= 32
    assert split_row_groups(np.array([100 * mb]), 32 * mb) == [(0, 1)]  # one big group alone
    assert split_row_groups(np.zeros(0), 32 * mb) == []


def test_row_groups_bounded_and_independent_of_batching(tmp_path):
    texts = _texts(3000, 900)
    table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
    files = []
    for name, batch in (("one", len(texts)), ("many", 37)):
        w = ShardWriter(tmp_path / f"{name}.parquet", table.schema)
        for s in range(0, len(texts), batch):
            w.write(table.slice(s, batch))
        rec = w.close()
        files.append(tmp_path / f"{name}.parquet")
        assert rec["rows"] == len(texts)
        # the digest hashed while writing is the one of the bytes on disk
        assert rec["xxh3_128"] == file_digest(files[-1]) and rec["size"] == files[-1].stat().st_size
    assert files[0].read_bytes() == files[1].read_bytes()
    md = pq.ParquetFile(files[0]).metadata
    # and they are the bytes Parquet's writer puts in a file it opens itself
    with pq.ParquetWriter(tmp_path / "plain.parquet", table.schema,
                          **writer_options(table.schema)) as w:
        start = 0
        for i in range(md.num_row_groups):
            n = md.row_group(i).num_rows
            w.write_table(table.slice(start, n).combine_chunks(), row_group_size=n)
            start += n
    assert (tmp_path / "plain.parquet").read_bytes() == files[0].read_bytes()
    sizes = [sum(len(t.encode()) for t in pq.ParquetFile(files[0]).read_row_group(i)
                 .column("text").to_pylist()) for i in range(md.num_row_groups)]
    assert md.num_row_groups >= 2 and max(sizes) <= ROW_GROUP_BYTES


def test_units_cover_every_row_once_in_corpus_order(tmp_path):
    w = ShardWriter(tmp_path / "a.parquet", pa.schema([("id", pa.string()), ("text", pa.string())]))
    texts = _texts(20_000, 400)
    w.write(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}))
    w.close()
    pq.write_table(pa.table({"id": ["b0", "b1"], "text": ["short", "texts"]}), tmp_path / "b.parquet")
    units = plan_units(list_shards(tmp_path), task_mb=2)
    assert len(units) >= 4 and units[-1].shard.endswith("b.parquet")
    assert max(u.text_bytes for u in units[:-1]) < 2.6e6
    ids = [i for u in units for b in read_unit(u, ["id"], batch_rows=333) for i in b.column(0).to_pylist()]
    assert ids == [str(i) for i in range(len(texts))] + ["b0", "b1"]
    off = unit_offsets(units)
    assert off[-1] == len(texts) + 2
    got = fetch_rows(units, off, [0, 12_345, len(texts) + 1], "id")
    assert got == ["0", "12345", "b1"]
    # any order, repeats, across shards and row groups; Arrow out, in the order asked
    all_ids = [str(i) for i in range(len(texts))] + ["b0", "b1"]
    ask = np.random.default_rng(3).integers(0, len(all_ids), 500)
    col = fetch_column(units, off, ask, "id")
    assert col.type == pa.string() and col.to_pylist() == [all_ids[i] for i in ask]
    assert fetch_column(units, off, [], "text").type == pa.string()
    assert len(fetch_column(units, off, np.array([], np.int64), "id")) == 0
    assert plan_units(list_shards(tmp_path), task_mb=2) == units  # fixed by the data


@pytest.fixture(scope="module")
def one_big_shard(tmp_path_factory) -> Path:
    """The sample as ONE raw shard: a single file must still give several tasks."""
    d = tmp_path_factory.mktemp("one") / "data"
    run_script("download_data.py", "--input", SAMPLE, "--output", d / "raw")
    assert len(list_shards(d / "raw")) == 1
    return d


def test_one_shard_is_cut_into_tasks_and_bytes_do_not_depend_on_workers(one_big_shard, tmp_path):
    outs = []
    for w in ("1", "2"):
        out = tmp_path / f"w{w}"
        cp = run_script("clean.py", "--input", one_big_shard / "raw", "--output", out / "cleaned",
                        "--task-mb", "1", "--workers", w)
        assert "resources:" in cp.stdout and "core use clean" in cp.stdout
        run_script("dedup_exact.py", "--input", out / "cleaned", "--output", out / "exact",
                   "--task-mb", "1", "--workers", w)
        outs.append(out)
    m = [json.loads((o / "cleaned" / "manifest.json").read_text()) for o in outs]
    assert len(m[0]["files"]) >= 4  # a 4 MB shard in tasks of at most 1 MB
    assert m[0]["files"] == m[1]["files"]
    e = [json.loads((o / "exact" / "manifest.json").read_text()) for o in outs]
    assert e[0]["files"] == e[1]["files"] and e[0]["counts"] == e[1]["counts"]
    # resources: every parallel phase records its tasks' CPU, core use and worker memory
    r = m[1]["resources"]
    ph = r["phases"]["clean"]
    assert ph["tasks"] == len(m[1]["files"]) and ph["workers"] == 2
    assert ph["task_cpu_s"] > 0 and 0 < ph["core_use"] <= 1.2
    assert ph["docs"] == m[1]["counts"]["docs_in"] and ph["bytes"] == m[1]["counts"]["bytes_in"]
    assert r["max_worker_rss_mb"] > 50 and r["driver_peak_rss_mb"] > 50
    assert r["driver_bytes_per_doc"] is not None
    for phase in ("hash", "filter"):
        assert e[1]["resources"]["phases"][phase]["docs"] == e[1]["counts"]["docs_in"]
    # and in the stage's report, for a person
    rep = json.loads((outs[1] / "cleaned" / "report" / "resources.json").read_text())
    assert rep["phases"]["clean"]["core_use"] == ph["core_use"]
    assert "largest worker" in (outs[1] / "cleaned" / "report" / "resources.md").read_text()


def test_progress_records_add_up_across_tasks(tmp_path):
    folder = tmp_path / "phase"
    for rank, (docs, nbytes) in enumerate([(10, 1000), (5, 700)]):
        progress.start_task(folder, rank)
        p = progress.task_progress()
        p.add(docs, nbytes)
        progress.end_task()
    recs = progress.read_records(folder)
    assert {r: (x["docs"], x["bytes"], x["done"]) for r, x in recs.items()} == {
        0: (10, 1000, True), 1: (5, 700, True)}
    bar = progress.ProgressBar(folder, "x", 1700, 15, enabled=False)
    assert bar.totals() == (15, 1700)
    res = progress.phase_resources(folder, tasks=2, workers=2, wall_s=1.0)
    assert res["docs"] == 15 and res["bytes"] == 1700 and res["max_worker_rss_mb"] > 0
    # a resume whose tasks all ran before the phase started now: their CPU counts, but
    # the core use is this run's, and there is none (it was CPU / a wall of ~0)
    import time as _t
    later = progress.phase_resources(folder, tasks=2, workers=2, wall_s=0.001,
                                     since=_t.time() + 1)
    assert later["core_use"] is None and later["task_cpu_s"] == res["task_cpu_s"]
    assert progress.phase_resources(folder, tasks=2, workers=2, wall_s=1.0,
                                    since=0)["core_use"] == res["core_use"]
    # outside a task, progress goes nowhere (and costs nothing)
    progress.task_progress().add(1, 1)
    assert progress.read_records(folder) == recs


def test_no_progress_bar_when_not_a_terminal(sample_layout, tmp_path):
    cp = run_script("dedup_exact.py", "--input", sample_layout / "raw", "--output", tmp_path / "x")
    assert "\r" not in cp.stderr and "docs/s" not in cp.stderr


def test_filter_shard_picks_rows_in_the_same_pass_and_pick_rows_agrees(tmp_path):
    """The values filter_shard picks while copying (kept rows or not, across batches and
    row groups) are those of the rows asked for, and pick_rows (a reused file's path)
    returns the same; the copy itself does not change."""
    from pipeline.shards import filter_shard
    from pipeline.units import pick_rows

    texts = _texts(5000, 700)
    ids = [f"d{i}" for i in range(len(texts))]
    w = ShardWriter(tmp_path / "a.parquet", pa.schema([("id", pa.string()), ("text", pa.string())]))
    w.write(pa.table({"id": ids, "text": texts}))
    w.close()
    unit = plan_units(list_shards(tmp_path), task_mb=64)[0]
    rng = np.random.default_rng(5)
    keep = rng.random(len(texts)) < 0.9
    want_ids = np.unique(rng.integers(0, len(texts), 300))
    want_text = np.array([0, 4095, 4096, 4999])          # batch edges: 4096 rows a batch
    plain = filter_shard(tmp_path / "a.parquet", tmp_path / "plain.parquet", keep)
    rec = filter_shard(tmp_path / "a.parquet", tmp_path / "picked.parquet", keep,
                       pick={"id": want_ids, "text": want_text})
    got = rec.pop("picked")
    assert got["id"].to_pylist() == [ids[i] for i in want_ids]
    assert got["text"].to_pylist() == [texts[i] for i in want_text]
    assert (tmp_path / "plain.parquet").read_bytes() == (tmp_path / "picked.parquet").read_bytes()
    assert {k: v for k, v in rec.items() if k != "name"} == \
        {k: v for k, v in plain.items() if k != "name"}
    again = pick_rows(unit, {"id": want_ids, "text": want_text})
    assert again["id"].equals(got["id"]) and again["text"].equals(got["text"])
    empty = pick_rows(unit, {"id": np.zeros(0, np.int64)})["id"]
    assert len(empty) == 0 and empty.type == pa.string()
    with pytest.raises(ValueError, match="past the end"):
        filter_shard(tmp_path / "a.parquet", tmp_path / "x.parquet", keep,
                     pick={"id": np.array([len(texts) + 3])})


def test_filter_shard_keeping_every_row_copies_the_shard(tmp_path):
    """Every row of a whole shard kept: the shard is copied byte for byte instead of being
    decoded and written again. The file, its record and the picked values are what
    writing the rows again gives; a part of the shard, or one row dropped, is written."""
    from pipeline.shards import filter_shard

    texts = _texts(5000, 700) + [None, ""]
    ids = [f"d{i}" for i in range(len(texts))]
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    w = ShardWriter(tmp_path / "a.parquet", schema)
    w.write(pa.table({"id": ids, "text": texts}, schema=schema))
    w.close()
    keep = np.ones(len(texts), bool)
    pick = {"id": np.array([0, 4096, len(texts) - 1]), "text": np.array([5, len(texts) - 2])}
    rec = filter_shard(tmp_path / "a.parquet", tmp_path / "copy.parquet", keep, pick=pick)
    # what the writer makes of the same rows, batch by batch (the path before the copy)
    w = ShardWriter(tmp_path / "written.parquet", schema)
    pf = pq.ParquetFile(tmp_path / "a.parquet")
    for b in pf.iter_batches(batch_size=4096):
        w.write(b)
    written = w.close()
    assert (tmp_path / "copy.parquet").read_bytes() == (tmp_path / "written.parquet").read_bytes() \
        == (tmp_path / "a.parquet").read_bytes()
    got = rec.pop("picked")
    assert {k: v for k, v in rec.items() if k != "name"} == \
        {k: v for k, v in written.items() if k != "name"}
    assert rec["rows"] == len(texts) and rec["text_bytes"] == sum(len(t or "") for t in texts)
    assert got["id"].to_pylist() == ["d0", "d4096", f"d{len(texts) - 1}"]
    assert got["text"].to_pylist() == [texts[5], None]
    assert not list(tmp_path.glob("*.tmp"))
    # a damaged shard is named, and nothing is copied
    raw = bytearray((tmp_path / "a.parquet").read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 4096] = bytes(4096)
    (tmp_path / "bad.parquet").write_bytes(bytes(raw))
    with pytest.raises(StageError, match="bad.parquet: corrupt parquet data"):
        filter_shard(tmp_path / "bad.parquet", tmp_path / "bad_copy.parquet", keep)
    assert not (tmp_path / "bad_copy.parquet").exists() and not list(tmp_path.glob("*.tmp"))
    # one row dropped, or the shard's first row group alone: written, not copied
    keep[3] = False
    part = filter_shard(tmp_path / "a.parquet", tmp_path / "part.parquet", keep)
    assert part["rows"] == len(texts) - 1
    n0 = pf.metadata.row_group(0).num_rows
    assert pf.metadata.num_row_groups > 1
    first = filter_shard(tmp_path / "a.parquet", tmp_path / "first.parquet", np.ones(n0, bool),
                         row_groups=range(0, 1))
    assert first["rows"] == n0 and pq.ParquetFile(tmp_path / "first.parquet").metadata.num_rows == n0
