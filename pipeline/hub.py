"""Datasets on the Hugging Face hub: which files, at which commit, fetched one by one
(HF_ENDPOINT selects a mirror, as tutorial section 1.1 does)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import StageError
from .manifest import read_manifest

@dataclass(frozen=True)
class HubDataset:
    repo: str
    pattern: str          # which files of the repo to fetch (fnmatch)
    revision: str = "main"


HUB = {
    "tinystories": HubDataset("roneneldan/TinyStories", "data/train-*.parquet"),
    "fineweb-edu-10bt": HubDataset("HuggingFaceFW/fineweb-edu", "sample/10BT/*.parquet"),
}


def hub_endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def list_hub_files(ds: HubDataset) -> tuple[str, list[str]]:
    """The commit ds.revision points to now, and the files of that commit to fetch."""
    try:
        from huggingface_hub import HfApi, constants   # reads HF_ENDPOINT on import

        api = HfApi(endpoint=hub_endpoint())
        # a timeout (the hub's own for metadata, HF_HUB_ETAG_TIMEOUT, 10 s): an endpoint
        # that takes the connection and never answers would otherwise hold the run
        # forever (the hub client waits without one)
        commit = api.dataset_info(ds.repo, revision=ds.revision,
                                  timeout=constants.HF_HUB_ETAG_TIMEOUT).sha
        files = api.list_repo_files(ds.repo, repo_type="dataset", revision=commit)
    except Exception as e:  # network errors come in many types
        where = hub_endpoint() or "huggingface.co"
        hint = ("is HF_ENDPOINT's mirror up?" if hub_endpoint()
                else "set HF_ENDPOINT to use a mirror")
        raise StageError(f"cannot list {ds.repo} on {where}: {str(e).splitlines()[0]} "
                         f"({hint})") from None
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
