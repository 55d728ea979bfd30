"""numba, imported without its BLAS probe.

numba checks whether `np.dot` can call BLAS by importing scipy.linalg, which takes about
0.2-0.3 s of CPU; the check runs when numba.np.arraymath is imported, which numba does
on the first kernel a process compiles or loads from its cache. No kernel here does
linear algebra, and every process that runs kernels (each stage's driver and each
worker) pays it once, so the probe is made to fail fast: scipy is hidden while numba and
numba.np.arraymath are imported and visible again right after (a later `import scipy`
works as usual). Kernels that do use `np.dot` would get numba's loop instead of BLAS.
"""

from __future__ import annotations

import sys


def _import_numba():
    if "numba" in sys.modules or "scipy" in sys.modules:
        import numba
        return numba
    sys.modules["scipy"] = None          # `import scipy...` raises ImportError at once
    try:
        import numba
        # the probe itself runs when this module is first imported, which numba does
        # lazily, on the first kernel it compiles or loads from its cache: do it now
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy"]
    return numba


numba = _import_numba()
njit = numba.njit
