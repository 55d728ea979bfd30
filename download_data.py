"""Step 1 (tutorial section 1): get the corpus onto local disk as sharded parquet.

    python download_data.py --dataset sample              # the bundled sample, offline
    python download_data.py --dataset tinystories         # smoke test, 1.0 GB
    python download_data.py --dataset fineweb-edu-10bt    # the real thing, 28.5 GB
    python download_data.py --input 'my_corpus/*.jsonl.gz'

Whatever the source, the output is the same: data/raw/ holds many parquet shards of
bounded size (100k rows or 256 MB, whichever comes first) with the columns `id`, `text`,
`source` and, when every input is parquet, the other columns all of them share with one
type (from JSON lines, only `id` and `text` are read). Later stages parallelise by shard, so
one giant file would leave all but one core idle. The conversion itself runs on the
executor (--workers), one task per hub file or per group of local files of at least
1/16 of --shard-bytes on disk; the shards do not depend on --workers.

Hub datasets are fetched with huggingface_hub, file by file, straight from the published
parquet files (HF_ENDPOINT selects a mirror, as section 1.1 does). Every file comes from
one commit of the dataset, the one its branch points to when the run starts, recorded in
the manifest: a download that takes hours cannot mix two versions. Each downloaded file
is re-sharded and then deleted, so the disk never holds two copies of the corpus, and a
rerun after an interruption skips the files it already finished. Then, as section 1.3
asks, the stage prints what it got: rows, columns, bytes and three sample texts.

A rerun whose source is unchanged (the same hub commit, or local files of the same
names, sizes and modification times) and whose flags are the same, with the output in
place matching its manifest's digests, downloads and converts nothing (--force does).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from pipeline import layout
from pipeline.errors import StageError, run_stage
from pipeline.hub import HUB, fetch_hub_file, held_already, hub_endpoint, list_hub_files
from pipeline.manifest import read_manifest, write_json
from pipeline.shards import open_shard
from pipeline.sources import (BAD_RECORDS_IN_MANIFEST, Meter, Skips, common_metadata,
                              repeated_ids, save_id_hashes,
                              expand_inputs, read_sources, write_shards)
from pipeline.stage import Output, Run, Stage, check_not_nested
from pipeline.tables import human_bytes, size_arg, table


# A task converts a unit of local files holding at least 1/16 of --shard-bytes on disk
# (16 MB by default): a file of that size or more is a unit of its own, so a corpus of
# many files keeps every core busy, while many small files are cut into shards of tens
# of MB of text together (parquet and gzipped JSON lines hold text at 2 to 4 times their
# size). A hub dataset's unit is one file of it.
UNIT_PER_SHARD = 16


# --------------------------------------------------------------------------------------
# 1.1: fetch each file of the dataset (or take the local ones) and re-shard it.
# --------------------------------------------------------------------------------------

def group_files(files: list[Path], unit_bytes: int) -> list[list[Path]]:
    """Consecutive local files in units of at least `unit_bytes` on disk (the last may
    hold less): one task each. A unit's shards are cut from its files as one stream, so
    many small files still make full shards; the grouping follows the files' sizes
    only, so the output does not depend on --workers."""
    units, cur, size = [], [], 0
    for f in files:
        cur.append(f)
        size += f.stat().st_size
        if size >= unit_bytes:
            units.append(cur)
            cur, size = [], 0
    if cur:
        units.append(cur)
    return units


def convert_task(rank: int, world_size: int, units: list, staging: str, opts: dict) -> None:
    """Task `rank`: convert unit `rank` (local files, or a hub file fetched here) into
    shards part-RANK-*.parquet, recorded with its skip counts and bad records in
    `_done/unit-RANK.json`; a unit already recorded is skipped (a rerun after an
    interruption resumes)."""
    name, files = units[rank]
    marker = Path(staging) / "_done" / f"unit-{rank:05d}.json"
    ids = Path(staging) / "_done" / f"ids-{rank:05d}.npy"
    if marker.exists():
        if not ids.exists():   # recorded by a run that kept no id hashes
            save_id_hashes([Path(staging) / r["name"]
                            for r in json.loads(marker.read_text())["files"]], ids)
        return
    if files is None:
        local = [fetch_hub_file(HUB[opts["dataset"]], opts["commit"], name,
                                Path(opts["download_dir"]))]
    else:
        local = [Path(f) for f in files]
    # one task in the driver's process: the byte-level progress bar of the old serial loop
    meter = Meter(sum(f.stat().st_size for f in local) or None) if world_size == 1 else None
    skips = Skips(opts["on_bad_record"])
    try:
        recs = write_shards(read_sources(local, skips, opts["txt_delimiter"],
                                         Path(opts["root"]) if opts["root"] else None, meter,
                                         keep=opts["keep"]),
                            Path(staging), f"part-{rank:05d}", opts["shard_rows"],
                            opts["shard_bytes"])
    finally:
        if meter:
            meter.close()
    save_id_hashes([Path(staging) / r["name"] for r in recs], ids)
    write_json(marker, {"unit": name, "files": recs, "skipped": skips.counts,
                        "bad_records": skips.bad_records})
    if files is None and not opts["keep_downloads"]:
        for f in local:
            f.unlink(missing_ok=True)


def convert_units(run: Run, units: list[tuple[str, list[Path] | None]], skips: Skips) -> list[dict]:
    """Convert every unit into shards, one task per unit on the executor; the shards and
    skip counts of all units, in unit order."""
    args, src = run.args, run.source
    done_dir = run.staging / "_done"
    done_dir.mkdir(exist_ok=True)
    opts = {"dataset": src["dataset"], "commit": src["commit"],
            "download_dir": str(Path(args.download_dir) / (src["dataset"] or "local")),
            "root": str(src["root"]) if src["root"] else None, "keep": src.get("keep"),
            "on_bad_record": args.on_bad_record, "txt_delimiter": args.txt_delimiter,
            "shard_rows": args.shard_rows, "shard_bytes": args.shard_bytes,
            "keep_downloads": args.keep_downloads}
    plain = [(name, [str(f) for f in files] if files is not None else None)
             for name, files in units]
    run.parallel("download_and_shard", convert_task, tasks=len(units), sized=False,
                 units=plain, staging=str(run.staging), opts=opts)
    records: list[dict] = []
    for i in range(len(units)):
        done = json.loads((done_dir / f"unit-{i:05d}.json").read_text())
        records += done["files"]
        skips.merge(done)
    return records


def run(run: Run) -> Output:
    args, src = run.args, run.source
    skips = Skips(args.on_bad_record)
    records = convert_units(run, src["units"], skips)
    rows = sum(r["rows"] for r in records)
    desc = src["config"]["source"]
    if rows == 0:
        shutil.rmtree(run.staging, ignore_errors=True)
        raise StageError(f"no documents in {desc.get('local') or desc.get('hub')}"
                         + (f" (skipped: {skips.counts})" if skips.counts else ""))
    counts = {"rows": rows, "text_bytes": sum(r["text_bytes"] for r in records),
              "shards": len(records), "skipped": skips.counts,
              "bad_records": len(skips.bad_records)}
    # ids are every later stage's key (pack splits val by id): say so when they repeat
    repeated, example, times = repeated_ids(
        [run.staging / "_done" / f"ids-{i:05d}.npy" for i in range(len(src["units"]))],
        [run.staging / r["name"] for r in records])
    if repeated:
        counts["repeated_ids"] = repeated
    if skips.bad_records:
        write_bad_records(run.staging / "report", skips)
    extra = {"bad_records": skips.bad_records[:BAD_RECORDS_IN_MANIFEST]}
    if src["dataset"] in HUB:
        extra["endpoint"] = hub_endpoint() or "https://huggingface.co"
    out = run.output
    rows_t = [["documents written", rows], ["text bytes", counts["text_bytes"]],
              ["shards", len(records)]]
    rows_t += [[f"skipped: {k}", v] for k, v in sorted(skips.counts.items())]
    summary = [lambda: describe(out), "=" * 60, table(["download_data", "count"], rows_t)]
    summary += [f"skipped bad record: {r['file']} {r['where']}: {r['reason']}"
                for r in skips.bad_records[:5]]
    if skips.bad_records:
        summary.append(f"all {len(skips.bad_records):,} bad records: {out}/report/bad_records.jsonl")
    if repeated:
        summary.append(f"WARNING: {repeated:,} documents share their id with another (the id "
                       f"{example!r} {times:,} times): pack_parallel.py splits val by id and "
                       "stops if a repeated one is chosen; give the documents unique ids")
    summary.append(f"wrote {out}/ ({len(records)} shards) and {out}/manifest.json")
    return Output(records, counts, extra=extra, summary=summary)


def write_bad_records(folder: Path, skips: Skips) -> None:
    """report/bad_records.jsonl: every record --on-bad-record skip left out, by place."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "bad_records.jsonl", "w", encoding="utf-8") as f:
        for r in skips.bad_records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------------------
# Section 1.3: look at what you downloaded.
# --------------------------------------------------------------------------------------

def describe(raw_dir: Path, n_samples: int = 3, chars: int = 500) -> str:
    """Rows, columns, bytes, the text field and a few sample texts."""
    m = read_manifest(raw_dir / "manifest.json")
    files = m["files"]
    first = open_shard(raw_dir / files[0]["name"])
    schema = first.schema_arrow
    rows = sum(f["rows"] for f in files)
    lines = [
        f"rows      {rows:,} in {len(files)} shards",
        "columns   " + ", ".join(f"{f.name}: {f.type}" for f in schema),
        f"bytes     {human_bytes(sum(f['text_bytes'] for f in files))} of text, "
        f"{human_bytes(sum(f['size'] for f in files))} on disk",
        "text field: 'text'",
    ]
    batch = next(first.iter_batches(batch_size=n_samples, columns=["id", "text"]))
    for rid, text in zip(batch.column("id").to_pylist(), batch.column("text").to_pylist()):
        lines.append("=" * 60)
        lines.append(f"[{rid}] {len(text):,} characters")
        lines.append(text[:chars])
    return "\n".join(lines)


# --------------------------------------------------------------------------------------

def flags(p, argv) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", choices=[*HUB, "sample"], default=None,
                     help="a known dataset (default: sample)")
    src.add_argument("--input", default=None,
                     help="local files: a path, directory or glob of .parquet, .jsonl(.gz), .txt")
    p.add_argument("--shard-rows", type=int, default=None,
                   help="rows per output shard (default 100000; 400 for the sample)")
    p.add_argument("--shard-bytes", type=size_arg, default=256 * 1000 * 1000,
                   help="text bytes per output shard (default 256 MB)")
    p.add_argument("--txt-delimiter", default=None,
                   help="split .txt files into documents on this string (default: one per file)")
    p.add_argument("--download-dir", default=str(layout.DATA / "download"),
                   help="where hub files wait to be re-sharded (each is deleted once done)")
    p.add_argument("--keep-downloads", action="store_true", help="keep the fetched hub files")
    p.add_argument("--on-bad-record", choices=["error", "skip"], default="error",
                   help="a line that is not UTF-8 or not JSON, or a text that is not a string: "
                        "stop with one line naming it (error, the default), or count, name and "
                        "skip it (skip; listed in report/bad_records.jsonl)")


def check(args) -> None:
    if args.input is not None and not args.input.strip():
        raise StageError(f"--input {args.input!r}: an empty path (leave --input out for the "
                         "bundled sample)")
    args.dataset = args.dataset or (None if args.input else "sample")
    if args.input:
        # the file or folder read (for a glob, the folder its pattern starts in): an
        # output in it would be read by the next run, and an input in the output deleted
        wild = re.search(r"[*?[]", args.input)
        if wild is None:
            base = Path(args.input)
        else:   # 'dir/*.jsonl' -> dir; 'dir/part*.jsonl' -> dir; '*.jsonl' -> .
            head = args.input[:wild.start()]
            base = Path(head) if head.endswith(("/", os.sep)) else Path(head or ".").parent
        check_not_nested(base, Path(args.output), files_into=False,
                         why_inside="the next run would read this run's output as input")
    if args.shard_rows is None:
        args.shard_rows = 400 if args.dataset == "sample" else 100_000
    for flag, v in (("--shard-rows", args.shard_rows), ("--shard-bytes", args.shard_bytes)):
        if v <= 0:
            raise StageError(f"{flag} {v}: must be positive")
    if args.txt_delimiter == "":   # it would be ignored: each .txt file one document
        raise StageError("--txt-delimiter '': an empty delimiter splits nothing; leave the "
                         "flag out to keep each .txt file as one document")


def config(run: Run) -> dict:
    """The source, named exactly (a hub commit; local files by size and mtime), and the
    flags: when the output in place was made from them, there is nothing to do."""
    args = run.args
    dataset, out, root = args.dataset, Path(args.output), None
    commit, keep = None, None
    if dataset in HUB:
        ds = HUB[dataset]
        try:
            commit, names = list_hub_files(ds)
        except StageError as e:
            raise StageError(f"{e}{held_already(out, ds)}") from None
        units = [(n, None) for n in names]
        # the data is named by repo and commit; where it is fetched from (the hub or a
        # mirror, HF_ENDPOINT) is not part of it: switching to a mirror halfway resumes
        source_desc = {"hub": ds.repo, "pattern": ds.pattern, "revision": ds.revision,
                       "commit": commit, "files": names}
    else:
        spec = str(layout.SAMPLE) if dataset == "sample" else args.input
        if dataset == "sample" and not layout.SAMPLE.exists():
            raise StageError(f"{layout.SAMPLE} not found: run from the repository root")
        files = expand_inputs(spec)
        root = Path(os.path.commonpath([f.parent for f in files]))
        units = [(spec, g) for g in group_files(files, args.shard_bytes // UNIT_PER_SHARD)]
        keep = common_metadata(files)
        source_desc = {"local": spec, "files": [
            {"path": str(f.relative_to(root)), "size": f.stat().st_size,
             "mtime_ns": f.stat().st_mtime_ns} for f in files]}
    cfg = {"dataset": dataset, "source": source_desc, "shard_rows": args.shard_rows,
           "shard_bytes": args.shard_bytes, "txt_delimiter": args.txt_delimiter,
           "on_bad_record": args.on_bad_record}
    run.source = {"dataset": dataset, "commit": commit, "units": units, "root": root,
                  "config": cfg, "keep": keep}
    return cfg


def space(run: Run) -> int | None:
    """The local files' size: the shards are zstd parquet as most sources are, so about
    the same (a hub dataset's size is not known before it is listed file by file)."""
    files = [f for _, fs in run.source["units"] for f in (fs or [])]
    return sum(f.stat().st_size for f in files) or None


def several_tasks(args) -> bool:
    """Whether local files make several units, from their sizes alone (no thread is
    started before the pool is forked); the hub's files are listed later, over the
    network, and their pool is started then."""
    if args.dataset in HUB or args.workers < 2:
        return False
    try:
        files = expand_inputs(str(layout.SAMPLE) if args.dataset == "sample" else args.input)
        return len(group_files(files, args.shard_bytes // UNIT_PER_SHARD)) > 1
    except (OSError, StageError):
        return False    # config() names the problem


STAGE = Stage("download_data", __doc__, run, flags=flags, check=check, config=config,
              space=space, reuse_current=True, plans_units=False, several_tasks=several_tasks,
              current_note=lambda run: describe(run.output))


def main(argv: list[str] | None = None) -> int:
    return STAGE.main(argv)


if __name__ == "__main__":
    run_stage(main)
