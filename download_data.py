"""Step 1 (tutorial section 1): get the corpus onto local disk as sharded parquet.

    python download_data.py --dataset sample              # the bundled sample, offline
    python download_data.py --dataset tinystories         # smoke test, 1.0 GB
    python download_data.py --dataset fineweb-edu-10bt    # the real thing, 28.5 GB
    python download_data.py --input 'my_corpus/*.jsonl.gz'

Whatever the source, the output is the same: data/raw/ holds many parquet shards of
bounded size (100k rows or 256 MB, whichever comes first) with the columns `id`, `text`,
`source` and any metadata columns the source has. Later stages parallelise by shard, so
one giant file would leave all but one core idle.

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

import argparse
import fnmatch
import glob
import gzip
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from pipeline import layout
from pipeline.arrays import from_numpy, strings, to_numpy
from pipeline.errors import StageError, run_stage
from pipeline.executors import add_executor_args
from pipeline.manifest import read_manifest, write_json
from pipeline.tables import human_bytes, table
from pipeline.shards import ShardWriter, open_shard, text_bytes
from pipeline.staging import StageRun, add_force_arg


@dataclass(frozen=True)
class HubDataset:
    repo: str
    pattern: str          # which files of the repo to fetch (fnmatch)
    revision: str = "main"


HUB = {
    "tinystories": HubDataset("roneneldan/TinyStories", "data/train-*.parquet"),
    "fineweb-edu-10bt": HubDataset("HuggingFaceFW/fineweb-edu", "sample/10BT/*.parquet"),
}
LOCAL_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".json.gz", ".txt")
BATCH_ROWS = 4096


# --------------------------------------------------------------------------------------
# Reading sources: every reader yields pyarrow tables with at least `id` and `text`.
# Null or non-string texts are counted and skipped, never passed on silently.
# --------------------------------------------------------------------------------------

BAD_RECORDS_IN_MANIFEST = 100   # the manifest names this many; report/bad_records.jsonl all


class Skips:
    """Records a reader skipped: counts by reason, and every bad record by file and place.

    A null or empty text is a missing document: counted and skipped. A bad record -- a
    line that is not valid UTF-8 or not JSON, an object without a text field, a text that
    is not a string -- stops the run with one line naming it (--on-bad-record error, the
    default), or is counted, named and skipped (--on-bad-record skip): one bad line need
    not stop a 30 GB run, and none is dropped without a trace.
    """

    def __init__(self, on_bad: str = "error"):
        self.on_bad = on_bad
        self.counts: dict[str, int] = {}
        self.bad_records: list[dict] = []

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts[reason] = self.counts.get(reason, 0) + n

    def bad(self, path: Path | str, where: str, reason: str) -> None:
        """A bad record at `where` ("line 12", "row 3", "byte 40") of file `path`."""
        if self.on_bad != "skip":
            raise StageError(f"{path}:{where.split()[-1]}: {reason} ({where}); "
                             "--on-bad-record skip counts and skips such records")
        self.add(reason.split(" (")[0])
        self.bad_records.append({"file": str(path), "where": where, "reason": reason})

    def merge(self, other: dict) -> None:
        for k, v in other.get("skipped", {}).items():
            self.add(k, v)
        self.bad_records += other.get("bad_records", [])


class Meter:
    """Progress of a download: input bytes read (of the known total, for the rate and the
    ETA), documents and text MB written. A bar only when a person is watching."""

    def __init__(self, total_bytes: int | None, enabled: bool | None = None):
        from tqdm import tqdm

        from pipeline.progress import show_progress

        self.docs = self.text_bytes = self.base = 0
        self.bar = tqdm(total=total_bytes, desc="download", unit="B", unit_scale=True,
                        unit_divisor=1000, leave=False,
                        disable=not (show_progress() if enabled is None else enabled))

    def at(self, pos_in_file: int) -> None:
        """The reader has read pos_in_file bytes of the current input file."""
        self.bar.update(max(0, self.base + pos_in_file - self.bar.n))

    def file_done(self, size: int) -> None:
        self.base += size
        self.at(0)

    def wrote(self, docs: int, nbytes: int) -> None:
        self.docs += docs
        self.text_bytes += nbytes
        self.bar.set_postfix_str(f"{self.docs:,} docs, {self.text_bytes / 1e6:,.1f} MB text",
                                 refresh=False)

    def close(self) -> None:
        self.bar.close()


def expand_inputs(spec: str) -> list[Path]:
    """Files named by a path, a directory or a glob, in sorted order."""
    p = Path(spec)
    if p.is_dir():
        files = [f for f in p.rglob("*") if f.is_file() and f.name.endswith(LOCAL_SUFFIXES)]
    elif p.is_file():
        files = [p]
    else:
        files = [Path(f) for f in glob.glob(spec, recursive=True) if Path(f).is_file()]
    if not files:
        raise StageError(f"--input {spec}: no such file, directory or matching files")
    bad = [f for f in files if not f.name.endswith(LOCAL_SUFFIXES)]
    if bad:
        raise StageError(f"{bad[0]}: unsupported file type (use {', '.join(LOCAL_SUFFIXES)})")
    return sorted(files)


def read_parquet(path: Path, source: str, skips: Skips, keep: list[str],
                 meter: Meter | None = None) -> Iterator[pa.Table]:
    import pyarrow.compute as pc

    pf = open_shard(path, require=("text",), stream=True)
    has_id = "id" in pf.schema_arrow.names
    size, total_rows = path.stat().st_size, max(1, pf.metadata.num_rows)
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS):
            t = pa.Table.from_batches([batch])
            n = t.num_rows
            ids = (pc.cast(t.column("id"), pa.string()) if has_id
                   else strings([f"{source}#{i}" for i in range(row, row + n)]))
            out = pa.table({"id": ids, "text": t.column("text"),
                            "source": strings([source] * n),
                            **{k: t.column(k) for k in keep}})
            bad = invalid_utf8_rows(out.column("text"))
            for i in bad:
                skips.bad(path, f"row {row + i}", "invalid UTF-8")
            if len(bad):
                mask = np.ones(n, bool)
                mask[bad] = False
                out = out.filter(from_numpy(mask))
            nulls = out.column("text").null_count
            if nulls:
                skips.add("null text", nulls)
                out = out.filter(pc.is_valid(out.column("text")))
            row += n
            if meter:
                meter.at(size * row // total_rows)
            yield out
    except (pa.ArrowException, OSError) as e:
        raise StageError(f"{path}: corrupt parquet data ({str(e).splitlines()[0]})") from None


def invalid_utf8_rows(col: pa.ChunkedArray) -> list[int]:
    """Rows of a parquet string column that are not valid UTF-8 (Arrow does not check on
    read). The full check is one pass in C; rows are located only when it fails."""
    try:
        col.validate(full=True)
        return []
    except pa.ArrowInvalid:
        bad = []
        for i, v in enumerate(col.cast(pa.binary()).to_pylist()):
            if v is not None:
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    bad.append(i)
        return bad


def _open_text(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def read_jsonl(path: Path, source: str, skips: Skips, text_field: str = "text",
               meter: Meter | None = None) -> Iterator[pa.Table]:
    ids, texts = [], []
    try:
        with _open_text(path) as f:
            raw_file = getattr(f, "fileobj", f)  # gzip: the compressed file's position
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    skips.bad(path, f"line {lineno}", f"invalid UTF-8 (at byte {e.start})")
                    continue
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    skips.bad(path, f"line {lineno}", f"invalid JSON ({e.msg})")
                    continue
                if not isinstance(rec, dict) or text_field not in rec:
                    skips.bad(path, f"line {lineno}", f"no '{text_field}' field")
                    continue
                text = rec[text_field]
                if text is None:
                    skips.add("null text")
                    continue
                if not isinstance(text, str):
                    skips.bad(path, f"line {lineno}", f"non-string text ({type(text).__name__})")
                    continue
                rid = rec.get("id")
                ids.append(str(rid) if rid is not None else f"{source}#{lineno}")
                texts.append(text)
                if len(texts) >= BATCH_ROWS:
                    if meter:
                        meter.at(raw_file.tell())
                    yield _table(ids, texts, source)
                    ids, texts = [], []
    except (OSError, EOFError) as e:
        raise StageError(f"{path}: cannot read ({e})") from None
    if texts:
        yield _table(ids, texts, source)


def read_txt(path: Path, source: str, skips: Skips, delimiter: str | None) -> Iterator[pa.Table]:
    """A .txt file is one document, or several split on --txt-delimiter."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        skips.bad(path, f"byte {e.start}", "invalid UTF-8 (the whole file is skipped)")
        return
    docs = text.split(delimiter) if delimiter else [text]
    docs = [d.strip() for d in docs]
    empty = sum(1 for d in docs if not d)
    skips.add("empty text", empty)
    ids, texts = [], []
    for i, d in enumerate(docs):
        if d:
            ids.append(f"{source}#{i}")
            texts.append(d)
    if texts:
        yield _table(ids, texts, source)


def _table(ids: list[str], texts: list[str], source: str) -> pa.Table:
    return pa.table({"id": strings(ids), "text": strings(texts),
                     "source": strings([source] * len(ids))})


def common_metadata(paths: list[Path]) -> list[str]:
    """Metadata columns (beyond id/text) that every parquet input has with one type."""
    schemas = [open_shard(p, require=("text",)).schema_arrow for p in paths if p.suffix == ".parquet"]
    if not schemas or len(schemas) != len(paths):
        return []
    keep = []
    for f in schemas[0]:
        if f.name in ("id", "text", "source"):
            continue
        if all(f.name in s.names and s.field(f.name).type == f.type for s in schemas):
            keep.append(f.name)
    return keep


def read_sources(paths: list[Path], skips: Skips, txt_delimiter: str | None = None,
                 root: Path | None = None, meter: Meter | None = None) -> Iterator[pa.Table]:
    keep = common_metadata(paths)
    for p in paths:
        source = str(p.relative_to(root)) if root and p.is_relative_to(root) else p.name
        if p.suffix == ".parquet":
            tables = read_parquet(p, source, skips, keep, meter)
        elif p.name.endswith((".jsonl", ".jsonl.gz", ".json.gz")):
            tables = read_jsonl(p, source, skips, meter=meter)
        else:
            tables = read_txt(p, source, skips, txt_delimiter)
        for t in tables:
            if meter:
                meter.wrote(t.num_rows, text_bytes(t))
            yield t
        if meter:
            meter.file_done(p.stat().st_size)


# --------------------------------------------------------------------------------------
# Writing bounded shards.
# --------------------------------------------------------------------------------------

def write_shards(tables: Iterable[pa.Table], out_dir: Path, prefix: str,
                 max_rows: int, max_bytes: int) -> list[dict]:
    """Re-shard a stream of tables into files of at most max_rows rows and max_bytes of text
    (a single document larger than max_bytes gets a shard of its own)."""
    import numpy as np
    import pyarrow.compute as pc

    records: list[dict] = []
    writer = None
    for t in tables:
        start = 0
        sizes = np.cumsum(to_numpy(pc.binary_length(t.column("text")), null=0))
        while start < t.num_rows:
            if writer is None:
                writer = ShardWriter(out_dir / f"{prefix}-{len(records):05d}.parquet", t.schema)
            before = sizes[start - 1] if start else 0
            room_bytes = max_bytes - writer.text_bytes
            fit = int(np.searchsorted(sizes[start:] - before, room_bytes, side="right"))
            n = min(max_rows - writer.rows, fit, t.num_rows - start)
            if n == 0 and writer.rows == 0:
                n = 1  # one oversized document: it still gets written
            if n > 0:
                writer.write(t.slice(start, n))
                start += n
            if writer.rows >= max_rows or n == 0 or writer.text_bytes >= max_bytes:
                records.append(writer.close())
                writer = None
    if writer is not None:
        records.append(writer.close())
    return records


# --------------------------------------------------------------------------------------
# Hub datasets: one unit per published parquet file; finished units are skipped on rerun.
# --------------------------------------------------------------------------------------

def hub_endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def list_hub_files(ds: HubDataset) -> tuple[str, list[str]]:
    """The commit ds.revision points to now, and the files of that commit to fetch."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_endpoint())
    try:
        commit = api.dataset_info(ds.repo, revision=ds.revision).sha
        files = api.list_repo_files(ds.repo, repo_type="dataset", revision=commit)
    except Exception as e:  # network errors come in many types
        where = hub_endpoint() or "huggingface.co"
        raise StageError(f"cannot list {ds.repo} on {where}: {str(e).splitlines()[0]} "
                         "(set HF_ENDPOINT to use a mirror)") from None
    files = sorted(f for f in files if fnmatch.fnmatch(f, ds.pattern))
    if not files:
        raise StageError(f"{ds.repo}: no files match {ds.pattern}")
    return commit, files


def held_already(out: Path, ds: HubDataset) -> str:
    """When the hub cannot be reached: what the output in place already holds of `ds`,
    which the next stages can read as it is (they need no network)."""
    try:
        m = read_manifest(out / "manifest.json")
        src = m["config"]["source"]
        if m["stage"] != "download_data" or src.get("hub") != ds.repo:
            return ""
        what = f"commit {src['commit'][:12]}" if src.get("commit") else "a download"
        return (f"; {out} still holds {what} of it ({m['counts']['rows']:,} rows, "
                f"{m['finished_at']}), which the next stages can read as it is")
    except (StageError, OSError, ValueError, KeyError, TypeError):   # no usable manifest
        return ""


def fetch_hub_file(ds: HubDataset, commit: str, filename: str, into: Path) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(ds.repo, filename, repo_type="dataset", revision=commit,
                                    local_dir=into, endpoint=hub_endpoint()))
    except Exception as e:
        raise StageError(f"download of {ds.repo}/{filename} failed: {str(e).splitlines()[0]} "
                         "(rerun to resume)") from None


def convert_units(units: list[tuple[str, list[Path] | None]], run: StageRun, args,
                  skips: Skips, fetch=None, root: Path | None = None) -> list[dict]:
    """Convert each unit (a list of files, or a hub file name to fetch) into shards.

    A unit's shards, its skip counts and its bad records are recorded in `_done/` in the
    staging folder, so a rerun after an interruption skips finished units.
    """
    done_dir = run.staging / "_done"
    done_dir.mkdir(exist_ok=True)
    records: list[dict] = []
    known = [f for _, files in units for f in (files or [])]
    meter = Meter(sum(f.stat().st_size for f in known) if len(known) else None)
    try:
        for i, (name, files) in enumerate(units):
            marker = done_dir / f"unit-{i:05d}.json"
            if marker.exists():
                done = json.loads(marker.read_text())
                for f in files or []:
                    meter.file_done(f.stat().st_size)
            else:
                local = files if files is not None else [fetch(name)]
                unit_skips = Skips(args.on_bad_record)
                recs = write_shards(read_sources(local, unit_skips, args.txt_delimiter, root,
                                                 meter),
                                    run.staging, f"part-{i:05d}", args.shard_rows, args.shard_bytes)
                done = {"unit": name, "files": recs, "skipped": unit_skips.counts,
                        "bad_records": unit_skips.bad_records}
                write_json(marker, done)
                if files is None and not args.keep_downloads:
                    for f in local:
                        f.unlink(missing_ok=True)
            records += done["files"]
            skips.merge(done)
    finally:
        meter.close()
    return records


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", choices=[*HUB, "sample"], default=None,
                     help="a known dataset (default: sample)")
    src.add_argument("--input", default=None,
                     help="local files: a path, directory or glob of .parquet, .jsonl(.gz), .txt")
    p.add_argument("--output", default=str(layout.RAW), help="default: data/raw")
    p.add_argument("--shard-rows", type=int, default=None,
                   help="rows per output shard (default 100000; 400 for the sample)")
    p.add_argument("--shard-bytes", type=int, default=256 * 1000 * 1000,
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
    add_executor_args(p)
    add_force_arg(p)
    args = p.parse_args(argv)
    dataset = args.dataset or (None if args.input else "sample")
    if args.shard_rows is None:
        args.shard_rows = 400 if dataset == "sample" else 100_000
    if args.shard_rows <= 0 or args.shard_bytes <= 0:
        raise StageError("--shard-rows and --shard-bytes must be positive")

    out = Path(args.output)
    root = None
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
        units = [(spec, files)]
        source_desc = {"local": spec, "files": [
            {"path": str(f.relative_to(root)), "size": f.stat().st_size,
             "mtime_ns": f.stat().st_mtime_ns} for f in files]}
    config = {"dataset": dataset, "source": source_desc, "shard_rows": args.shard_rows,
              "shard_bytes": args.shard_bytes, "txt_delimiter": args.txt_delimiter,
              "on_bad_record": args.on_bad_record}
    # the config names the source exactly (a hub commit; local files by size and mtime):
    # when the output in place was made from it with these flags, there is nothing to do
    run = StageRun("download_data", out, config, reuse_current=not args.force)
    if run.current:
        print(run.current_line())
        print(describe(out))
        return 0
    if run.resumed:
        print(f"resuming in {run.staging}", file=sys.stderr)

    skips = Skips(args.on_bad_record)
    with run.phase("download_and_shard"):
        dl = Path(args.download_dir) / (dataset or "local")
        fetch = ((lambda name: fetch_hub_file(HUB[dataset], commit, name, dl))
                 if dataset in HUB else None)
        records = convert_units(units, run, args, skips, fetch=fetch, root=root)
    rows = sum(r["rows"] for r in records)
    if rows == 0:
        shutil.rmtree(run.staging, ignore_errors=True)
        raise StageError(f"no documents in {source_desc.get('local') or source_desc.get('hub')}"
                         + (f" (skipped: {skips.counts})" if skips.counts else ""))
    shutil.rmtree(run.staging / "_done", ignore_errors=True)
    counts = {"rows": rows, "text_bytes": sum(r["text_bytes"] for r in records),
              "shards": len(records), "skipped": skips.counts,
              "bad_records": len(skips.bad_records)}
    if skips.bad_records:
        write_bad_records(run.staging / "report", skips)
    extra = {"bad_records": skips.bad_records[:BAD_RECORDS_IN_MANIFEST]}
    if dataset in HUB:
        extra["endpoint"] = hub_endpoint() or "https://huggingface.co"
    run.commit(records, counts, extra=extra)

    print(describe(out))
    print("=" * 60)
    rows_t = [["documents written", rows], ["text bytes", counts["text_bytes"]],
              ["shards", len(records)]]
    rows_t += [[f"skipped: {k}", v] for k, v in sorted(skips.counts.items())]
    print(table(["download_data", "count"], rows_t))
    for r in skips.bad_records[:5]:
        print(f"skipped bad record: {r['file']} {r['where']}: {r['reason']}")
    if skips.bad_records:
        print(f"all {len(skips.bad_records):,} bad records: {out}/report/bad_records.jsonl")
    print(f"wrote {out}/ ({len(records)} shards) and {out}/manifest.json")
    return 0


if __name__ == "__main__":
    run_stage(main)
