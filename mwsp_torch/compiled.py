"""The CPU kernels behind one seam: compiled ahead of time, so that a process's first fit does not wait for numba.

Every module with numba CPU kernels gets them here, and only here: :func:`kernel` declares a
numba function as an entry point and returns what to call; :func:`extension` builds or loads
the compiled extension; :func:`numba_ready` runs numba's per-process set-up (for the JIT
path and the kernels outside the build).

Why: every numba function, even one loaded from numba's disk cache, makes the first call
in a process pay numba's set-up (its typing and target registries) and a load of each
function's cached code: a few tenths of a second, on the issue's check (400 NCI1 graphs,
d=2, k=0) a third of a process's first fit (``benchmarks/README.md``). The same functions
compiled once into an ordinary CPython extension load in about a millisecond and need none
of numba at run time.

What: each module declares its own entry points (:func:`kernel`: a numba function, its
argument codes and return type) and calls the :class:`Kernel` it gets back. numba's own
ahead-of-time compiler (:mod:`numba.pycc`) compiles the very functions the JIT path runs
(their ``py_func``), so there is one source of truth. ``numba.pycc`` is pending deprecation
in numba, and the pinned range of numba keeps it; should it go, or should a build fail (it
needs a C compiler), the kernels fall back to numba's JIT with a warning, and give the same
values. The extension:

- is built on first use, in a child process (``python -m mwsp_torch.compiled``, which imports
  the package, so that every module registers its entry points) that starts from an empty
  numba cache (so no stale cached function is linked in) and without the caller's
  ``NUMBA_*`` settings (so a key names one build), under a file lock that the child holds
  too (a build orphaned by a killed caller is not doubled), into ``$MWSP_KERNEL_DIR``
  (default: one folder per user and machine, ``$XDG_CACHE_HOME/mwsp_torch/kernels/`` or
  ``~/.cache/mwsp_torch/kernels/``, then a folder per Python and numba version; never the
  ``$MWSP_CACHE_DIR`` of distance matrices and datasets, so a new cache folder builds
  nothing); it takes about a minute, once per machine and version of the sources. The child runs in the folder
  that holds this package and refuses to build unless it imported this very package with
  the same key: run from a folder holding another copy of ``mwsp_torch`` (a worktree),
  ``-m`` would otherwise compile that copy's sources under this one's name;
- is named by a hash of the sources of :data:`SOURCE_MODULES` (each with its name and
  length), numba's, llvmlite's, NumPy's (the extension is built against its C interface)
  and Python's versions and the host CPU (it is compiled for it), so an edit, another
  environment or another machine builds a new one. An entry point's module must be one
  of them (:func:`kernel` refuses others), so a kernel's edit always changes the key;
- a failed build leaves a ``.failed`` file beside the extension's name, with the error, so
  later processes in ``auto`` mode fall back at once instead of retrying a build that may
  take a minute to fail; ``MWSP_KERNELS=aot`` always retries, and deleting the file does.
- releases the GIL in every entry point, so the parallel loops (numba ``prange`` in the
  JIT path) run as one call per thread of a ``ThreadPoolExecutor``, over the same chunks.

``MWSP_KERNELS=jit`` turns it off (numba's JIT only); ``MWSP_KERNELS=aot`` makes a failed
build an error rather than a warning. Both paths are tested to give equal values
(``tests/test_compiled.py``).

One difference in the code: numba lowers ``a[i]`` for a signed ``i`` with a wraparound
(``i + len(a)`` where ``i < 0``, as Python does), and LLVM can drop it only where it can
prove ``i >= 0``, not for an index loaded from another array (a parent, an arc, a row ID),
which is most of the exact solver's. The build lowers the kernels' own indexing without it
(:func:`_index_without_wraparound`), which made the exact engine about 1.1x faster with
equal matrices (``benchmarks/README.md``). That is sound because the kernels never index
with a negative number: ``tests/test_compiled.py`` runs them with that lowering and
``NUMBA_BOUNDSCHECK=1``, under which a negative index is an ``IndexError``. numba's own
functions keep their lowering.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from importlib.machinery import ExtensionFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

import numpy as np
from numba import njit

__all__ = [
    "ENTRIES",
    "KERNELS_ENV",
    "KERNEL_DIR_ENV",
    "MODES",
    "OWN_FUNCTION_PREFIX",
    "SOURCE_MODULES",
    "Kernel",
    "build_command",
    "build_key",
    "conforms",
    "extension",
    "extension_path",
    "failed_marker",
    "kernel",
    "kernel_dir",
    "mode",
    "numba_ready",
    "source_file",
]

KERNELS_ENV = "MWSP_KERNELS"
KERNEL_DIR_ENV = "MWSP_KERNEL_DIR"
MODES = ("auto", "aot", "jit")

#: The modules (relative to this package) whose numba functions and intrinsics the entry
#: points compile, inline or call: their sources name the build.
SOURCE_MODULES = (
    "_interning", "compiled", "labels", "paths", "transport._borrow", "transport._simd", "transport._simplex",
    "transport.costs", "transport.exact", "transport.measures", "trees",
)  # fmt: skip

# Argument codes: C-contiguous, writeable arrays of a dtype and rank, or int64 / boolean scalars.
_ARRAYS = {"i1": (np.int64, 1), "i2": (np.int64, 2), "f1": (np.float64, 1), "f2": (np.float64, 2)}
_NUMBA_TYPES = {"i1": "int64[::1]", "i2": "int64[:, ::1]", "f1": "float64[::1]", "f2": "float64[:, ::1]"}
_NUMBA_TYPES.update(i="int64", b="boolean")

#: The registered entry points, name -> :class:`Kernel` (filled as the modules that
#: declare them are imported; importing ``mwsp_torch`` imports them all).
ENTRIES: dict[str, Kernel] = {}

_lock = threading.Lock()
_state: dict = {"tried": False, "module": None}


def _fresh_lock_after_fork() -> None:
    """A child forked while another thread held ``_lock`` (in a build) would wait on it for
    ever: it gets a lock of its own, and decides afresh if the parent had not yet."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_after_fork)


def mode() -> str:
    """``$MWSP_KERNELS``: ``"auto"`` (default: compiled ahead of time, numba's JIT if that
    fails, with a warning), ``"aot"`` (a failure is an error) or ``"jit"`` (never built)."""
    value = os.environ.get(KERNELS_ENV, "auto")
    if value not in MODES:
        raise ValueError(f"{KERNELS_ENV}={value!r}: expected one of {MODES}")
    return value


def kernel_dir() -> Path:
    """``$MWSP_KERNEL_DIR``, else ``mwsp_torch/kernels/cpXY-numbaV/`` in the user's cache folder
    (``$XDG_CACHE_HOME``, default ``~/.cache``): one per user and machine, whatever
    ``$MWSP_CACHE_DIR`` is (the extension's name carries the rest of its key: :func:`build_key`)."""
    value = os.environ.get(KERNEL_DIR_ENV)
    if value:
        return Path(value).expanduser()
    from importlib.metadata import version

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    versions = f"cp{sys.version_info.major}{sys.version_info.minor}-numba{version('numba')}"
    return base / "mwsp_torch" / "kernels" / versions


def build_key() -> str:
    """What the extension is built from: the kernels' sources, the compilers', NumPy's and
    Python's versions, and the host CPU (its name and features)."""
    import llvmlite
    import llvmlite.binding as llvm
    import numba

    package = Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for name in SOURCE_MODULES:
        source = (package / source_file(name)).read_bytes()
        digest.update(f"{name} {len(source)}\n".encode())  # a line moved between files changes the key
        digest.update(source)
    for part in (numba.__version__, llvmlite.__version__, np.__version__, sys.version, sysconfig.get_platform()):
        digest.update(part.encode() + b"\n")
    digest.update(llvm.get_host_cpu_name().encode())
    digest.update(llvm.get_host_cpu_features().flatten().encode())
    return digest.hexdigest()[:16]


def source_file(module_name: str) -> Path:
    """The file of the module ``module_name`` (``"transport.exact"``), relative to this package."""
    return Path(*module_name.split(".")).with_suffix(".py")


def extension_path(key: str | None = None) -> Path:
    """Where the extension for ``key`` (default: this checkout on this machine) lives."""
    key = build_key() if key is None else key
    return kernel_dir() / f"mwsp_kernels_{key}{sysconfig.get_config_var('EXT_SUFFIX')}"


def extension():
    """The compiled extension, built first if need be; ``None`` where the JIT path is to run
    (``MWSP_KERNELS=jit``, or a failed build in ``auto`` mode, which warns once a process)."""
    if _state["tried"]:
        return _state["module"]
    with _lock:
        if not _state["tried"]:
            chosen = mode()
            if chosen != "jit":
                try:
                    _state["module"] = _load(_built(extension_path(), retry_failed=chosen == "aot"))
                except Exception as err:
                    if chosen == "aot":
                        raise RuntimeError(f"the ahead-of-time kernels could not be built or loaded: {err}") from err
                    warnings.warn(
                        f"mwsp_torch: the ahead-of-time kernels could not be built or loaded ({err}); "
                        "using numba's JIT, which gives the same values but makes each process's first call "
                        f"slower (set {KERNELS_ENV}=jit to skip the attempt)",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            _state["tried"] = True
    return _state["module"]


def _built(path: Path, retry_failed: bool = True) -> Path:
    """``path``, built first (in a child process, under a file lock) if it is not there.

    Unless ``retry_failed``, an earlier failed build (its ``.failed`` file) is an error at
    once, without another attempt."""
    if path.is_file():
        return path
    failed = failed_marker(path)
    if not retry_failed and failed.is_file():
        raise RuntimeError(f"an earlier build failed ({failed.read_text().strip()}); delete {failed} to try again")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "a") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: parallel first builds may both build; the rename is atomic
            fcntl = None
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"mwsp_torch: waiting for another process's build of its CPU kernels in {path.parent}",
                      file=sys.stderr, flush=True)  # fmt: skip
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            # Under the lock no build runs (its child holds the lock too), so scratch folders
            # left here were a killed build's.
            stale = [*path.parent.glob(".numba-*"), *path.parent.glob(".build-*")] if fcntl is not None else []
            for folder in stale:
                shutil.rmtree(folder, ignore_errors=True)
            if not path.is_file():
                print(
                    f"mwsp_torch: compiling its CPU kernels once for this machine into {path.parent} (about a minute)",
                    file=sys.stderr,
                    flush=True,
                )
                # numba's disk cache is bypassed (an empty one): numba checks a cached function
                # against its own file only, so one inlining an edited module would be stale.
                with tempfile.TemporaryDirectory(dir=path.parent, prefix=".numba-") as numba_cache:
                    argv, cwd, env = build_command(path, numba_cache)
                    # The child inherits the locked file: the lock lasts as long as either holds it.
                    lock_fds = (handle.fileno(),) if fcntl is not None else ()
                    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, pass_fds=lock_fds)
                if done.returncode != 0 or not path.is_file():
                    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
                    error = f"the build exited with status {done.returncode}: {' | '.join(tail)}"
                    try:
                        failed.write_text(error + "\n")
                    except OSError:  # the error itself is what the caller needs to see
                        pass
                    raise RuntimeError(error)
                failed.unlink(missing_ok=True)
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)
    return path


def failed_marker(path: Path) -> Path:
    """The file that records a failed build of the extension ``path``."""
    return path.with_name(path.name + ".failed")


def build_command(path: Path, numba_cache: str) -> tuple[list[str], str, dict]:
    """The build child's command, folder and environment: ``python -m mwsp_torch.compiled PATH
    PACKAGE``, run in the folder that holds this package (``-m`` imports from there first),
    with numba's cache in ``numba_cache`` and none of the caller's other ``NUMBA_*``
    settings (``NUMBA_OPT``, ``NUMBA_BOUNDSCHECK``, ...: the key does not name them)."""
    package = Path(__file__).resolve().parent
    env = {name: value for name, value in os.environ.items() if not name.startswith("NUMBA_")}
    env.update({KERNELS_ENV: "jit", "NUMBA_CACHE_DIR": numba_cache})
    return [sys.executable, "-m", "mwsp_torch.compiled", str(path), str(package)], str(package.parent), env


def _load(path: Path):
    name = path.name.split(".")[0]
    loader = ExtensionFileLoader(name, str(path))
    extension = module_from_spec(spec_from_loader(name, loader))
    loader.exec_module(extension)
    missing = sorted(set(ENTRIES) - set(dir(extension)))
    if missing:
        raise RuntimeError(f"{path} lacks the entry points {missing}")
    return extension


def conforms(codes: str, args: tuple) -> bool:
    """Whether ``args`` are what the compiled entry point takes: each array C-contiguous,
    writeable, of the signature's dtype and rank (anything else runs on the JIT path, which
    takes any layout; the extension would refuse or misread it)."""
    for code, arg in zip(codes.split(), args, strict=True):
        spec = _ARRAYS.get(code)
        if spec is None:
            continue
        if not (
            isinstance(arg, np.ndarray)
            and arg.dtype == spec[0]
            and arg.ndim == spec[1]
            and arg.flags.c_contiguous
            and arg.flags.writeable
        ):
            return False
    return True


class Kernel:
    """One entry point: the compiled extension's function where it is built and the
    arguments conform, else the numba function (after numba's set-up).

    Attributes:
        name: the extension's name for it.
        jit_function: the numba function (its ``py_func`` is what the build compiles).
        codes: its argument codes, space-separated: ``i1``, ``i2``, ``f1``, ``f2`` (int64 or
            float64 arrays of rank 1 or 2), ``i`` (int64), ``b`` (boolean).
        returns: its numba return type (``"void"``, ``"float64[::1]"``, ``"Tuple((...))"``).
        module: the module that declares it, relative to this package (``"transport.exact"``).
    """

    def __init__(self, name: str, jit_function, codes: str, returns: str) -> None:
        unknown = sorted(set(codes.split()) - set(_NUMBA_TYPES))
        if unknown:
            raise ValueError(f"entry point {name!r}: unknown argument codes {unknown}")
        self.name = name
        self.jit_function = jit_function
        self.codes = codes
        self.returns = returns
        self.module = jit_function.py_func.__module__.removeprefix(f"{__package__}.")

    def __call__(self, *args):
        built = extension()
        if built is not None and conforms(self.codes, args):
            return getattr(built, self.name)(*args)
        numba_ready()
        return self.jit_function(*args)


def kernel(name: str, codes: str, returns: str):
    """Declare the numba function it is applied to as the extension's entry point ``name``
    (arguments :attr:`Kernel.codes`, return type ``returns``); returns its :class:`Kernel`::

        _row_squares_kernel = kernel("row_squares", "i1 f1", "float64[::1]")(row_squares)

    The function's module must be one of :data:`SOURCE_MODULES`, so that an edit of it
    changes the build's key; a name is declared once (a module imported again may declare
    it again with the same function)."""

    def register(jit_function) -> Kernel:
        declared = Kernel(name, jit_function, codes, returns)
        if declared.module not in SOURCE_MODULES:
            raise ValueError(f"entry point {name!r} is declared in {declared.module}, which is not in SOURCE_MODULES")
        known = ENTRIES.get(name)
        if known is not None and (known.module, known.jit_function.__qualname__) != (
            declared.module,
            jit_function.__qualname__,
        ):
            raise ValueError(f"entry point {name!r} is declared twice: in {known.module} and in {declared.module}")
        ENTRIES[name] = declared
        return declared

    return register


# numba's once-per-process set-up, run with Python's cyclic garbage collector paused.
#
# The first call of any numba function in a process, even one loaded from the disk cache,
# fills numba's typing and target registries: it imports about 70 of numba's modules and
# makes tens of thousands of long-lived Python objects. In a process that has imported
# torch, PyG, scikit-learn and POT, that burst of allocations sets off a full (generation
# 2) collection, which walks every tracked object of the process, however few of them are
# garbage: about a fifth of a first fit of 400 NCI1 graphs (``docs/performance.md``).
# :func:`numba_ready` triggers the set-up through a trivial cached function with the
# collector paused and restores the collector at once: the registries hold no garbage, and
# cycles dropped meanwhile wait for the next collection. The entry points that run numba
# code call it first; after the first call it costs one check of a flag.

_ready = False
_setup_lock = threading.Lock()
#: Whether the collector was on when the pause began; ``None`` outside the pause.
_paused_from: bool | None = None


@njit(cache=True)
def _first_dispatch() -> int:
    return 0


def numba_ready() -> None:
    """Run numba's per-process set-up once, with the cyclic garbage collector paused."""
    global _ready, _paused_from
    if _ready:
        return
    with _setup_lock:
        if _ready:
            return
        _paused_from = gc.isenabled()
        gc.disable()
        try:
            _first_dispatch()
        finally:
            if _paused_from:
                gc.enable()
            _paused_from = None
        _ready = True


def _after_fork_in_child() -> None:
    """A child forked by another thread during the pause gets a free lock and its collector back."""
    global _setup_lock, _paused_from
    _setup_lock = threading.Lock()
    if _paused_from:
        gc.enable()
    _paused_from = None


os.register_at_fork(after_in_child=_after_fork_in_child)


#: The start of the LLVM names numba gives this package's functions (``_ZN`` + length + name).
OWN_FUNCTION_PREFIX = "_ZN10mwsp_torch"


def _index_without_wraparound() -> None:
    """Make numba lower an integer index in this package's functions as it is, without the
    wraparound of a negative one (module docstring). Only for a process of its own (the
    build's child; the tests and ``benchmarks/solver_instructions.py`` run it in child
    processes to check or count the built code): it replaces a function of numba's for the
    rest of the process."""
    import numba.np.arrayobj as arrayobj
    from numba.core import types

    wrapping = arrayobj.fix_integer_index

    def fix_integer_index(context, builder, idxty, idx, size):
        if idxty.signed and builder.function.name.startswith(OWN_FUNCTION_PREFIX):
            return context.cast(builder, idx, idxty, types.intp)
        return wrapping(context, builder, idxty, idx, size)

    arrayobj.fix_integer_index = fix_integer_index


def _build(path: Path) -> None:
    """Compile every registered entry point into the extension ``path`` (run in a child
    process that imported the package: it changes numba's flags and index lowering for the
    compilation)."""
    warnings.simplefilter("ignore")  # numba.pycc's pending deprecation
    _index_without_wraparound()
    import numba.pycc.compiler as pycc_compiler
    from numba.core.compiler import Flags
    from numba.pycc import CC

    class _GilFreeFlags(Flags):
        """pycc's entry points keep the GIL by default; these release it (as ``nogil=True``)."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.release_gil = True

    pycc_compiler.Flags = _GilFreeFlags
    name = path.name.split(".")[0]
    cc = CC(name)
    cc.target_cpu = "host"  # the key names the CPU
    cc.verbose = False
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as scratch:
        cc.output_dir = scratch
        for declared in ENTRIES.values():
            arguments = ", ".join(_NUMBA_TYPES[code] for code in declared.codes.split())
            cc.export(declared.name, f"{declared.returns}({arguments})")(declared.jit_function.py_func)
        cc.compile()
        os.replace(Path(scratch) / cc.output_file, path)  # atomic: a killed build leaves no half file


def _check_identity(path: Path, package: str) -> None:
    """Refuse to build unless this process imported the caller's package (``package``) and
    its sources give the key ``path`` is named by."""
    here = Path(__file__).resolve().parent
    if here != Path(package).resolve():
        raise SystemExit(f"mwsp_torch.compiled: this build imported {here}, not the caller's package {package}")
    if extension_path().name != path.name:
        raise SystemExit(f"mwsp_torch.compiled: the sources here give {extension_path().name}, not {path.name}")


if __name__ == "__main__":
    # ``-m`` runs this file as ``__main__``, beside the package's own ``mwsp_torch.compiled``,
    # where the modules that declare entry points (all among SOURCE_MODULES: ``entry`` refuses
    # others), imported here by name, have registered them; so does ``import mwsp_torch``, and the
    # build does not depend on what the package's ``__init__`` imports.
    import importlib

    import mwsp_torch
    from mwsp_torch import compiled as registry

    for _name in registry.SOURCE_MODULES:
        importlib.import_module(f"mwsp_torch.{_name}")

    registry._check_identity(Path(sys.argv[1]), sys.argv[2])
    if not registry.ENTRIES:
        raise SystemExit(f"mwsp_torch.compiled: importing {mwsp_torch.__file__} registered no entry points")
    registry._build(Path(sys.argv[1]))
