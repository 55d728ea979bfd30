"""Python's garbage collector while a stage sets itself up.

A stage's process makes about 130,000 objects that live as long as it does: the modules
of numpy, pyarrow, numba and datatrove, numba's typing and lowering registries, a model
built before fork. Python's collector walks all of them again at each of its full
passes, and in a stage's set-up it makes several (0.19-0.26 s of CPU in each driver at
256 MB, where it now takes 0.01-0.06 s; see docs/benchmarks.md). So a stage pauses the
collector while it reads its flags, builds what its workers share and starts its pool,
and starts it again at the end of that, right before the pool's workers are forked.

Run from the shell, it also freezes what exists at that point (Python's recipe for a
process that forks, in the documentation of `gc.freeze`): those objects are never walked
again, neither in this process nor in a forked worker, whose collections then never
write to (and so never copy) the pages it shares with its parent. A stage called in
another program's process (a test) does not freeze that program's objects.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

_PAUSED = {"on": False, "freeze": False}


def running_as(script: str) -> bool:
    """Whether this process is `python <script>` (not a caller that imported it)."""
    main = sys.modules.get("__main__")
    return Path(getattr(main, "__file__", "") or "").name == script


def pause(freeze: bool) -> None:
    """Stop collecting until resume(); freeze=True: resume() freezes what exists then."""
    if gc.isenabled():
        gc.disable()
        _PAUSED.update(on=True, freeze=freeze)


def resume() -> None:
    """The set-up is over (or the pool is about to fork): collect again. Does nothing
    when pause() did not stop the collector."""
    if _PAUSED["on"]:
        if _PAUSED["freeze"]:
            gc.freeze()
        gc.enable()
        _PAUSED.update(on=False, freeze=False)
