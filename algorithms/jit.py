"""The compiled kernels: built ahead of time where `make install` could, else compiled by
numba on first use.

`@njit(...)` marks a kernel, as numba.njit does, but imports nothing: importing numba
and setting up its compiler takes about 0.33 CPU s in every process that does it, a
third of a small stage's run. A kernel's first call looks for its compiled code in two
places, in this order:

1. **Ahead of time.** `scripts/compile_kernels.py` (run by `make install`) compiles each
   module's kernels with numba's `pycc` into an extension module beside it
   (`algorithms/__pycache__/aot_<module>*.so`), for the argument types the stages use,
   with a record (`aot_<module>.json`) of what it holds and what it was built from. A call
   whose argument types (dtype, dimensions, layout, read-only) are exactly those of one
   built version runs it; a process whose calls all do so never imports numba. The
   record must match: the sources of every module of this package, numba's version and
   the CPU (a build for a CPU with AVX-512 would crash on one without). A stale, foreign
   or missing build is ignored, never trusted.
2. **Just in time.** Otherwise numba compiles the kernel (cached on disk, so this is done
   once per machine and source) -- the same Python code, the same LLVM, the same CPU.
   The first such call turns every kernel of the package into numba's dispatcher, since
   a kernel calls others by their global names.

`DATAPREP_AOT=0` turns the first way off (tests compare the two; a user can too);
`DATAPREP_AOT_TRACE=1` prints each kernel call that had to fall back to numba.

numba itself is imported without its BLAS probe: it checks whether `np.dot` can call
BLAS by importing scipy.linalg, 0.2-0.3 s of CPU. No kernel here does linear algebra, so
scipy is hidden while numba and numba.np.arraymath are imported and visible again right
after (a later `import scipy` works as usual).

The JIT kernels are cached on disk (`cache=True`), in `algorithms/__pycache__/` or, where
that cannot be written (a read-only install), in numba's user-wide cache (~/.cache/numba).
Where neither can (a service account without a home), they are cached in the temporary
folder, per user, instead.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

PACKAGE = Path(__file__).resolve().parent
AOT_DIR = PACKAGE / "__pycache__"
AOT_VERSION = 1


# --------------------------------------------------------------------------------------
# numba, imported only when a kernel must be compiled
# --------------------------------------------------------------------------------------

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
    if numba.config.CACHE_DIR or _writable(PACKAGE / "__pycache__"):
        return
    from numba.misc.appdirs import AppDirs

    if _writable(Path(AppDirs(appname="numba", appauthor=False).user_cache_dir)):
        return
    folder = Path(tempfile.gettempdir()) / f"numba-cache-{os.getuid()}"
    if _writable(folder):
        numba.config.CACHE_DIR = str(folder)
        os.environ["NUMBA_CACHE_DIR"] = str(folder)   # for the processes this one starts


_NUMBA: list = []
_LOCK = threading.RLock()


def load_numba():
    """numba, imported (once) as described above."""
    with _LOCK:
        if not _NUMBA:
            numba = _import_numba()
            _cache_where_writable(numba)
            _NUMBA.append(numba)
        return _NUMBA[0]


def prepare_for_fork() -> None:
    """Before a stage forks workers that run kernels: set numba's compiler up once here
    (0.5 s a process) so that the workers inherit it -- unless every module's kernels
    were built ahead of time, and no worker will need numba at all."""
    if aot_everywhere():
        return
    load_numba()
    from numba.core import registry

    registry.cpu_target.target_context.refresh()


def __getattr__(name: str):
    # `from algorithms.jit import numba`: numba itself, imported on that first use
    if name == "numba":
        return load_numba()
    raise AttributeError(name)


# --------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------

_KERNELS: list["Kernel"] = []        # every kernel made before the switch to numba
_JITTED: list = []                   # [True] once every kernel is numba's dispatcher


class Kernel:
    """A function to compile. Calling it runs its ahead-of-time build when one fits the
    arguments, else numba's compiled version; any other attribute is the numba
    dispatcher's (`py_func` is the Python code)."""

    def __init__(self, fn, options: dict):
        self.py_func, self.options = fn, options
        self._aot: dict | None = None
        self._dispatcher = None

    def built(self, args):
        """The ahead-of-time build for exactly these arguments' types, or None."""
        if self._aot is None:
            self._aot = _aot_versions(self)
        return self._aot.get(arg_key(args)) if self._aot else None

    def __call__(self, *args):
        fn = self.built(args)
        if fn is not None:
            return fn(*args)
        if self._dispatcher is None and os.environ.get("DATAPREP_AOT_TRACE"):
            print(f"{self!r}: no ahead-of-time build for {arg_key(args)}; compiling with numba",
                  file=sys.stderr)
        return self.dispatcher()(*args)

    def dispatcher(self):
        if self._dispatcher is None:
            use_numba()
        return self._dispatcher

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_aot", "_dispatcher", "py_func", "options"):
            raise AttributeError(name)
        return getattr(self.dispatcher(), name)

    def __repr__(self) -> str:
        return f"<kernel {self.py_func.__module__}.{self.py_func.__qualname__}>"


def compiled_entry(kernel, args):
    """The compiled code of a kernel (already called once with these arguments) for
    exactly these argument types, to call many times without resolving them again:
    resolving them takes ~4 us for namedtuples of arrays, as long as predicting 200
    characters. The ahead-of-time build, or numba's entry point (the dispatcher itself
    if numba's internals differ)."""
    if isinstance(kernel, Kernel):
        fn = kernel.built(args)
        if fn is not None:
            return fn
        kernel = kernel.dispatcher()
    numba = load_numba()
    try:
        return kernel.overloads[tuple(numba.typeof(a) for a in args)].entry_point
    except (AttributeError, KeyError, TypeError):
        return kernel


class _Prefetch:
    """Stands for the `prefetch` intrinsic (below) until numba is loaded; only compiled
    code calls it, and the ahead-of-time builds hold it compiled."""


def njit(fn=None, **options):
    """@njit or @njit(cache=True, ...): numba.njit's options, applied on first use."""
    def mark(f):
        if _JITTED:
            return load_numba().njit(**options)(f)
        k = Kernel(f, options)
        _KERNELS.append(k)
        return k
    return mark(fn) if fn is not None else mark


def use_numba() -> None:
    """Every kernel of the package becomes numba's dispatcher, in every module that holds
    it (a kernel calls the others by their global names), and `prefetch` the intrinsic."""
    with _LOCK:
        if _JITTED:
            return
        numba = load_numba()
        real = {}
        for k in _KERNELS:
            k._dispatcher = numba.njit(**k.options)(k.py_func)
            real[id(k)] = k._dispatcher
        intrinsic = _prefetch_intrinsic()
        for name, module in list(sys.modules.items()):
            if module is None or not (name == __name__.rpartition(".")[0]
                                      or name.startswith(__name__.rpartition(".")[0] + ".")):
                continue
            g = vars(module)
            for key, value in list(g.items()):
                if isinstance(value, Kernel) and id(value) in real:
                    g[key] = real[id(value)]
                elif isinstance(value, _Prefetch):
                    g[key] = intrinsic
        _JITTED.append(True)


prefetch = _Prefetch()


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


# --------------------------------------------------------------------------------------
# argument types, as numba tells them apart
# --------------------------------------------------------------------------------------

def arg_key(args) -> tuple:
    """What numba's typeof tells apart in these arguments, as a tuple: an array's dtype,
    dimensions, layout (C, F or A) and read-only flag; a scalar's dtype (a Python int is
    int64, a float float64, a bool bool); a tuple's items (and a namedtuple's class)."""
    return tuple(_value_key(a) for a in args)


def _value_key(v):
    if isinstance(v, np.ndarray):
        f = v.flags
        layout = "C" if f.c_contiguous else "F" if f.f_contiguous else "A"
        return ("a", v.dtype.str, v.ndim, layout, not f.writeable)
    if isinstance(v, (bool, np.bool_)):
        return ("s", "|b1")
    if isinstance(v, int):
        return ("s", "<i8" if -(1 << 63) <= v < (1 << 63) else "<u8")
    if isinstance(v, float):
        return ("s", "<f8")
    if isinstance(v, np.generic):
        return ("s", v.dtype.str)
    if isinstance(v, tuple):
        return ("t", type(v).__name__ if hasattr(v, "_fields") else "") + \
            tuple(_value_key(x) for x in v)
    return ("?", type(v).__name__)


def type_key(t):
    """_value_key's answer for a value of numba type t (None: one it cannot tell)."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    if isinstance(t, types.Array):
        return ("a", as_dtype(t.dtype).str, t.ndim, t.layout, not t.mutable)
    if isinstance(t, (types.Integer, types.Float, types.Boolean)):
        return ("s", as_dtype(t).str)
    if isinstance(t, (types.BaseNamedTuple, types.BaseTuple)):
        name = t.instance_class.__name__ if isinstance(t, types.BaseNamedTuple) else ""
        items = [type_key(x) for x in t]
        return None if None in items else ("t", name) + tuple(items)
    return None


def _tuples(x):
    return tuple(_tuples(i) for i in x) if isinstance(x, list) else x


# --------------------------------------------------------------------------------------
# the ahead-of-time builds
# --------------------------------------------------------------------------------------

_SOURCES: list[dict] = []
_SOURCES_LOCK = threading.Lock()


def _sources() -> dict[str, bytes]:
    """{file name: bytes} of every module of this package, read once per process. Threads
    whose first kernel calls come at once (the tokenizer's counting threads) wait for the
    one that reads them: a half-read dictionary would give another digest."""
    if not _SOURCES:
        with _SOURCES_LOCK:
            if not _SOURCES:
                _SOURCES.append({f.name: f.read_bytes() for f in sorted(PACKAGE.glob("*.py"))})
    return _SOURCES[0]


def sources_digest() -> str:
    """sha256 of every module of this package: a kernel calls others, in any module."""
    h = hashlib.sha256()
    for name, data in _sources().items():
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def cpu_identity() -> str:
    """The CPU a build is for: its model and feature flags (/proc/cpuinfo), else LLVM's
    name and features for the host (0.06 s to ask)."""
    try:
        fields = {}
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break                      # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        ident = [fields.get(k, "") for k in ("vendor_id", "model name", "flags", "Features",
                                               "CPU implementer", "CPU part")]
        if any(ident):
            return hashlib.sha256("\n".join(ident).encode()).hexdigest()
    except OSError:
        pass
    import llvmlite.binding as ll
    ident = ll.get_host_cpu_name() + "\n" + ll.get_host_cpu_features().flatten()
    return hashlib.sha256(ident.encode()).hexdigest()


def build_record(module: str) -> Path:
    return AOT_DIR / f"aot_{module}.json"


_RECORD_CHECK: dict = {}


def _current() -> dict:
    """What a usable build must have been built from, here and now."""
    if not _RECORD_CHECK:
        import importlib.metadata as md

        try:
            numba_version = md.version("numba")
        except md.PackageNotFoundError:
            numba_version = ""
        _RECORD_CHECK.update(version=AOT_VERSION, sources=sources_digest(), cpu=cpu_identity(),
                             numba=numba_version, python=sys.implementation.cache_tag)
    return _RECORD_CHECK


def aot_usable(record: dict) -> bool:
    """Whether a build's record matches these sources, numba, Python and CPU (and the
    ahead-of-time builds are not turned off, and numba is not told to compile for
    another CPU)."""
    if os.environ.get("DATAPREP_AOT", "1") == "0":
        return False
    if os.environ.get("NUMBA_CPU_NAME") or os.environ.get("NUMBA_CPU_FEATURES") is not None:
        return False
    now = _current()
    return all(record.get(k) == v for k, v in now.items())


_LOADED: dict = {}


def _aot_module(module: str) -> tuple[object, dict] | None:
    """(the extension module, its record) of `module`'s usable build, or None."""
    if module in _LOADED:
        return _LOADED[module]
    got = None
    try:
        record = json.loads(build_record(module).read_text(encoding="utf-8"))
        if not aot_usable(record):
            pass
        elif not record["file"]:
            got = (None, record)                   # a module none of whose kernels ran
        else:
            path = AOT_DIR / record["file"]
            spec = importlib.util.spec_from_file_location(record["name"], path)
            ext = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(ext)
            got = (ext, record)
    except (OSError, ValueError, KeyError, ImportError):
        got = None
    _LOADED[module] = got
    return got


def _aot_versions(k: Kernel) -> dict:
    """{argument key: compiled function} of kernel k's ahead-of-time build, or {} (also
    for a kernel that is not its module's own global, such as a test's fresh copy)."""
    fn = k.py_func
    module = sys.modules.get(fn.__module__)
    if module is None or getattr(module, fn.__name__, None) is not k:
        return {}
    got = _aot_module(fn.__module__.rpartition(".")[2])
    if got is None:
        return {}
    ext, record = got
    return {_tuples(key): getattr(ext, name)
            for name, key in record["exports"].get(fn.__name__, [])}


def kernel_modules() -> list[str]:
    """The modules of this package that mark kernels, found in their sources (none is
    imported): the ones scripts/compile_kernels.py builds."""
    return sorted(name[:-3] for name, data in _sources().items()
                  if name != "jit.py" and (b"@njit" in data or b"njit(" in data))


def aot_everywhere() -> bool:
    """Whether every module of the package that has kernels has a usable build."""
    modules = {k.py_func.__module__.rpartition(".")[2] for k in _KERNELS}
    modules |= set(kernel_modules())   # and the modules not imported here
    return not _JITTED and all(_aot_module(m) is not None for m in sorted(modules))
