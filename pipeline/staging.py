"""The stage contract: check the input, stage the output, commit it atomically.

    run = StageRun("clean", output="data/cleaned", config={...}, input_manifest=...)
    ... write files into run.staging ...
    run.commit(files=[...], counts={...})

Output goes to a hidden staging folder beside the final one (`.cleaned.partial`). A run
that dies leaves the previous output untouched; rerunning with the same input and config
resumes in the same staging folder (datatrove skips finished tasks); a different input
or config starts it afresh. `commit` writes the manifest, then swaps the staging folder
into place with renames, so the final name only ever holds a complete output: the swap,
and how the next run mends one a crash interrupted, are pipeline/commit.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import xxhash

from .commit import AtomicCommit
from .disk import expect, forget, remove_tree
from .errors import StageError
from .executors import run_tasks
from .progress import cpu_seconds, current_rss_mb, peak_rss_mb
from .layout import RUN_KEY, STAGES, staging_path
from .manifest import (MANIFEST, VERSION, check_input, display_path, fingerprint,
                       read_manifest, relative_manifest, upstream_path, write_json)
from .tables import human_bytes
from .shards import matches_record


def config_key(stage: str, config: dict, input_fingerprint: str | None,
               plan: list | None = None) -> str:
    """What a staging folder's finished tasks were made for: the stage, its config, its
    input, and (plan) how the input was cut into tasks: the same rank of another cut is
    another piece of the input, so a run with another --task-mb never resumes them."""
    blob = json.dumps({"stage": stage, "config": config, "input": input_fingerprint,
                       **({"plan": plan} if plan is not None else {})},
                      sort_keys=True, default=str)
    return xxhash.xxh3_128(blob.encode()).hexdigest()


def current_manifest(manifest_file: Path, stage: str, config: dict,
                     input_fingerprint: str | None, extra_fingerprints: dict,
                     digests: bool = True) -> dict | None:
    """The manifest of an output in place, if a run of `stage` with this config and these
    input fingerprints would write the same bytes; else None.

    Stages are deterministic, so an output is current when its manifest records this
    run's stage, manifest version, config and input fingerprints (the upstream chain
    is checked already), and every file it lists still has its recorded size and
    xxh3-128 digest. Anything else (no manifest, an unreadable one, a file changed,
    truncated or missing) means the stage runs. digests=False checks the files' sizes
    only: a cheap hint, for a caller that checks again with digests later."""
    output = Path(manifest_file).parent
    try:
        m = json.loads(Path(manifest_file).read_text(encoding="utf-8"))
        files = m["files"]
        if (m.get("version") != VERSION or m.get("stage") != stage
                or m.get("config") != json.loads(json.dumps(config))
                or (m.get("input") or {}).get("fingerprint") != input_fingerprint
                or {k: v.get("fingerprint") for k, v in (m.get("extra_inputs") or {}).items()}
                != extra_fingerprints
                or m.get("output_fingerprint") != fingerprint(files, stage)):
            return None
        if digests and not all(matches_record(output / f["name"], f) for f in files):
            return None
        if not digests and not all((output / f["name"]).is_file()
                                   and (output / f["name"]).stat().st_size == f["size"]
                                   for f in files):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return m


class StageRun(AtomicCommit):
    """One run of one stage, writing a directory (or, with `files_into`, files in a folder)."""

    def __init__(self, stage: str, output: str | os.PathLike, config: dict,
                 input_manifest: str | os.PathLike | None = None,
                 extra_inputs: dict[str, str | os.PathLike] | None = None,
                 manifest_name: str = MANIFEST, files_into: bool = False,
                 reuse_current: bool = False, space=None, plan: list | None = None):
        self.stage = stage
        self.script = STAGES[stage][0] if stage in STAGES else f"{stage}.py"
        self.output = Path(output)
        self.config = config
        self.files_into = files_into
        self.manifest_name = manifest_name
        self.t0 = time.time()
        self.timings: dict[str, float] = {}
        self.resources: dict[str, dict] = {}
        self.rss_start_mb = current_rss_mb()
        self.input_manifest = Path(input_manifest) if input_manifest else None
        self.input = check_input(self.input_manifest) if self.input_manifest else None
        self.extra = {k: (Path(v), check_input(v)) for k, v in (extra_inputs or {}).items()}
        self.input_fingerprint = self.input["output_fingerprint"] if self.input else None
        fp = self.input_fingerprint
        if self.extra:
            fp = json.dumps([fp] + [m["output_fingerprint"] for _, m in self.extra.values()])
        self.key = config_key(stage, config, fp, plan)
        self.staging = staging_path(self.output, stage, files_into)
        self._recover()
        self._refuse_foreign_output()
        # reuse_current: a stage whose output this run would only write again, byte for
        # byte, does nothing (see current_output); no staging folder is made
        self.current = self.current_output() if reuse_current else None
        self.resumed = False
        if self.current is None:
            # space(): the bytes this run writes; warn now if they are not free (pipeline.disk)
            expect(self.staging, self.output, space() if space else None)
            self._prepare()

    def current_output(self) -> dict | None:
        """The manifest of the output in place, if this run would write the same bytes
        (see current_manifest)."""
        return current_manifest(self.output / self.manifest_name, self.stage, self.config,
                                self.input_fingerprint,
                                {k: em["output_fingerprint"] for k, (_, em) in self.extra.items()})

    def current_line(self) -> str:
        """What a stage prints when its output is current (and it did nothing)."""
        names = [f["name"] for f in self.current["files"]]
        shown = [display_path(self.output / n) for n in names]
        what = (", ".join(shown[:-1]) + " and " + shown[-1] + " are"
                if self.files_into and len(shown) > 1 else display_path(self.output) + " is")
        line = (f"{what} up to date: the manifest records this input and config, and "
                f"{len(names)} file{'s' if len(names) != 1 else ''} match{'' if len(names) != 1 else 'es'} "
                f"its digests (checked in {time.time() - self.t0:.1f} s); nothing to do. "
                "--force rebuilds.")
        if self.staging.is_dir():   # a --force run that died: its work is still on disk
            size = sum(p.stat().st_size for p in self.staging.rglob("*") if p.is_file())
            line += (f"\nAn unfinished run left {display_path(self.staging)} ({human_bytes(size)}): "
                     "rerun with --force and the flags it had to resume it, or delete it.")
        return line

    def _refuse_foreign_output(self) -> None:
        """A run replaces its output folder whole: refuse one that holds files but is not
        an earlier output of this stage (no manifest of it), so that an --output typed
        wrong never deletes someone's folder, or another stage's output."""
        if self.files_into or not self.output.is_dir():
            return
        manifest = self.output / self.manifest_name
        # what a sweep run before the first run leaves there: report/sweep.{json,md}
        mine = {self.output / "report" / f"sweep.{x}" for x in ("json", "md")}
        if manifest.is_file():
            try:
                stage = json.loads(manifest.read_text(encoding="utf-8")).get("stage")
            except (OSError, ValueError, AttributeError):
                stage = self.stage   # unreadable: this stage's own, broken; a run mends it
            if stage in (self.stage, None):   # None: a manifest that does not say
                return
            why = f"it is the output of {STAGES[stage][0] if stage in STAGES else stage}"
        elif next((p for p in self.output.rglob("*") if not p.is_dir() and p not in mine),
                  None) is None:
            return
        else:
            why = f"it holds files but no {self.manifest_name} of {self.script}"
        raise StageError(f"{display_path(self.output)}: not an output of {self.script} ({why}), "
                         "and a run would replace it whole: choose another --output, or "
                         "empty or remove that folder")

    # -- staging -----------------------------------------------------------------------
    def _prepare(self) -> None:
        keyfile = self.staging / RUN_KEY
        if self.staging.exists():
            try:
                same = json.loads(keyfile.read_text())["key"] == self.key
            except (OSError, ValueError, KeyError):
                same = False
            if same:
                self.resumed = True
                return
            remove_tree(self.staging)
        self.staging.mkdir(parents=True)
        try:
            write_json(keyfile, {"key": self.key, "stage": self.stage})
        except OSError:   # (a full disk) a staging folder without its key is no run's to resume
            shutil.rmtree(self.staging, ignore_errors=True)
            raise

    def logging_dir(self, phase: str) -> Path:
        return self.staging / "_logs" / phase

    def forget_tasks(self) -> None:
        """Call before the stage consumes what its finished tasks left in the staging
        folder (moves their work files away, or deletes them): every phase's completion
        markers go first, each phase's with one rename. A run killed after this point
        is resumed by running its phases again, instead of skipping tasks whose files
        are gone."""
        for done in sorted(self.staging.glob("_logs/*/completions")):
            gone = done.with_name("completions.forgotten")
            shutil.rmtree(gone, ignore_errors=True)
            os.replace(done, gone)
            shutil.rmtree(gone, ignore_errors=True)

    @contextmanager
    def phase(self, name: str):
        """Time a phase of the stage; the timings go into the manifest."""
        t = time.time()
        try:
            yield
        finally:
            self.timings[name] = round(time.time() - t, 3)

    def parallel(self, phase: str, fn, tasks: int, args, total_docs: int = 0,
                 total_bytes: int = 0, inline: bool = False, **kwargs) -> dict:
        """Run a parallel phase (fn for ranks 0..tasks-1) through the executor, timed, with
        its progress bar; its resources (core use, worker memory) go into the manifest.
        inline: too little work for a worker pool (see pipeline.executors.run_tasks)."""
        with self.phase(phase):
            res = run_tasks(fn, tasks, args, self.logging_dir(phase), phase,
                            total_docs=total_docs, total_bytes=total_bytes, inline=inline,
                            **kwargs)
        self.resources[phase] = res
        return res

    def resource_summary(self, docs: int | None) -> dict:
        """The driver's memory (peak, and per document above its start) and each parallel
        phase's core use and largest worker."""
        peak = peak_rss_mb()
        held = max(0.0, peak - self.rss_start_mb) * 2**20
        return {"driver_cpu_s": cpu_seconds(),
                "worker_cpu_s": round(sum(r.get("worker_cpu_s", 0) for r in self.resources.values()), 3),
                "driver_peak_rss_mb": peak, "driver_start_rss_mb": self.rss_start_mb,
                "driver_bytes_per_doc": round(held / docs, 1) if docs else None,
                "max_worker_rss_mb": max((r.get("max_worker_rss_mb") or 0
                                          for r in self.resources.values()), default=None),
                "phases": self.resources}

    # -- commit ------------------------------------------------------------------------
    def commit(self, files: list[dict], counts: dict, extra: dict | None = None,
               report_dir: str = "report") -> dict:
        """Write the manifest and move the staged output into place atomically.

        A filtering stage's counts must balance (docs_in = docs_out + removals by reason):
        nothing is dropped without being counted, or nothing is committed. The run's
        resources (time, CPU, memory, core use per phase) also go to
        <report_dir>/resources.{json,md} and one printed line."""
        if "removed" in counts and "docs_in" in counts:
            removed = sum(counts["removed"].values())
            if counts["docs_in"] != counts["docs_out"] + removed:
                raise StageError(f"{self.script}: internal error: {counts['docs_in']} documents in "
                                 f"!= {counts['docs_out']} out + {removed} removed")
        self.timings["total"] = round(time.time() - self.t0, 3)
        out_manifest = (self.output / self.manifest_name)
        manifest = {
            "version": VERSION,
            "stage": self.stage,
            "script": self.script,
            "config": self.config,
            "input": None if self.input is None else {
                "manifest": relative_manifest(self.input_manifest, out_manifest),
                "fingerprint": self.input_fingerprint,
                "stage": self.input.get("stage"),
            },
            "extra_inputs": {k: {"manifest": relative_manifest(p, out_manifest),
                                 "fingerprint": m["output_fingerprint"]}
                             for k, (p, m) in self.extra.items()},
            "counts": counts,
            "files": files,
            "output_fingerprint": fingerprint(files, self.stage),
            "timings": self.timings,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "resources": self.resource_summary(counts.get("docs_in", counts.get("rows"))),
            **(extra or {}),
        }
        write_resources(self.staging / report_dir, self.stage, manifest["resources"],
                        self.timings)
        write_json(self.staging / self.manifest_name, manifest)
        if self.files_into:
            self._commit_files(files)
        else:
            self._commit_dir()
        note_stale_downstream(self.output / self.manifest_name, manifest["output_fingerprint"])
        print(resources_line(manifest["resources"], self.timings))
        forget()
        return manifest


def add_force_arg(p) -> None:
    """--force, for a stage that does nothing when its output is current (StageRun's
    reuse_current): the way to rebuild it anyway, say after upgrading a library."""
    p.add_argument("--force", action="store_true",
                   help="run even when the output is up to date (same input, config and files)")


def resources_line(r: dict, timings: dict) -> str:
    """'resources: 12.3 s wall, 22.1 s CPU; driver 180 MB peak, largest worker 420 MB; ...'"""
    cpu = (r.get("driver_cpu_s") or 0) + (r.get("worker_cpu_s") or 0)
    parts = [f"resources: {timings.get('total', 0):.1f} s wall, {cpu:.1f} s CPU",
             f"driver {r.get('driver_peak_rss_mb') or 0:.0f} MB peak"]
    if r.get("max_worker_rss_mb"):
        parts.append(f"largest worker {r['max_worker_rss_mb']:.0f} MB")
    uses = [f"{k} {v['core_use']:.0%} of {v['workers']} cores"
            for k, v in r.get("phases", {}).items() if v.get("core_use") is not None]
    if uses:
        parts.append("core use " + ", ".join(uses))
    return "; ".join(parts)


def write_resources(folder: Path, stage: str, r: dict, timings: dict) -> None:
    """<report>/resources.{json,md}: the numbers behind resources_line, per phase."""
    from .tables import markdown_table, save_report

    rows = [[k, v.get("tasks"), v.get("workers"), v.get("wall_s"), v.get("task_cpu_s"),
             "-" if v.get("core_use") is None else f"{v['core_use']:.0%}",
             v.get("max_worker_rss_mb")] for k, v in r.get("phases", {}).items()]
    md = [f"# {stage}: resources", "", resources_line(r, timings), "",
          markdown_table(["phase", "tasks", "workers", "wall s", "task CPU s", "core use",
                          "largest worker MB"], rows) if rows else "(no parallel phase)", "",
          f"driver: peak {r.get('driver_peak_rss_mb')} MB, {r.get('driver_bytes_per_doc')} bytes "
          "per document above its start"]
    save_report(folder, "resources", {**r, "timings": timings}, "\n".join(md))


def note_stale_downstream(manifest_file: Path, new_fp: str) -> list[Path]:
    """Print which outputs beside this one were built from an older version of it."""
    stale = []
    here = manifest_file.resolve()
    parent = here.parent.parent
    candidates = list(parent.glob(f"*/{MANIFEST}")) + list(parent.glob("*_manifest.json"))
    for m in sorted(candidates):
        if m.resolve() == here:
            continue
        try:
            d = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        up = upstream_path(d, m)
        if up is not None and up == here and (d.get("input") or {}).get("fingerprint") != new_fp:
            stale.append(m.parent if m.name == MANIFEST else m)
            continue
        # an extra input (pack's tokenizer) counts as much as the main one
        extra = d.get("extra_inputs") if isinstance(d.get("extra_inputs"), dict) else {}
        for rec in extra.values():
            if not (isinstance(rec, dict) and rec.get("manifest")):
                continue
            if (m.parent / rec["manifest"]).resolve() == here and rec.get("fingerprint") != new_fp:
                stale.append(m.parent if m.name == MANIFEST else m)
                break
    for s in stale:
        print(f"note: {s} was built from the previous output and is now stale; "
              f"rerun {read_manifest_script(s)} (and the stages after it)", file=sys.stderr)
    return stale


def read_manifest_script(p: Path) -> str:
    m = p / MANIFEST if p.is_dir() else p
    try:
        return read_manifest(m).get("script", "its stage")
    except StageError:
        return "its stage"
