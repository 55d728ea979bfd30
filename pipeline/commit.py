"""The commit: a stage's finished output swapped into place whole, and a commit that a crash
interrupted finished or undone by the next run. StageRun (pipeline/staging.py) has these
methods from AtomicCommit.

An output folder (`data/cleaned`):

1. The run writes everything into its staging folder beside the output
   (`data/.cleaned.partial`, pipeline.staging): the tasks' files, their completion
   markers under `_logs/`, their work files under `_work/`, `_results/`, ..., and its
   key `_run.json` (the stage, config and input it was made for).
2. StageRun.commit writes the manifest into the staging folder, after every file it lists.
3. The swap (_commit_dir): the task logs move out to `data/logs/<stage>/`; the previous
   output is renamed `data/.cleaned.old`; the staging folder, its `_` folders deleted, is
   renamed `data/cleaned` and its key removed; then the previous output is deleted.

A crash leaves, and the next run of the stage mends before anything else (_recover):
- before the previous output was renamed: the output untouched, and the staging folder,
  which a rerun with the same input and config resumes (its tasks run again if their
  logs had moved out already);
- between the two renames: no `data/cleaned`, and `data/.cleaned.old`. The staging
  folder holds its manifest, so the new output is complete: it is renamed into place,
  and the commit is finished (without a manifest there, the previous output would be
  renamed back);
- after the second rename: the new output in place; `data/.cleaned.old` is deleted.
A rename that fails (an immutable folder, a mount point) stops the commit before
anything moved: one line naming it, the output unchanged, the task logs back in the
staging folder, so that the rerun resumes with every task finished.

Files written into a folder (files_into: pack_parallel's `train.bin`, `val.bin`, ...
and `pack_manifest.json` in `data/`) are staged in `data/.pack_parallel.partial` and
swapped one rename per entry (_commit_files): the previous set goes aside into
`data/.pack_parallel.old` (its manifest first; `_commit.json` there lists the entries,
and whether task logs move out), then the new set comes in (its manifest last), so a
reader that trusts the manifest never sees a half set. A rename that fails puts back
what had moved. After a crash (_recover_files, when `.pack_parallel.old` is there):
- the new manifest in place (and none left in the staging folder): the commit went
  through; the previous set and what is left of the staging folder are deleted;
- otherwise each new entry and the task logs go back to the staging folder (the rerun
  resumes there) and the previous set comes back whole.

Besides the output and its staging folder, a commit replaces or deletes whole only the
places run_owned_paths names.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

from .disk import remove_tree
from .errors import StageError
from .layout import RUN_KEY
from .manifest import display_path, write_json


def old_path(output: Path, stage: str, files_into: bool) -> Path:
    """Where a commit keeps the previous output until the new one is in: `data/.cleaned.old`
    beside a folder, `data/.pack_parallel.old` for files written into a folder."""
    output = Path(output)
    return output / f".{stage}.old" if files_into else output.parent / f".{output.name}.old"


def logs_home(output: Path, stage: str, files_into: bool) -> Path:
    """data/logs/<stage>/: where a committed run's task logs are kept (replaced whole)."""
    output = Path(output)
    return (output if files_into else output.parent) / "logs" / stage


def run_owned_paths(output: Path, stage: str, files_into: bool) -> dict[str, Path]:
    """Besides the output and its staging folder, the places a commit of `stage` replaces
    or deletes whole, by what they are: a file another tool puts there is lost."""
    return {"the previous output's place during a commit": old_path(output, stage, files_into),
            "the task logs' folder": logs_home(output, stage, files_into)}


def _drop_work(staging: Path) -> None:
    """The tasks' results and work files (_results, _work, ...) served the merge and a
    resume; they are not output."""
    for p in staging.iterdir():
        if p.name.startswith("_") and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


class AtomicCommit:
    """StageRun's commit and recovery: the swap of its staging folder into place, and the
    mending of a swap that a crash interrupted. Uses the run's stage, script, output,
    staging, files_into and manifest_name."""

    def _logs_home(self) -> Path:
        """data/logs/<stage>/: where a committed run's task logs are kept."""
        return logs_home(self.output, self.stage, self.files_into)

    def _keep_logs(self) -> Path | None:
        """datatrove's task logs move to data/logs/<stage>/, out of the output itself;
        returns where they went (None: there were none)."""
        logs = self.staging / "_logs"
        keep_logs = self._logs_home()
        if not logs.exists():
            return None
        if keep_logs.is_dir() and not keep_logs.is_symlink():
            # the previous run's logs; one that cannot be deleted (an immutable folder) is
            # named, not ignored to fail the rename below naming the staging folder
            remove_tree(keep_logs)
        if keep_logs.parent.exists() and not keep_logs.parent.is_dir():
            # mkdir would say "File exists", which the stage's one line does not know
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                     str(keep_logs.parent))
        keep_logs.parent.mkdir(parents=True, exist_ok=True)
        os.replace(logs, keep_logs)
        return keep_logs

    def _commit_dir(self) -> None:
        logs = self._keep_logs()
        old = self._old()
        if os.path.lexists(old):
            self._remove_old(old)
        if self.output.exists():
            try:
                os.replace(self.output, old)   # a crash from here on is mended by _recover()
            except OSError as e:
                if logs is not None:    # with their completion markers: the rerun resumes
                    os.replace(logs, self.staging / "_logs")
                if e.errno not in (errno.EPERM, errno.EBUSY):
                    raise               # the disk's one line (pipeline.disk.write_error_line)
                raise StageError(f"{display_path(self.output)}: cannot be replaced "
                                 f"({e.strerror or e}); {display_path(self.output)} is "
                                 "unchanged; fix this and rerun the same command (it "
                                 "resumes)") from None
        _drop_work(self.staging)
        os.replace(self.staging, self.output)
        (self.output / RUN_KEY).unlink(missing_ok=True)
        self._drop_previous(old)

    def _drop_previous(self, old: Path) -> None:
        """The new output is in place: delete the previous one (a folder, a link, or the
        files_into set aside); a leftover is worth a note, not a failure."""
        try:
            _remove(old)
        except OSError as e:
            print(f"note: {display_path(self.output)} is the new output, but the previous "
                  f"one could not be deleted ({e.strerror or e}): {display_path(old)}; "
                  "delete it by hand (the next run tries again)", file=sys.stderr)

    def _old(self) -> Path:
        return old_path(self.output, self.stage, False)

    def _recover(self) -> None:
        """Finish or undo a commit that a crash interrupted between its two renames."""
        if self.files_into:
            self._recover_files()
            return
        old = self._old()
        if not old.exists():
            return
        if not self.output.exists():
            if (self.staging / self.manifest_name).exists():
                _drop_work(self.staging)
                os.replace(self.staging, self.output)      # the new output was complete
                (self.output / RUN_KEY).unlink(missing_ok=True)
            else:
                os.replace(old, self.output)               # bring the previous one back
        if os.path.lexists(old):
            self._remove_old(old)

    def _remove_old(self, old: Path) -> None:
        """Delete a previous output left beside the output, or say in one line why not."""
        try:
            _remove(old)
        except OSError as e:
            raise StageError(f"{display_path(old)}: a previous output of {self.script} that "
                             f"could not be deleted ({e.strerror or e}); "
                             f"{display_path(self.output)} is unchanged; delete it by hand and "
                             "rerun") from None

    def _aside(self) -> Path:
        """Where a files_into commit keeps the previous set until the new one is in."""
        return old_path(self.output, self.stage, True)

    def _commit_files(self, files: list[dict]) -> None:
        """Move single files into an existing folder, all or none: the previous set first
        goes aside (its manifest first), then the new set comes in (its manifest last),
        each with one rename. A rename that fails (an immutable file, a folder where a file
        goes) puts back what had moved, so the folder holds the previous set, whole, as
        before; a crash between the renames is mended by the next run (_recover_files).
        A reader that trusts the manifest never sees a half set."""
        self.output.mkdir(parents=True, exist_ok=True)
        # first what is sure to stop the moves: a folder where a file goes, or the reverse
        for p in self.staging.iterdir():
            target = self.output / p.name
            if not p.name.startswith("_") and target.exists() and target.is_dir() != p.is_dir():
                raise StageError(f"{display_path(target)}: a {'file' if target.is_file() else 'folder'} "
                                 f"stands where {self.script} writes a "
                                 f"{'folder' if p.is_dir() else 'file'}; "
                                 f"{display_path(self.output)} is unchanged; move it away and "
                                 "rerun the same command (it resumes)")
        # a file in a folder moves with its folder; _work folders stay with the staging
        names = sorted({f["name"].split("/")[0] for f in files}
                       | {p.name for p in self.staging.iterdir() if not p.name.startswith("_")}
                       - {self.manifest_name})
        names.append(self.manifest_name)                    # the new manifest goes last
        aside = self._aside()
        _remove(aside)
        aside.mkdir()
        # logs: whether the task logs move out (next); a crash mended by putting the new set
        # back brings them back too, with their completion markers, so the rerun resumes
        write_json(aside / "_commit.json",
                   {"names": names, "logs": (self.staging / "_logs").is_dir()})
        try:
            logs = self._keep_logs()
        except Exception:
            _remove(aside)
            raise
        moved: list[tuple[Path, Path]] = []
        step = None
        try:
            for name in [self.manifest_name] + names[:-1]:  # the old manifest goes first
                step = self.output / name
                if os.path.lexists(step):
                    os.replace(step, aside / name)
                    moved.append((step, aside / name))
            for name in names:
                step = self.output / name
                os.replace(self.staging / name, step)
                moved.append((self.staging / name, step))
        except OSError as e:
            for src, dst in reversed(moved):                # back where each one was
                os.replace(dst, src)
            if logs is not None:    # with their completion markers: the rerun resumes
                os.replace(logs, self.staging / "_logs")
            _remove(aside)
            raise StageError(f"{display_path(step)}: cannot be replaced ({e.strerror or e}); "
                             f"{display_path(self.output)} is unchanged; fix this and rerun "
                             "the same command (it resumes)") from None
        # the new set is whole: what is left of the staging folder (its key, the task parts)
        # goes first, then the previous set; a crash in either is finished by the next run
        shutil.rmtree(self.staging, ignore_errors=True)
        self._drop_previous(aside)

    def _recover_files(self) -> None:
        """Mend a files_into commit that a crash interrupted between its renames: with the
        new manifest in place the new set is whole, and the previous one and what is left of
        the staging folder go; without it, each new entry and the task logs go back to the
        staging folder (the rerun resumes there) and the previous set comes back whole."""
        aside = self._aside()
        if not aside.is_dir():
            return
        if (self.output / self.manifest_name).exists() and not (
                self.staging / self.manifest_name).exists():
            # the commit was through: the rest of its staging folder is no run's to resume
            # (left there, an up-to-date rerun called it an unfinished run)
            shutil.rmtree(self.staging, ignore_errors=True)
            self._remove_old(aside)
            return
        try:
            commit = json.loads((aside / "_commit.json").read_text())
            names, logs = commit["names"], commit.get("logs")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            names, logs = [], False
        kept_logs = self._logs_home()
        if logs is True and self.staging.is_dir() and kept_logs.is_dir() and not (
                kept_logs.is_symlink() or (self.staging / "_logs").exists()):
            os.replace(kept_logs, self.staging / "_logs")  # the crashed run's, to resume
        for name in names:
            there, kept = self.output / name, aside / name
            back = self.staging / name
            if os.path.lexists(there) and self.staging.is_dir() and not os.path.lexists(back):
                os.replace(there, back)                     # a new entry, back to staging
            if os.path.lexists(kept):
                _remove(there)
                os.replace(kept, there)                     # the previous one, back
        self._remove_old(aside)


def _remove(path: Path) -> None:
    """Delete a file, a folder or a link (never what a link points to), if there."""
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    elif os.path.lexists(path):
        path.unlink()
