"""Stage manifests: what a stage read, how it was configured, what it wrote.

Every stage writes `manifest.json` beside its output. It records the config, the input's
fingerprint (the upstream manifest's output fingerprint), row and byte counts, the
output files with their sizes and xxh3-128 digests, and timings. A stage checks its
input's manifest, and the manifests above it, before doing any work: an input whose
upstream was rerun since it was written is stale, and the stage refuses it, naming the
stage to rerun.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import xxhash

from .errors import StageError
from .layout import script_for_manifest

MANIFEST = "manifest.json"
VERSION = 1


def fingerprint(files: list[dict], stage: str) -> str:
    """A digest of a stage's output: its files' names, sizes and content digests."""
    h = xxhash.xxh3_128()
    h.update(stage.encode())
    for f in sorted(files, key=lambda f: f["name"]):
        h.update(f"{f['name']}\0{f['size']}\0{f['xxh3_128']}\n".encode())
    return h.hexdigest()


# the type of each field every manifest has (a manifest edited by hand may differ)
FIELD_TYPES = {"stage": str, "script": str, "config": dict, "input": (dict, type(None)),
               "extra_inputs": dict, "counts": dict, "files": list, "timings": dict,
               "resources": dict, "output_fingerprint": str}
# what a later stage reads of every manifest: its output's files and their fingerprint
REQUIRED = ("stage", "files", "output_fingerprint")


def shape_error(m: dict) -> str | None:
    """What is wrong with the shape of manifest `m` (a field of another type, a file
    record that is not an object), or None: readers then take its fields as they are."""
    for key in REQUIRED:
        if key not in m:
            return f'no "{key}"'
    for key, kind in FIELD_TYPES.items():
        if key in m and not isinstance(m[key], kind):
            return f'"{key}" is {type(m[key]).__name__}, not {getattr(kind, "__name__", "object")}'
    for f in m.get("files", []):
        if not isinstance(f, dict):
            return '"files" holds a record that is not an object'
        if not isinstance(f.get("name"), str) or not isinstance(f.get("size"), int):
            return '"files" holds a record without a "name" and a whole "size"'
    return None


def source_name(config: dict) -> str | None:
    """What download_data read, from its manifest's config: the dataset's name (sample,
    a hub dataset), or "local files SPEC" for an --input run."""
    src = config.get("source") if isinstance(config.get("source"), dict) else {}
    if config.get("dataset"):
        return str(config["dataset"])
    return f"local files {src['local']}" if src.get("local") else None


def read_manifest(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
        wrong = shape_error(m) if isinstance(m, dict) else "not a JSON object"
        if wrong:
            raise StageError(f"{path}: unreadable manifest ({wrong}); rerun "
                             f"{script_for_manifest(path)}")
        return m
    except FileNotFoundError:
        raise StageError(f"{path} is missing: its stage did not finish or the folder was not "
                         f"written by this suite; rerun {script_for_manifest(path)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError, PermissionError,
            RecursionError) as e:
        raise StageError(f"{path}: unreadable manifest ({e}); rerun {script_for_manifest(path)}") from None


def write_json(path: str | os.PathLike, obj: dict, indent: int | None = 2) -> None:
    """Write obj as JSON via a temporary name. indent=None: one line, through json's C
    encoder (an indented dump runs the pure-Python one, ~10x slower), for files that
    only this suite reads."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=indent, ensure_ascii=False))
        f.write("\n")
    os.replace(tmp, path)


def upstream_path(manifest: dict, manifest_file: Path) -> Path | None:
    """Resolve the manifest's recorded input path (stored relative to the manifest's folder)."""
    inp = manifest.get("input") or {}
    rel = inp.get("manifest")
    if not rel:
        return None
    return (manifest_file.parent / rel).resolve()


def check_input(input_manifest: str | os.PathLike, _depth: int = 0) -> dict:
    """Load and validate an input's manifest and the chain above it.

    Refuses (StageError) when the manifest is missing, when a file it lists is missing
    or changed size, or when any upstream output changed after this one was written.
    The error names the earliest stage to rerun.
    """
    mpath = Path(input_manifest)
    m = read_manifest(mpath)
    script = m.get("script") or script_for_manifest(mpath)
    base = mpath.parent
    for f in m.get("files", []):
        p = base / f["name"]
        if not p.exists():
            raise StageError(f"{p} listed in {mpath} is missing; rerun {script}")
        if p.stat().st_size != f["size"]:
            raise StageError(f"{p} changed size since {script} wrote it; rerun {script}")
    up = upstream_path(m, mpath)
    if up is not None and up.exists() and _depth < 20:
        upm = check_input(up, _depth + 1)  # an earlier stale stage is reported first
        want = (m.get("input") or {}).get("fingerprint")
        if upm.get("output_fingerprint") != want:
            raise StageError(f"{display_path(base)} is stale: {display_path(up.parent)} was "
                             f"rewritten after {script} read it; rerun {script}")
    return m


def display_path(p: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    rel = os.path.relpath(Path(p).resolve())
    return str(p) if rel.startswith("..") else rel


def relative_manifest(input_manifest: Path, output_manifest: Path) -> str:
    return os.path.relpath(Path(input_manifest).resolve(), Path(output_manifest).resolve().parent)
