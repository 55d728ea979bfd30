"""Per-document measurements kept beside a stage's output, so that a rerun is cheap.

A stage that measures something expensive per document (clean.py's signals and language
ID, dedup_minhash.py's signatures) keeps it in a store: a folder with one file per work
unit and an index, `index.json`:

    {"depends_on": {...everything the measurements depend on...},
     "files": [{"name": ..., "shard": "part-00000-00000.parquet", "row_start": 0,
                "rows": 8123, "size": ..., "xxh3_128": ...}, ...]}

Files are keyed by the input shard and rows they describe, not by task number, so a
rerun with another --task-mb still finds its rows. A store is used only when its
`depends_on` equals the rerun's exactly (input fingerprint, model hash, settings), and
a file only when its bytes match the digest in the index: a truncated, partial or
foreign file is recomputed, never read.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import xxhash

from .manifest import MANIFEST, display_path, write_json
from .shards import file_record

INDEX = "index.json"
ENTRY_KEYS = ("name", "shard", "row_start", "rows", "size", "xxh3_128")  # the rest: counts


def _extra(e: dict) -> dict:
    """What an index entry keeps beside the file's place and digest (e.g. its counts)."""
    return {k: v for k, v in e.items() if k not in ENTRY_KEYS}


def index_path(folder: str | os.PathLike) -> Path:
    return Path(folder) / INDEX


def _index_shape_error(idx) -> str | None:
    """What is wrong with a parsed index.json's shape, or None."""
    if not isinstance(idx, dict):
        return "not a JSON object"
    if not isinstance(idx.get("depends_on", {}), dict):
        return "'depends_on' is not an object"
    files = idx.get("files", [])
    if not isinstance(files, list):
        return "'files' is not a list"
    for i, e in enumerate(files):
        if not isinstance(e, dict):
            return f"file entry {i} is not an object"
        missing = [k for k in ENTRY_KEYS if k not in e]
        if missing:
            return f"file entry {i} has no {', '.join(missing)}"
        if not all(isinstance(e[k], str) for k in ("name", "shard", "xxh3_128")) or not all(
                isinstance(e[k], int) and not isinstance(e[k], bool) and e[k] >= 0
                for k in ("row_start", "rows", "size")):
            return f"file entry {i} has a value of the wrong type"
    return None


def recorded_index_digest(output: str | os.PathLike, *keys: str) -> str | None:
    """A kept store's index.json digest as the run that wrote `output` recorded it in its
    manifest, under `keys` (("signals",) for clean's, ("kept", "bands") for one of
    dedup_minhash's); None when there is none to read. The rows and counts an index lists
    are covered by no file's digest: an index edited since is not used (KeptStore.open)."""
    try:
        node = json.loads((Path(output) / MANIFEST).read_text(encoding="utf-8"))
        for k in keys:
            node = node.get(k)
        digest = node.get("index_xxh3_128")
    except (OSError, ValueError, AttributeError):
        return None
    return digest if isinstance(digest, str) else None


class KeptStore:
    """A store whose index matched the current `depends_on` (see module docstring)."""

    def __init__(self, folder: Path, entries: list[dict]):
        self.folder = folder
        self.by_shard: dict[str, list[dict]] = {}
        for e in entries:
            self.by_shard.setdefault(e["shard"], []).append(e)
        for v in self.by_shard.values():
            v.sort(key=lambda e: e["row_start"])

    @staticmethod
    def open(folder: str | os.PathLike, depends_on: dict,
             index_digest: str | None = None) -> tuple["KeptStore | None", str]:
        """(store, "") when `folder` holds a store made for `depends_on`; else (None, why).
        index_digest: the index's digest as the run that wrote it recorded it (its
        manifest), when known: the counts an index keeps beside its files are covered by
        no file's digest, so an index edited since is not used."""
        folder = Path(folder)
        try:
            raw = index_path(folder).read_bytes()
            idx = json.loads(raw.decode("utf-8"))
        except FileNotFoundError:
            return None, "none kept"
        except (OSError, ValueError) as e:
            return None, f"unreadable index ({e})"
        wrong = _index_shape_error(idx)
        if wrong:
            return None, f"unreadable index ({wrong})"
        if idx.get("depends_on") != depends_on:   # said first: it tells why
            changed = sorted(k for k in set(depends_on) | set(idx.get("depends_on") or {})
                             if (idx.get("depends_on") or {}).get(k) != depends_on.get(k))
            return None, f"made for another {', '.join(changed)}"
        if index_digest and xxhash.xxh3_128_hexdigest(raw) != index_digest:
            return None, (f"{INDEX} is not the one the run that wrote it recorded in its "
                          "manifest (edited since?)")
        return KeptStore(folder, idx.get("files", [])), ""

    def pieces(self, shard: str, row_start: int, rows: int) -> list[dict] | None:
        """Slices of kept files that cover rows [row_start, row_start+rows) of `shard` in
        order: [{"path", "xxh3_128", "size", "offset", "rows"}]; None if any row is missing."""
        out, at, stop = [], row_start, row_start + rows
        for e in self.by_shard.get(Path(shard).name, []):
            lo, hi = e["row_start"], e["row_start"] + e["rows"]
            if hi <= at or lo >= stop:
                continue
            if lo > at:
                return None  # a gap
            take = min(hi, stop) - at
            out.append({"path": str(self.folder / e["name"]), "xxh3_128": e["xxh3_128"],
                        "size": e["size"], "offset": at - lo, "rows": take,
                        "whole": lo == at and take == e["rows"],
                        "extra": _extra(e)})
            at += take
            if at >= stop:
                break
        return out if at >= stop or rows == 0 else None


def cover_units(folder: str | os.PathLike, depends_on: dict, units: list, label: str,
                whole_only: bool = False, index_digest: str | None = None
                ) -> tuple[list[list[dict] | None], str | None]:
    """For each unit (with .shard, .row_start, .rows), the pieces of the store at `folder`
    that cover its rows, or None where the store does not cover them (with whole_only,
    also where a piece is only part of a kept file); and one line saying whether the store
    is used and how much it covers (None when nothing was kept there)."""
    store, why = KeptStore.open(folder, depends_on, index_digest)
    if store is None:
        line = None if why == "none kept" else f"{label} in {display_path(folder)} not used: {why}"
        return [None] * len(units), line
    cover = []
    for u in units:
        pieces = store.pieces(u.shard, u.row_start, u.rows)
        if pieces is not None and whole_only and not all(p["whole"] for p in pieces):
            pieces = None
        cover.append(pieces)
    n = sum(p is not None for p in cover)
    return cover, f"{label} in {display_path(folder)}: cover {n} of {len(units)} tasks"


def side_store(output: str | os.PathLike, kind: str) -> Path:
    """What a sweep measured when no run had kept it: beside the output, hidden, with the
    same folders as the output's kept stores (`data/.cleaned.signals/signals/`,
    `data/.dedup.signatures/signatures/`, ...)."""
    output = Path(output)
    return output.parent / f".{output.name}.{kind}"


def nothing_kept(output: str | os.PathLike, kind: str, names: tuple[str, ...]) -> bool:
    """Whether neither the output nor its side store `kind` holds any of the stores
    `names`: then a run measures everything (a hint taken before the run plans its
    units; the run itself decides from the indexes, under its locks)."""
    return not any(index_path(where / name).exists()
                   for where in (Path(output), side_store(output, kind)) for name in names)


def sources(output: str | os.PathLike, kind: str, stores: dict[str, tuple[dict, bool]],
            units: list, labels: dict[str, str] | None = None,
            index_digests: dict[str, str] | None = None
            ) -> tuple[dict[str, list[list[list[dict]]]], list[str]]:
    """Where each unit's kept measurements are: for every store name (a folder in the
    output, and the same folder in the side store `kind`), the pieces that cover each
    unit, the output's first. stores: name -> (what it depends on, whole files only).
    index_digests: name -> the digest of the output's index as its manifest records it.
    Returns ({name: [per unit: [pieces of each store that covers it]]}, one line per store
    on whether it is used)."""
    out: dict[str, list[list[list[dict]]]] = {name: [[] for _ in units] for name in stores}
    notes = []
    for where in (Path(output), side_store(output, kind)):
        for name, (deps, whole_only) in stores.items():
            label = (labels or {}).get(name, name)
            own = where == Path(output)
            cover, line = cover_units(where / name, deps, units,
                                      f"kept {label}" if own
                                      else f"{label} measured by a sweep", whole_only,
                                      (index_digests or {}).get(name) if own else None)
            if line:
                notes.append(line)
            for per_unit, pieces in zip(out[name], cover):
                if pieces is not None:
                    per_unit.append(pieces)
    return out, notes


def verified_parts(pieces: list[dict], notes: list[str]) -> list[tuple[dict, bytes]] | None:
    """(piece, bytes) for every piece when all pass their digest check; otherwise None,
    with a note naming the first file that failed."""
    out = []
    for piece in pieces:
        data = read_verified(piece)
        if data is None:
            notes.append(f"{Path(piece['path']).name}: digest mismatch, recomputed")
            return None
        out.append((piece, data))
    return out


def load_array(sources: list[list[dict]], rows: int, axis: int = 0
               ) -> tuple[np.ndarray | None, list[dict], list[str]]:
    """A unit's kept .npy rows (along `axis`) from the first source whose files all pass
    their digest check: (array, the pieces used, notes); (None, [], notes) if none does."""
    notes = []
    for pieces in sources:
        got = verified_parts(pieces, notes)
        if not got:   # a file failed its check, or nothing kept
            continue
        parts = []
        for piece, data in got:
            a = np.load(io.BytesIO(data))
            sl = [slice(None)] * a.ndim
            sl[axis] = slice(piece["offset"], piece["offset"] + piece["rows"])
            parts.append(a[tuple(sl)])
        arr = np.concatenate(parts, axis=axis)
        if arr.shape[axis] == rows:
            return arr, pieces, notes
        notes.append(f"kept rows {arr.shape[axis]} != {rows}: recomputed")
    return None, [], notes


def read_verified(piece: dict) -> bytes | None:
    """A kept file's bytes, or None when it is missing or not the file the index names."""
    try:
        data = Path(piece["path"]).read_bytes()
    except OSError:
        return None
    if len(data) != piece["size"] or xxhash.xxh3_128_hexdigest(data) != piece["xxh3_128"]:
        return None
    return data


def checks_out(piece: dict, chunk: int = 1 << 24) -> bool:
    """read_verified for a file too big to hold: its size and digest, read in chunks."""
    h, n = xxhash.xxh3_128(), 0
    try:
        with open(piece["path"], "rb") as f:
            while block := f.read(chunk):
                h.update(block)
                n += len(block)
    except OSError:
        return False
    return n == piece["size"] and h.hexdigest() == piece["xxh3_128"]


def entry(path: str | os.PathLike, shard: str, row_start: int, rows: int,
          record: dict | None = None, **extra) -> dict:
    """The index record of a kept file just written (extra: counts kept with it).
    record: the file's size and digest when already known (a kept file whose digest was
    just checked, linked unchanged), instead of reading the file again."""
    rec = record or file_record(path)
    return {"name": Path(path).name, "shard": Path(shard).name, "row_start": int(row_start),
            "rows": int(rows), "size": rec["size"], "xxh3_128": rec["xxh3_128"], **extra}


def write_index(folder: str | os.PathLike, depends_on: dict, entries: list[dict]) -> dict:
    """Write index.json (last, so a store without one is never used); return a summary
    for the manifest: what it depends on, its files, its size on disk."""
    write_json(index_path(folder), {"depends_on": depends_on, "files": entries})
    size = sum(e["size"] for e in entries) + index_path(folder).stat().st_size
    return {"depends_on": depends_on, "files": len(entries), "bytes": size,
            "index_xxh3_128": file_record(index_path(folder))["xxh3_128"]}


def keep_whole(folder: str | os.PathLike, depends_on: dict, name: str, **extra) -> dict:
    """Index a store of one file describing the whole input (not one per unit), e.g.
    dedup_minhash's candidate pairs; `extra`: counts kept with it."""
    e = entry(Path(folder) / name, "", 0, 0, **extra)
    return write_index(folder, depends_on, [e])


def whole_piece(folder: str | os.PathLike, depends_on: dict, index_digest: str | None = None
                ) -> tuple[dict | None, dict, str]:
    """Where the file of a keep_whole store made for `depends_on` is, unread: (piece for
    read_verified, its extra counts, ""); else (None, {}, why)."""
    store, why = KeptStore.open(folder, depends_on, index_digest)
    if store is None:
        return None, {}, why
    if len(store.by_shard.get("", [])) != 1:
        return None, {}, "not a one-file store"
    e = store.by_shard[""][0]
    return ({"path": str(Path(folder) / e["name"]), "size": e["size"], "xxh3_128": e["xxh3_128"]},
            _extra(e), "")


def load_whole(folder: str | os.PathLike, depends_on: dict, index_digest: str | None = None
               ) -> tuple[bytes | None, dict, str]:
    """The file of a keep_whole store made for `depends_on`, when its digest checks out:
    (bytes, its extra counts, ""); else (None, {}, why)."""
    piece, extra, why = whole_piece(folder, depends_on, index_digest)
    if piece is None:
        return None, {}, why
    data = read_verified(piece)
    if data is None:
        return None, {}, f"{Path(piece['path']).name}: digest mismatch"
    return data, extra, ""


def replace_dir(src: Path, dst: Path) -> None:
    """Put folder src at dst, dropping what dst held (used for stores outside an output)."""
    old = dst.with_name(dst.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dst.exists():
        os.replace(dst, old)
    os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)
