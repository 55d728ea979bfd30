"""The tutorial's data layout, and which stage writes each part of it."""

from __future__ import annotations

import os
from pathlib import Path

DATA = Path("data")
SAMPLE = DATA / "sample" / "sample.parquet"
RAW = DATA / "raw"
CLEANED = DATA / "cleaned"
DEDUP_EXACT = DATA / "dedup_exact"
DEDUP = DATA / "dedup"
TOKENIZER_DIR = DATA / "tokenizer"
TOKENIZER = TOKENIZER_DIR / "tokenizer.json"
TRAIN_BIN = DATA / "train.bin"
VAL_BIN = DATA / "val.bin"
PACK_MANIFEST = "pack_manifest.json"   # pack writes files into the data folder: its own name

# stage name -> (script, default output). Used to tell the user which stage to rerun.
STAGES = {
    "download_data": ("download_data.py", RAW),
    "clean": ("clean.py", CLEANED),
    "dedup_exact": ("dedup_exact.py", DEDUP_EXACT),
    "dedup_minhash": ("dedup_minhash.py", DEDUP),
    "train_tokenizer": ("train_tokenizer.py", TOKENIZER_DIR),
    "pack_parallel": ("pack_parallel.py", DATA),
}


def script_for_manifest(path: str | os.PathLike) -> str:
    """The script that writes the manifest at `path`: pack's by its name (in any data
    folder), a stage folder's by the folder (script_for_dir)."""
    p = Path(path)
    if p.name == PACK_MANIFEST:
        return STAGES["pack_parallel"][0]
    return script_for_dir(p.parent)


def script_for_dir(path: str | os.PathLike) -> str:
    """The script that writes `path` in the default layout (a guess for custom paths)."""
    p = Path(path)
    for script, out in STAGES.values():
        if p.name == out.name:
            return script
    return "the stage that writes it"


def writer_of(folder: str | os.PathLike) -> str:
    """The script that wrote `folder`: its manifest says, else the default layout's guess."""
    import json

    try:
        script = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))["script"]
        if isinstance(script, str) and script:
            return script
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return script_for_dir(folder)


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


RUN_KEY = "_run.json"   # in a staging folder: the key of the run it was made for


def staging_path(output: Path, stage: str, files_into: bool) -> Path:
    """Where a run of `stage` stages its output: `data/.cleaned.partial` beside a folder,
    `data/.pack_parallel.partial` for files written into a folder."""
    output = Path(output)
    if files_into:
        return output / f".{stage}.partial"
    return output.parent / f".{output.name}.partial"
