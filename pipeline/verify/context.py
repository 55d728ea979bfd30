"""What verify.py's ten checks share: an item's result, and the context they read.

An Item is one line of the checklist: PASS or FAIL, its figures, and for a FAIL the
likely cause and the stage to rerun. The Context reads each input once, when a check
first asks for it (the pack manifest, the tokenizer, the chain of manifests back to the
raw download, the val ids, the scan of the packed input): a missing one is a FAIL of
the checks that need it (Missing, naming the stage to run), never of the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from algorithms.loader import read_val_ids
from algorithms.tokenizer_file import load_tokenizer, ordinary_tokenizer
from pipeline import layout
from pipeline.errors import StageError
from pipeline.manifest import MANIFEST, read_manifest, upstream_path

PACK_MANIFEST = layout.PACK_MANIFEST


@dataclass
class Item:
    num: int
    title: str
    ok: bool = True
    figures: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)   # printed and reported, not judged
    cause: str | None = None
    data: dict = field(default_factory=dict)           # the same, structured, for report.py

    def fail(self, what: str, cause: str) -> None:
        self.ok = False
        self.figures.append(f"FAIL: {what}")
        if self.cause is None:
            self.cause = cause
        elif cause not in self.cause:
            self.cause += "; " + cause


class Missing(Exception):
    """A prerequisite output is not there: the message names the stage to run."""


class Context:
    """What the checks share: paths, the pack manifest, the tokenizer, the corpus scan."""

    def __init__(self, args, phases: dict | None = None):
        self.args = args
        self.data = Path(args.data_dir)
        self._cache: dict = {}
        # the parallel scan's resources, for the report (the run's, pipeline.stage.ReportRun)
        self.phases: dict = {} if phases is None else phases

    def memo(self, key, fn):
        if key not in self._cache:
            try:
                self._cache[key] = (True, fn())
            except (Missing, StageError, ValueError) as e:   # (a refusal: run_check)
                self._cache[key] = (False, e)
        ok, v = self._cache[key]
        if not ok:
            raise v
        return v

    # -- the packed output and its manifest ---------------------------------------------
    @property
    def pack(self) -> dict:
        def load():
            p = self.data / PACK_MANIFEST
            if not p.exists():
                raise Missing(f"{p} not found: run pack_parallel.py")
            return read_manifest(p)
        return self.memo("pack", load)

    @property
    def pack_counts(self) -> dict:
        return self.pack["counts"]

    @property
    def eos(self) -> int:
        return int(self.pack_counts["eos_id"])

    # -- the tokenizer --------------------------------------------------------------------
    @property
    def tokenizer_path(self) -> Path:
        if self.args.tokenizer:
            return Path(self.args.tokenizer)
        try:  # recorded relative to the data folder by pack_parallel.py
            return self.data / self.pack_counts["tokenizer"]["path"]
        except (Missing, KeyError, StageError):
            return self.data / layout.TOKENIZER.relative_to(layout.DATA)

    @property
    def tok(self):
        def load():
            p = self.tokenizer_path
            if not p.exists():
                raise Missing(f"{p} not found: run train_tokenizer.py")
            return load_tokenizer(p)
        return self.memo("tok", load)

    @property
    def doc_tok(self):
        """The tokenizer as pack encodes documents: special tokens are plain text."""
        return self.memo("doc_tok", lambda: ordinary_tokenizer(self.tok))

    # -- the manifest chain ---------------------------------------------------------------
    @property
    def chain(self) -> list[tuple[Path, dict]]:
        """(manifest path, manifest) from the packed output back to the raw download."""
        def walk():
            p = self.data / PACK_MANIFEST
            out = []
            while p is not None:
                if not p.exists():
                    raise Missing(f"{p} not found: the chain breaks here; rerun "
                                  f"{layout.script_for_dir(p.parent)}")
                m = read_manifest(p)
                out.append((p, m))
                p = upstream_path(m, p)
                if len(out) > 20:
                    break
            return out
        return self.memo("chain", walk)

    def stage_manifest(self, stage: str) -> tuple[Path, dict]:
        """A stage's manifest: from the chain when pack has run, else its default folder."""
        try:
            for p, m in self.chain:
                if m.get("stage") == stage:
                    return p, m
        except (Missing, StageError):
            pass
        script, out = layout.STAGES[stage]
        p = self.data / out.relative_to(layout.DATA) / MANIFEST
        if not p.exists():
            raise Missing(f"{p} not found: run {script}")
        return p, read_manifest(p)

    @property
    def input_dir(self) -> Path:
        """The folder pack_parallel.py read."""
        up = upstream_path(self.pack, self.data / PACK_MANIFEST)
        if up is None or not up.exists():
            raise Missing(f"the input of {self.data / PACK_MANIFEST} is gone: rerun the stage "
                          "that wrote it, then pack_parallel.py")
        return up.parent

    @property
    def val_ids(self) -> set[str]:
        def load():
            p = self.data / "pack_report" / "val_ids.txt"
            if not p.exists():
                raise Missing(f"{p} not found: rerun pack_parallel.py")
            return read_val_ids(p)
        return self.memo("val_ids", load)

    @property
    def corpus(self) -> dict:
        from pipeline.verify.scan import scan_corpus   # it reads this context
        return self.memo("corpus", lambda: scan_corpus(self))

