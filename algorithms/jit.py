"""numba, imported without its BLAS probe.

numba checks whether `np.dot` can call BLAS by importing scipy.linalg, which takes about
0.2-0.3 s of CPU; the check runs when numba.np.arraymath is imported, which numba does
on the first kernel a process compiles or loads from its cache. No kernel here does
linear algebra, and every process that runs kernels (each stage's driver and each
worker) pays it once, so the probe is made to fail fast: scipy is hidden while numba and
numba.np.arraymath are imported and visible again right after (a later `import scipy`
works as usual). Kernels that do use `np.dot` would get numba's loop instead of BLAS.

The kernels are cached on disk (`cache=True`), in `algorithms/__pycache__/` or, where
that cannot be written (a read-only install), in numba's user-wide cache (~/.cache/numba).
Where neither can (a service account without a home), numba would refuse to load any
kernel; they are then cached in the temporary folder, per user, instead.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
from pathlib import Path


def _import_numba():
    if "numba" in sys.modules or "scipy" in sys.modules:
        import numba
        return numba
    sys.modules["scipy"] = None          # `import scipy...` raises ImportError at once
    # numba's import makes some 50,000 objects that live as long as the process and no
    # garbage: Python's collector would walk them several times meanwhile (0.07 s)
    collecting = gc.isenabled()
    gc.disable()
    try:
        import numba
        # the probe itself runs when this module is first imported, which numba does
        # lazily, on the first kernel it compiles or loads from its cache: do it now
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy"]
        if collecting:
            gc.enable()
    return numba


def _writable(folder: Path) -> bool:
    """numba's own test of a cache folder: it can be made, and a file written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def _cache_where_writable(numba) -> None:
    if numba.config.CACHE_DIR or _writable(Path(__file__).parent / "__pycache__"):
        return
    from numba.misc.appdirs import AppDirs

    if _writable(Path(AppDirs(appname="numba", appauthor=False).user_cache_dir)):
        return
    folder = Path(tempfile.gettempdir()) / f"numba-cache-{os.getuid()}"
    if _writable(folder):
        numba.config.CACHE_DIR = str(folder)
        os.environ["NUMBA_CACHE_DIR"] = str(folder)   # for the processes this one starts


numba = _import_numba()
_cache_where_writable(numba)
njit = numba.njit


def _prefetch_intrinsic():
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, idx):
        """prefetch(arr, i): ask the CPU to bring row i of arr (item i of a 1-D array)
        into its cache, without waiting for it (LLVM's llvm.prefetch: read, keep in all
        levels). A loop that visits rows all over a large array prefetches the row it
        will visit a few steps ahead, so the memory's latency overlaps with work."""
        if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args
            ary = context.make_array(aryty)(context, builder, args[0])
            i = context.cast(builder, args[1], idxty, types.intp)
            zero = context.get_constant(types.intp, 0)
            ptr = cgutils.get_item_pointer2(
                context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
                cgutils.unpack_tuple(builder, ary.strides), aryty.layout,
                [i] + [zero] * (aryty.ndim - 1), wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                "llvm.prefetch.p0")
            builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(arr, idx), codegen

    return prefetch


prefetch = _prefetch_intrinsic()
