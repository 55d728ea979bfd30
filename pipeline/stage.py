"""The life cycle of every stage, written once.

A stage script supplies its docstring, its flags, its task functions and a `run` function
that calls them in the tutorial's order and returns what it wrote (`Output`). Everything
around that is here, in this order (`Stage.main`):

 1. read the flags: --input, --output, the executor's (--workers, --task-mb, ...) and the
    stage's own; check them; start the worker pool;
 2. check the input: take a shared lock on it (no other run may be writing it), check its
    manifest and every manifest above it (an input whose upstream was rerun is stale),
    open its shards and cut them into work units (pipeline.units);
 3. take the exclusive lock on the output (a second run on it stops, naming the first);
    a stage whose output is already what this run would write says so and stops;
    otherwise estimate the space the run needs and warn when it is short, and open the
    staging folder beside the output (resuming a killed run's finished tasks);
 4. call the stage's `run`: its phases on the executor, the merge of their results, its
    reports into the staging folder;
 5. write the manifest, swap the staging folder into place, name the stages below that
    are now stale; release the locks.

A sweep (`--sweep`, clean and dedup_minhash) takes steps 1 to 3 too, under the same
output lock, then hands over to the stage's `sweep` (see pipeline.sweep): it writes only
a report beside the output.

    STAGE = Stage("dedup_exact", __doc__, run, flags=flags, config=config)

    def main(argv=None):
        return STAGE.main(argv)

verify.py and report.py read a whole data folder (every stage's output in it) and write a
report rather than an output folder: ReportStage, at the end of this file, runs them
through the same steps for that (the flags checked in one line each, the pool, shared
locks on what they read, their run, then the report written whole with the resources).

    STAGE = ReportStage("verify", __doc__, run, flags=flags, check=check, locks=locks, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from . import collector, layout
from .disk import check_out_path, check_report_path, register, replace_whole
from .errors import ArgumentParser, InputError, StageError, refusal
from .executors import add_executor_args, check_executor
from .local_pool import start_pool_early
from .lock import FolderLock, lock_all
from .manifest import MANIFEST, check_input
from .progress import DRIVER_PID, cpu_seconds, peak_rss_mb
from .shards import list_shards, open_shard, stage_shards
from .staging import RUN_KEY, StageRun, add_force_arg, current_manifest, staging_path
from .task_results import load_task_results
from .units import Unit, describe, plan_units, unit_offsets


ENGINES = ("fast", "reference")


@dataclass
class Output:
    """What a stage's run wrote into its staging folder, for the manifest and the user.

    files: the file records of the output (pipeline.shards.file_record); counts: what the
    manifest records under "counts" (a filtering stage's must balance: docs_in = docs_out
    + removed); extra: more manifest keys; summary: lines printed after the commit (or
    functions giving them, for lines that read the committed output)."""
    files: list[dict]
    counts: dict
    extra: dict | None = None
    summary: list = field(default_factory=list)
    report_dir: str = "report"
    # files written outside the output under temporary names ({temporary: final path}, an
    # export beside it): put in place right after the commit, deleted if it fails, so a
    # failed run leaves them as they were, with the previous output
    outside: dict = field(default_factory=dict)


class Run:
    """One run of a stage, as its `run` function sees it: the flags, the input's shards
    and work units, and the staging folder, with the calls that run phases on the
    executor and read back their task results."""

    def __init__(self, stage: "Stage", args: argparse.Namespace, shards: list[Path],
                 units: list[Unit], staged: StageRun | None = None):
        self.stage, self.args, self.shards, self.units = stage, args, shards, units
        self.staged = staged
        self.input = Path(args.input) if getattr(args, "input", None) else None
        self.output = Path(args.output)
        self.offsets = unit_offsets(units)
        self.source: dict | None = None   # what a stage's config found out (download's)

    # what every task of a phase over the units needs
    @property
    def staging(self) -> Path:
        return self.staged.staging

    @property
    def input_fingerprint(self) -> str | None:
        """The input's fingerprint, from its manifest (checked with the chain above it)."""
        if self.staged is not None:
            return self.staged.input_fingerprint
        if self.input is None:
            return None
        return check_input(self.input / MANIFEST)["output_fingerprint"]

    @property
    def total_docs(self) -> int:
        return int(self.offsets[-1])

    @property
    def total_bytes(self) -> int:
        return sum(u.text_bytes for u in self.units)

    def unit_dicts(self) -> list[dict]:
        return [u.to_dict() for u in self.units]

    def phase(self, name: str):
        """Time a step done in this process; the timing goes into the manifest."""
        return self.staged.phase(name)

    def parallel(self, phase: str, fn: Callable, tasks: int | None = None,
                 inline: bool = False, sized: bool = True, **kwargs) -> dict:
        """Run fn(rank, world_size, **kwargs) for every task of a phase through the
        executor (one task per unit unless `tasks` says otherwise), with its progress bar
        sized by the units (sized=False: no size known), and timed. inline: too small a
        phase for the worker pool (its tasks run here, one after another)."""
        n = len(self.units) if tasks is None else tasks
        size = {"total_docs": self.total_docs, "total_bytes": self.total_bytes} if sized else {}
        return self.staged.parallel(phase, fn, n, self.args, inline=inline, **size, **kwargs)

    def forget_tasks(self) -> None:
        """Before consuming the tasks' work files: a run killed from here on runs its
        phases again when resumed (StageRun.forget_tasks)."""
        self.staged.forget_tasks()

    def results(self, phase: str, tasks: int | None = None) -> list[dict]:
        """The results the tasks of a phase saved (pipeline.task_results), in rank order."""
        return load_task_results(self.staging, phase, len(self.units) if tasks is None else tasks)


def check_not_nested(inp: Path, out: Path, files_into: bool,
                     why_inside: str = "rerunning the stage that wrote the input would "
                                       "delete it") -> None:
    """Refuse an --output that is, or lies inside, the --input folder: the stage that
    wrote the input replaces its folder whole when it runs again, and would delete this
    output with it. A stage that replaces its own output folder (all but pack's, which
    adds its files to a shared folder such as data/) also refuses an --input inside it:
    the run would delete its own input."""
    i, o = inp.resolve(), out.resolve()
    if i == o and not files_into:
        raise StageError(f"--output {out} is the input folder; choose another")
    if o == i or i in o.parents:
        raise StageError(f"--output {out} is inside the input folder {inp}: {why_inside}; "
                         "choose a folder outside")
    if o in i.parents and not files_into:
        raise StageError(f"--input {inp} is inside --output {out}, which this run replaces "
                         "whole; choose an --output outside it")


class Stage:
    """A stage: its name, its help text, and the functions its script supplies.

    run(run) -> Output: the tutorial's steps (required).
    flags(parser, argv): the stage's own flags. check(args): refuse bad flags with a StageError.
    config(run) -> dict: every setting that decides the output's bytes (the manifest's
        "config"; a rerun with the same input and config resumes or is current).
    space(run) -> int: bytes the run writes (staging folder and kept stores), for the
        warning before work and the disk-full line.
    sweep(run) -> int: what --sweep does, when the stage has one.
    after_commit(run): what follows the commit (removing what the new output replaced).
    """

    def __init__(self, name: str, doc: str, run: Callable[[Run], Output], *,
                 flags: Callable | None = None, check: Callable | None = None,
                 config: Callable[[Run], dict] | None = None,
                 space: Callable[[Run], int] | None = None,
                 sweep: Callable[[Run], int] | None = None,
                 reads: Path | None = None, writes: Path | None = None,
                 input_help: str | None = None, output_help: str | None = None,
                 reuse_current: bool = False, files_into: bool = False,
                 manifest_name: str = MANIFEST, extra_inputs: Callable | None = None,
                 plans_units: bool = True, current_note: Callable | None = None,
                 after_commit: Callable | None = None,
                 compiled: bool | Callable[[argparse.Namespace], bool] = False,
                 prefork: Callable | None = None,
                 several_tasks: Callable[[argparse.Namespace], bool] | None = None,
                 engines: bool = False):
        self.name, self.doc, self.run_fn = name, doc, run
        # engines: the stage runs either the compiled fast path or the tutorial's readable
        # code (--engine reference), which writes the same bytes (ENGINES)
        self.engines = engines
        self.script = layout.STAGES[name][0]
        self.flags_fn, self.check_fn, self.config_fn = flags, check, config
        self.space_fn, self.sweep_fn = space, sweep
        self.reads = reads
        self.writes = writes if writes is not None else layout.STAGES[name][1]
        self.input_help, self.output_help = input_help, output_help
        self.reuse_current, self.files_into = reuse_current, files_into
        self.manifest_name, self.extra_inputs_fn = manifest_name, extra_inputs
        self.plans_units, self.current_note = plans_units, current_note
        self.after_commit = after_commit
        # every task of a run that does work runs numba kernels: set numba up once, in the
        # driver, before the pool is forked (local_pool.start_pool_early), so that the
        # workers inherit it instead of each importing it. A callable compiled(args) says
        # it per run: clean and dedup_minhash need numba only when nothing is kept (a
        # rerun reads kept measurements and never loads it).
        self.compiled = compiled
        # prefork(args): what every task builds the same way (pack's encoders), built once
        # in the driver before the pool is forked, so the workers inherit it. It may return
        # a callable, called right before the fork (pack's: wait for its check's thread)
        self.prefork = prefork
        # several_tasks(args): for a stage that plans no units from an input folder
        # (download), whether this run will have several tasks, judged without starting a
        # thread; then the pool is forked early too (needs_pool)
        self.several_tasks = several_tasks

    # -- 1. flags ---------------------------------------------------------------------
    def parser(self, argv: list[str] | None = None) -> argparse.ArgumentParser:
        p = ArgumentParser(description=self.doc.split("\n\n")[0],
                                    formatter_class=argparse.RawDescriptionHelpFormatter,
                                    epilog=self.doc.split("\n\n", 1)[1] if "\n\n" in self.doc
                                    else None)
        if self.reads is not None:
            p.add_argument("--input", default=str(self.reads),
                           help=self.input_help or f"default: {self.reads}")
        p.add_argument("--output", default=str(self.writes),
                       help=self.output_help or f"default: {self.writes}")
        try:
            if self.engines:
                p.add_argument("--engine", choices=ENGINES, default="fast",
                               help="fast (default): the compiled path; reference: the "
                                    "tutorial's code as readable Python (algorithms/), much "
                                    "slower, the same bytes; to step through with a debugger")
            if self.flags_fn:   # argv: a stage whose flags depend on one of them (clean's --rules)
                self.flags_fn(p, argv)
            if self.reuse_current:
                add_force_arg(p)
            add_executor_args(p, task_mb=self.plans_units)
        except argparse.ArgumentError as e:   # a flag declared twice (a user's rule, say)
            raise StageError(f"{self.script}: {e} (a flag declared twice: a rule's flag "
                             "that is one of the stage's own?)") from None
        return p

    def parse(self, argv: list[str] | None) -> argparse.Namespace:
        args = self.parser(argv).parse_args(argv)
        if args.workers < 1:
            raise StageError("--workers must be at least 1")
        check_executor(args)
        if self.reads is not None:
            check_not_nested(Path(args.input), Path(args.output), self.files_into)
        check_out_path("--output", args.output, folder=True)   # a stage writes a folder
        out = Path(args.output)
        if not self.files_into and out.is_symlink():   # the commit swaps the folder whole
            raise StageError(f"--output {args.output}: a symbolic link (to {os.readlink(out)}); "
                             "a run replaces its output folder whole, which would put a folder "
                             "where the link is: give the folder itself, --output "
                             f"{out.resolve()}")
        if self.check_fn:
            self.check_fn(args)
        return args

    def needs_pool(self, args: argparse.Namespace) -> bool:
        """Whether this run has more than one task for the worker pool, judged from the
        input's manifest alone (reading parquet footers would start threads, and the pool
        is forked from a process that has none), or from the stage's several_tasks(args)
        (download: its local files' sizes). An input of one shard of at most one
        --task-mb runs its one task here and starts no pool (units never span shards:
        each shard is at least one task)."""
        if self.several_tasks is not None:
            return self.several_tasks(args)
        if self.reads is None or not self.plans_units:
            return False
        try:
            m = json.loads((Path(args.input) / MANIFEST).read_text(encoding="utf-8"))
            files = [f for f in m.get("files", []) if f.get("rows", 1)]
            text = sum(int(f.get("text_bytes") or 0) for f in files)
        except (OSError, ValueError, TypeError, AttributeError):
            # a missing or unreadable manifest: the run stops at its input check, with
            # its line, before any task; a pool forked for it would only be torn down
            return False
        return len(files) > 1 or text > args.task_mb * 1e6

    def looks_current(self, args: argparse.Namespace) -> bool:
        """Whether the output in place already is what this run would write (a stage that
        then does nothing needs no pool): a hint only, taken before the locks and without
        reading the files (their sizes only); the run decides again under the locks, with
        the digests (StageRun.current)."""
        if not self.reuse_current or getattr(args, "force", False) or self.reads is None:
            return False
        try:
            config = self.config_fn(Run(self, args, [], [])) if self.config_fn else {}
            fp = check_input(Path(args.input) / MANIFEST)["output_fingerprint"]
            extra = {k: check_input(m)["output_fingerprint"]
                     for k, m in (self.extra_inputs_fn(args) if self.extra_inputs_fn else {}).items()}
        except Exception:   # noqa: BLE001 - any doubt: not current (the run will say why)
            return False
        manifest = Path(args.output) / self.manifest_name
        return current_manifest(manifest, self.name, config, fp, extra, digests=False) is not None

    # -- 2. the input -----------------------------------------------------------------
    def open_input(self, args: argparse.Namespace) -> tuple[list[Path], list[Unit]]:
        """The input's shards (each opened, so a broken one is named before any work)
        and their work units."""
        if self.reads is None:
            return [], []
        shards = stage_shards(args.input)
        rows = sum(open_shard(s).metadata.num_rows for s in shards)
        if rows == 0:   # the stage above kept nothing: say so here, not with a traceback
            raise StageError(f"{args.input}: no documents ({len(shards)} shard(s) of 0 rows): "
                             f"{layout.writer_of(args.input)} kept none; see its report "
                             "and loosen its settings")
        units = plan_units(shards, args.task_mb) if self.plans_units else []
        return shards, units

    def lock_inputs(self, args: argparse.Namespace, extra: dict) -> list[FolderLock]:
        """Shared locks on every folder this run reads: none may be under rewriting."""
        folders = ([Path(args.input)] if self.reads is not None else []) + \
                  [Path(m).parent for m in extra.values()]
        return lock_all(partial(FolderLock, f, self.script, shared=True)
                        for f in folders if f.exists())

    # -- 3-5. the run -------------------------------------------------------------------
    def main(self, argv: list[str] | None = None) -> int:
        collector.pause(freeze=collector.running_as(self.script))   # until set up
        os.environ[DRIVER_PID] = str(os.getpid())   # workers' records: each task's own peak
        try:
            args = self.parse(argv)
            if self.needs_pool(args) and not self.looks_current(args):
                ready = self.prefork(args) if self.prefork else None
                start_pool_early(args, compiled=(self.compiled(args) if callable(self.compiled)
                                                 else self.compiled),
                                 before_fork=ready if callable(ready) else None)
        finally:
            collector.resume()
        extra = self.extra_inputs_fn(args) if self.extra_inputs_fn else {}
        locks = self.lock_inputs(args, extra)
        try:
            shards, units = self.open_input(args)
            run = Run(self, args, shards, units)
            # what the one-line error of a failed write names (pipeline.disk)
            register(staging_path(run.output, self.name, self.files_into), run.output,
                     (lambda: self.space_fn(run)) if self.space_fn else None)
            locks.append(self.lock_output(args))
            if self.sweep_fn and getattr(args, "sweep", None):
                return self.sweep_fn(run)
            return self.produce(run, extra)
        finally:
            for lock in reversed(locks):
                lock.release()

    def lock_output(self, args: argparse.Namespace) -> FolderLock:
        out = Path(args.output)
        if self.files_into:
            return FolderLock(out, self.script, name=self.name,
                              what=f"{self.name}'s output in {out}")
        return FolderLock(out, self.script)

    def produce(self, run: Run, extra_inputs: dict) -> int:
        args = run.args
        config = self.config_fn(run) if self.config_fn else {}
        input_manifest = Path(args.input) / MANIFEST if self.reads is not None else None
        staged = StageRun(self.name, args.output, config, input_manifest=input_manifest,
                          extra_inputs=extra_inputs or None, manifest_name=self.manifest_name,
                          files_into=self.files_into,
                          reuse_current=self.reuse_current and not getattr(args, "force", False),
                          space=(lambda: self.space_fn(run)) if self.space_fn else None,
                          plan=[[Path(u.shard).name, u.row_start, u.rows] for u in run.units]
                          if run.units else None)
        run.staged = staged
        if staged.current:
            print(staged.current_line())
            if self.current_note:
                print(self.current_note(run))
            return 0
        if staged.resumed:
            print(f"resuming in {staged.staging}", file=sys.stderr)
        if run.units:
            print(f"{self.name}: {describe(run.units)}", file=sys.stderr)
        try:
            try:
                out = self.run_fn(run)
            except ValueError as e:   # an algorithm's refusal, in this process
                bad = refusal(e)
                if bad is None:
                    raise
                raise bad from None
        except StageError as e:   # say where the finished tasks wait, and for what
            if not staged.staging.exists() or isinstance(e, InputError):
                raise   # (a rerun with the same input and settings would fail the same way)
            if {p.name for p in staged.staging.iterdir()} <= {RUN_KEY}:   # nothing done yet
                shutil.rmtree(staged.staging, ignore_errors=True)
                raise
            raise StageError(f"{e} (the work done so far is kept in {staged.staging}: a "
                             "rerun with the same input and settings resumes from it, any "
                             f"other run into {args.output} replaces it)") from None
        extra = dict(out.extra or {})
        if self.engines:   # what ran; never in the config: both engines write the same bytes
            extra["engine"] = args.engine
        try:
            staged.commit(files=out.files, counts=out.counts, extra=extra or None,
                          report_dir=out.report_dir)
        except BaseException:
            for tmp in out.outside:
                Path(tmp).unlink(missing_ok=True)
            raise
        for tmp, dest in out.outside.items():
            try:
                os.replace(tmp, dest)
            except OSError as e:   # the output is in place: say so, and leave no temporary
                for t in out.outside:
                    Path(t).unlink(missing_ok=True)
                raise StageError(f"{dest}: cannot be replaced ({e.strerror or e}); "
                                 f"{dest} is unchanged, but {args.output} is written; fix "
                                 "this and rerun the same command") from None
        if self.after_commit:
            self.after_commit(run)
        for line in out.summary:   # notes and warnings to stderr, the rest to stdout
            line = line() if callable(line) else line   # what reads the committed output
            print(line, file=sys.stderr if line.startswith(("note:", "WARNING")) else sys.stdout)
        return 0


def unit_bytes_on_disk(units: list[Unit]) -> int:
    """The input's bytes on disk, as the share of each shard that its units cover: what
    a stage that copies some of its rows writes at most."""
    by_shard: dict[str, list[Unit]] = {}
    for u in units:
        by_shard.setdefault(u.shard, []).append(u)
    total = 0
    for shard, us in by_shard.items():
        md = open_shard(shard).metadata
        rows = md.num_rows or 1
        size = Path(shard).stat().st_size
        total += int(size * sum(u.rows for u in us) / rows)
    return total


# -- a stage that reads a whole data folder and writes a report -----------------------------

@dataclass
class ReportOutput:
    """What a report stage's run made: the report (written at --output), its data (written
    as JSON beside it, the report's name with .json, with the run's resources; None: no
    JSON), the stage's own figures added to those resources, the lines printed once the
    files are written (notes and warnings to stderr) and the exit status."""
    text: str | bytes
    data: dict | None = None
    resources: dict = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    status: int = 0


class ReportRun:
    """One run of a report stage, as its `run` function sees it: the flags, the data
    folder, the report's path, and the resources of its parallel phases (`phases`, as
    pipeline.executors.run_tasks returns them)."""

    def __init__(self, stage: "ReportStage", args: argparse.Namespace, t0: float):
        self.stage, self.args, self.t0 = stage, args, t0
        self.data = Path(args.data_dir)
        self.output = Path(args.output)
        self.phases: dict = {}

    def resources(self, **extra) -> dict:
        """Time, CPU and memory so far: the driver's, and the tasks' of every phase."""
        return {"wall_s": round(time.time() - self.t0, 3), "driver_cpu_s": cpu_seconds(),
                "worker_cpu_s": sum(p.get("worker_cpu_s", 0) for p in self.phases.values()),
                "driver_peak_rss_mb": peak_rss_mb(), "phases": self.phases, **extra}


class ReportStage:
    """A stage that reads a whole data folder and writes a report beside it (verify.py's
    checklist, report.py's page), in this order (`main`):

     1. read the flags: --input (also --data-dir: the data folder), --output (the report),
        the executor's for a stage with parallel phases, and the stage's own; check them
        (the data folder is one; the output is a new file or a report this stage wrote,
        and so is the JSON beside it); start the worker pool;
     2. take its locks (`locks`: shared ones on what it reads; all or none);
     3. call the stage's `run`, then release the locks;
     4. write the report and its data, each whole under a temporary name before either
        replaces the previous one (pipeline.disk.replace_whole: a failed write is one line
        and keeps the previous report); print the summary; exit with the run's status.

    run(run) -> ReportOutput (required). flags(parser, argv), check(args): as Stage's.
    locks(run) -> the FolderLock takes (callables) of the run. report: the report's name in
    the data folder (its suffix is the one --output must have) and what an existing report
    holds in its first lines (or --output is refused: it could be any file); data_head:
    the same for the JSON beside it, for a stage that writes one.
    """

    def __init__(self, name: str, doc: str, run: Callable[[ReportRun], ReportOutput], *,
                 report: tuple[str, str], data_head: str | None = None,
                 flags: Callable | None = None, check: Callable | None = None,
                 locks: Callable[[ReportRun], list] | None = None, parallel: bool = False,
                 output_flags: tuple[str, ...] = ("--output",), input_help: str | None = None,
                 output_help: str | None = None):
        self.name, self.doc, self.run_fn = name, doc, run
        self.script = f"{name}.py"
        self.report_name, self.report_head = report
        self.data_head = data_head
        self.flags_fn, self.check_fn, self.locks_fn = flags, check, locks
        self.parallel = parallel   # its run has phases on the executor: the executor's flags
        self.output_flags = output_flags
        self.input_help, self.output_help = input_help, output_help

    def parser(self, argv: list[str] | None = None) -> argparse.ArgumentParser:
        p = ArgumentParser(description=self.doc.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog=self.doc.split("\n\n", 1)[1] if "\n\n" in self.doc else None)
        p.add_argument("--data-dir", "--input", dest="data_dir", default=str(layout.DATA),
                       help=self.input_help or f"the data folder (default: {layout.DATA})")
        p.add_argument(*self.output_flags, dest="output", default=None,
                       metavar=self.output_flags[0].lstrip("-").upper(),
                       help=self.output_help or f"default: DATA_DIR/{self.report_name}")
        if self.flags_fn:
            self.flags_fn(p, argv)
        if self.parallel:
            add_executor_args(p)
        return p

    def parse(self, argv: list[str] | None) -> argparse.Namespace:
        args = self.parser(argv).parse_args(argv)
        if self.parallel:
            if args.workers < 1 or not 0 < args.task_mb < float("inf"):   # NaN is not above 0
                raise StageError(f"--workers {args.workers} / --task-mb {args.task_mb}: "
                                 "--workers must be at least 1 and --task-mb positive")
            check_executor(args)
        if not Path(args.data_dir).is_dir():
            raise StageError(f"--data-dir {args.data_dir} is not a folder; run the pipeline "
                             "first (make demo)")
        if self.check_fn:
            self.check_fn(args)
        # the report, and the JSON beside it: written whole over their paths, so neither
        # may be another file (a shard, a manifest, a packed .bin given by mistake)
        args.output = Path(args.output) if args.output else Path(args.data_dir) / self.report_name
        check_out_path("--output", args.output, folder=False)
        check_report_path(args.output, "--output", Path(self.report_name).suffix,
                          self.report_head)
        if self.data_head is not None:
            check_report_path(args.output.with_suffix(".json"), "--output (its .json)",
                              ".json", self.data_head)
        return args

    def main(self, argv: list[str] | None = None) -> int:
        t0 = time.time()
        collector.pause(freeze=collector.running_as(self.script))   # until set up
        os.environ[DRIVER_PID] = str(os.getpid())
        try:
            args = self.parse(argv)
            if self.parallel:
                start_pool_early(args)
        finally:
            collector.resume()
        run = ReportRun(self, args, t0)
        locks = lock_all(self.locks_fn(run)) if self.locks_fn else []
        try:
            out = self.run_fn(run)
        finally:
            for lock in reversed(locks):
                lock.release()
        text = out.text.encode("utf-8") if isinstance(out.text, str) else out.text
        files = {run.output: text}
        if out.data is not None:
            data = {**out.data, "resources": run.resources(**out.resources)}
            files[run.output.with_suffix(".json")] = \
                (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        replace_whole(files)
        for line in out.summary:   # notes and warnings to stderr, the rest to stdout
            print(line, file=sys.stderr if line.startswith(("note:", "warning:", "WARNING"))
                  else sys.stdout)
        return out.status
