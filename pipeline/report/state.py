"""What ran, and whether it is fresh: the steps of the pipeline and the command that runs
each, every stage's manifest and its check (ok, stale, missing, unreadable), the tools'
reports, and the small files the page is drawn from (each read once, listed on the page).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import layout
from pipeline.errors import StageError
from pipeline.manifest import check_input, display_path, read_manifest


# The steps, where each leaves its mark, and the command that runs it.
@dataclass(frozen=True)
class Step:
    key: str        # the manifest's "stage" (or the tool's name)
    label: str      # what the page calls it
    script: str
    path: str       # the manifest (or report) that shows it ran, under the data folder
    args: str       # the command's flags; {d} is the data folder

    def command(self, data: Path) -> str:
        d = display_path(data)
        return " ".join(["python", self.script] +
                        [shlex.quote(a.format(d=d)) for a in self.args.split()])


STAGES = [
    Step("download_data", "download", "download_data.py", "raw/manifest.json",
         "--output {d}/raw"),
    Step("clean", "clean", "clean.py", "cleaned/manifest.json",
         "--input {d}/raw --output {d}/cleaned"),
    Step("dedup_exact", "dedup_exact", "dedup_exact.py", "dedup_exact/manifest.json",
         "--input {d}/cleaned --output {d}/dedup_exact"),
    Step("dedup_minhash", "dedup_minhash", "dedup_minhash.py", "dedup/manifest.json",
         "--input {d}/dedup_exact --output {d}/dedup"),
    Step("train_tokenizer", "tokenizer", "train_tokenizer.py", "tokenizer/manifest.json",
         "--input {d}/dedup --output {d}/tokenizer"),
    Step("pack_parallel", "pack", "pack_parallel.py", layout.PACK_MANIFEST,
         "--input {d}/dedup --tokenizer {d}/tokenizer/tokenizer.json --output {d}"),
]
TOOLS = [
    Step("compare_tokenizers", "compare_tokenizers", "compare_tokenizers.py",
         "tokenizer/report/compression.json", "--tokenizer {d}/tokenizer"),
    Step("verify", "verify", "verify.py", "verify_report.json", "--data-dir {d}"),
]
FUNNEL = ["download_data", "clean", "dedup_exact", "dedup_minhash", "pack_parallel"]

# report files, relative to the data folder
CLEAN_STATS = "cleaned/report/clean_stats.json"
CLEAN_SWEEP = "cleaned/report/sweep.json"
CLEAN_DECONT = "cleaned/report/decontamination.json"
EXACT_STATS = "dedup_exact/report/dedup_exact_stats.json"
MINHASH_STATS = "dedup/report/dedup_minhash_stats.json"
MINHASH_SWEEP = "dedup/report/sweep.json"
TOKENIZER_MANIFEST = "tokenizer/manifest.json"
PACK_STATS = "pack_report/pack_stats.json"


@dataclass
class State:
    step: Step
    state: str                       # ok | stale | missing | unreadable
    message: str = ""
    data: dict | None = None         # the manifest (or the tool's report), also when stale
    mtime: float | None = None

    @property
    def ran(self) -> bool:
        return self.data is not None


def stage_state(data: Path, step: Step) -> State:
    """A stage's manifest and its check: missing, stale (with the check's message) or ok."""
    path = data / step.path
    if not path.exists():
        return State(step, "missing", f"not run yet: run {step.command(data)}")
    try:
        m = read_manifest(path)
    except StageError as e:
        return State(step, "unreadable", str(e))
    if not isinstance(m, dict):
        return State(step, "unreadable", f"{display_path(path)} is not a manifest; "
                                         f"rerun {step.script}")
    st = State(step, "ok", data=m, mtime=path.stat().st_mtime)
    try:
        check_input(path)   # stats the files it lists, reads the manifests above it
    except StageError as e:
        st.state, st.message = "stale", str(e)
    except (KeyError, TypeError, ValueError, OSError) as e:   # a manifest in another shape
        st.state = "unreadable"
        st.message = f"{display_path(path)}: cannot check ({e!r}); rerun {step.script}"
    return st


def unfinished_run(data: Path, step: Step) -> Path | None:
    """The staging folder a run of this stage left, stopped or still running: the same
    command resumes from it, another one replaces it."""
    if step not in STAGES:
        return None
    out = (data / step.path).parent
    p = layout.staging_path(out, step.key, files_into=step.path == layout.PACK_MANIFEST)
    return p if p.is_dir() else None


def tool_state(data: Path, step: Step, upstream: list[State]) -> State:
    """A report-only tool (no manifest): stale when a stage it reads was rewritten after it."""
    path = data / step.path
    if not path.exists():
        return State(step, "missing", f"not run yet: run {step.command(data)}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return State(step, "unreadable", f"{display_path(path)}: unreadable ({e}); "
                                         f"rerun {step.script}")
    if not isinstance(d, dict):
        return State(step, "unreadable", f"{display_path(path)}: not a report; "
                                         f"rerun {step.script}")
    st = State(step, "ok", data=d, mtime=path.stat().st_mtime)
    behind = next((u for u in upstream if u.state in ("stale", "unreadable")), None)
    if behind is not None:   # it read outputs that no longer follow from their inputs
        st.state = "stale"
        st.message = (f"{step.path} was made from {behind.step.path}, which is "
                      f"{behind.state}; rerun {behind.step.script}, the steps below it "
                      f"and {step.script}")
        return st
    seen = tool_fingerprints(d)
    if seen is not None:   # the report names the outputs it read: compare fingerprints
        now = {str(Path(u.step.path)): (u.data or {}).get("output_fingerprint") for u in upstream}
        changed = [p for p, fp in seen.items() if p in now and now[p] != fp]
        if changed:
            st.state = "stale"
            what = "is gone" if now[changed[0]] is None else f"was rewritten after {step.path} was made"
            st.message = f"{changed[0]} {what}; rerun {step.script}"
        return st
    newer = [u for u in upstream if u.mtime and u.mtime > st.mtime]
    if newer:
        more = f" (and {len(newer) - 1} more)" if len(newer) > 1 else ""
        st.state = "stale"
        st.message = (f"{step.path} was written before {newer[0].step.path}{more} was "
                      f"rewritten; rerun {step.script}")
    return st


def tool_fingerprints(d: dict) -> dict[str, str] | None:
    """The stage outputs a tool's report says it read ({manifest path: fingerprint}), or
    None for a report from before tools recorded them (then file times decide)."""
    if isinstance(d.get("manifests"), dict):              # verify_report.json
        return d["manifests"]
    if d.get("tokenizer_fingerprint"):                    # compression.json
        return {"tokenizer/manifest.json": d["tokenizer_fingerprint"]}
    return None


def packed_tokenizer(data: Path, pack: dict | None) -> tuple[Path | None, dict]:
    """The manifest of the tokenizer pack read (data/tokenizer/'s, or one from elsewhere
    with --tokenizer), resolved from the path pack's manifest records, and that record."""
    rec = ((pack or {}).get("extra_inputs") or {}).get("tokenizer") or {}
    rel = rec.get("manifest")
    return ((data / rel).resolve() if isinstance(rel, str) else None), rec


def run_states(data: Path) -> dict[str, State]:
    states = {s.key: stage_state(data, s) for s in STAGES}
    pack, tok = states["pack_parallel"], states["train_tokenizer"]
    used, rec = packed_tokenizer(data, pack.data)
    if pack.state == "ok" and used is not None:   # check_input follows the main input only
        here = used == (data / TOKENIZER_MANIFEST).resolve()
        try:
            now = tok.data if here else read_manifest(used)
        except StageError:
            now = None
        # data/tokenizer/ deleted is shown by next_step as a folder gone (pack's output
        # stays usable); one from elsewhere that is gone or rewritten makes pack stale
        if here and tok.state == "unreadable":   # there, but nothing to check pack against
            pack.state = "stale"
            pack.message = (f"{display_path(data)}/train.bin cannot be checked: the manifest "
                            f"of the tokenizer it was packed with ({display_path(used)}) is "
                            "unreadable; rerun train_tokenizer.py, then pack_parallel.py")
        elif (now or {}).get("output_fingerprint") != rec.get("fingerprint") and (now or not here):
            pack.state = "stale"
            pack.message = (f"{display_path(data)}/train.bin is stale: the tokenizer it was "
                            f"packed with ({display_path(used.parent)}) was "
                            f"{'rewritten' if now else 'removed'} after pack_parallel.py read "
                            f"it; rerun pack_parallel.py")
    states["compare_tokenizers"] = tool_state(data, TOOLS[0], [tok])
    states["verify"] = tool_state(data, TOOLS[1], [states[s.key] for s in STAGES])
    return states


class Inputs:
    """The small files the page is drawn from, each read once; the page lists them."""

    def __init__(self, data: Path):
        self.data = data
        self.read: dict[str, int] = {}
        self.problems: list[str] = []

    def note_read(self, rel: str) -> None:
        p = self.data / rel
        if p.exists():
            self.read[rel] = p.stat().st_size

    def json(self, rel: str) -> dict | None:
        p = self.data / rel
        if not p.exists():
            return None
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            self.problems.append(f"{rel}: unreadable ({e})")
            return None
        self.read[rel] = p.stat().st_size
        return d if isinstance(d, dict) else None

    def jsonl(self, rel: str, n: int) -> list[dict]:
        """The first n well-formed records of a .jsonl file (the rest is never read)."""
        p = self.data / rel
        out: list[dict] = []
        if not p.exists():
            return out
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(rec, dict):
                        out.append(rec)
                    if len(out) >= n:
                        break
        except OSError as e:   # a folder where the file goes, no permission
            self.problems.append(f"{rel}: unreadable ({e})")
            return []
        self.read[rel] = p.stat().st_size
        return out


@dataclass
class Run:
    data: Path
    states: dict[str, State]
    files: Inputs
    figures: int = 0
    errors: list[str] = field(default_factory=list)

    def m(self, key: str) -> dict | None:
        return self.states[key].data

    def counts(self, key: str) -> dict:
        return (self.m(key) or {}).get("counts") or {}


def read_run(data: Path) -> Run:
    """The run's state: every step's manifest (or report) and its check, and the files the
    page reads, starting with those."""
    states = run_states(data)
    run = Run(data, states, Inputs(data))
    for s in STAGES:
        run.files.note_read(s.path)
    for s in TOOLS:
        if states[s.key].ran:
            run.files.note_read(s.path)
    return run


def holds_stage_output(data: Path) -> bool:
    """Whether any stage has written into the data folder `data`: its output with its
    manifest, or an unfinished run's staging folder (the page names it)."""
    return any((data / s.path).is_file() or unfinished_run(data, s) for s in STAGES)
