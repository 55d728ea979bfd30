"""One-line errors for bad input, and the wrapper that turns them into an exit code."""

from __future__ import annotations

import sys
from typing import Callable


class StageError(Exception):
    """A problem with the input or the configuration that the user must fix.

    Raised with a one-line message that names the file or value at fault. The stage
    wrapper prints it (no traceback) and exits with status 2.
    """


def run_stage(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> None:
    """Run a stage's main(); print StageError as one line and exit non-zero."""
    try:
        rc = main(argv)
    except StageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: partial work is kept for resume; the previous output is untouched",
              file=sys.stderr)
        sys.exit(130)
    sys.exit(int(rc or 0))
