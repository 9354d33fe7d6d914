"""The ahead-of-time compiled kernels (:mod:`mwsp_torch.compiled`) against numba's JIT path.

CI sets ``MWSP_KERNELS=aot``, so there a failed build fails the run instead of falling back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mwsp_torch import MWSP, compiled, load_tudataset
from mwsp_torch.transport import exact as exact_engine
from mwsp_torch.transport import exact_distances, upper_pairs


class _Recording:
    """The extension, with each call's entry point recorded (and the thread index and count
    of the table's entry points; the pairs and the chunk index and count of the pairs')."""

    THREADED = ("table_part", "mirror_part")

    def __init__(self, extension) -> None:
        self.extension = extension
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        function = getattr(self.extension, name)

        def call(*args):
            if name == "pairs_chunks":  # how many pairs, and the chunk's first and step
                self.calls.append((name, len(args[0]), *args[-2:]))
            else:
                self.calls.append((name, *args[-2:]) if name in self.THREADED else (name,))
            return function(*args)

        return call

    def names(self) -> set[str]:
        return {call[0] for call in self.calls}


@pytest.fixture
def extension():
    built = compiled.extension()
    assert built is not None, "the ahead-of-time kernels are not built here (MWSP_KERNELS=jit?)"
    return built


@pytest.fixture
def use(monkeypatch):
    """``use(extension_or_None)``: the kernels this process takes from now on."""

    def choose(module):
        monkeypatch.setitem(compiled._state, "tried", True)
        monkeypatch.setitem(compiled._state, "module", module)

    return choose


def _graphs(root, cache_dir, name, count):
    graphs, _ = load_tudataset(name, root=root, cache_dir=cache_dir)
    return graphs[:count]


@pytest.mark.parametrize(
    "name, count, d, k, paths",
    [("NCI1", 120, 2, 0, "split"), ("ENZYMES", 60, 3, 1, "split"), ("PTC_MR", 60, 2, 2, "all")],
)
def test_fit_equals_the_jit_path_bit_for_bit(fixture_root, cache_dir, extension, use, name, count, d, k, paths):
    graphs = _graphs(fixture_root, cache_dir, name, count)
    recording = _Recording(extension)
    use(recording)
    built = MWSP(d=d, k=k, paths=paths, n_jobs=2).fit(graphs)
    expected = {"label_ids", "path_features", "intern_sparse_rows", "pairs_chunks", "table_part", "mirror_part"}
    assert expected | ({"tree_ids"} if k > 0 else set()) <= recording.names()
    # The table's entry points ran once per thread, each thread on its own share; the pairs'
    # once per run of PAIR_CHUNK consecutive pairs (handed to whichever thread was free),
    # each run as one whole chunk, all of the fit's pairs once.
    for name_ in ("table_part", "mirror_part"):
        shares = [call[1:] for call in recording.calls if call[0] == name_]
        assert len(shares) >= 2 and sorted(shares) == sorted([(0, 2), (1, 2)] * (len(shares) // 2)), name_
    chunks = sorted(call[1:] for call in recording.calls if call[0] == "pairs_chunks")
    num_pairs = built.timings_["pairs"]  # between distinct measures
    run = min(exact_engine.PAIR_CHUNK, -(-num_pairs // (2 * exact_engine.RUNS_PER_THREAD)))
    whole, part = divmod(num_pairs, run)
    assert whole >= 2 and chunks == sorted([(run, 0, 1)] * whole + [(part, 0, 1)] * (part > 0))
    use(None)
    jit = MWSP(d=d, k=k, paths=paths, n_jobs=2).fit(graphs)
    np.testing.assert_array_equal(built.distances_, jit.distances_)
    assert (built.features_ != jit.features_).nnz == 0
    # transform too (frozen vocabularies, graphs outside the fit)
    new = _graphs(fixture_root, cache_dir, name, count + 20)[count:]
    use(recording)
    out = built.transform(new)
    use(None)
    np.testing.assert_array_equal(out, jit.transform(new))


@pytest.mark.parametrize(
    "name, root",
    # DD's graph 5 alone has 4,152 nodes (300 KB of raw files): DD where the full data is.
    [("ENZYMES", "fixture_root"), pytest.param("DD", "tu_root", marks=pytest.mark.tudata("DD"))],
)
@pytest.mark.parametrize("costs", ["table", "lists", "scattered", "merged"])
def test_exact_distances_equal_the_jit_path_for_each_cost_method(request, name, root, cache_dir, extension, use, costs):
    graphs = _graphs(request.getfixturevalue(root), cache_dir, name, 12)
    support = MWSP(d=2, k=1).fit(graphs).support_
    pairs = upper_pairs(12)
    recording = _Recording(extension)
    use(recording)
    built = exact_distances(support, support, pairs, n_jobs=3, costs=costs, tile_size=25)
    assert "pairs_chunks" in recording.names()
    assert ("row_squares" in recording.names()) == (costs in ("lists", "scattered"))
    use(None)
    np.testing.assert_array_equal(built, exact_distances(support, support, pairs, n_jobs=3, costs=costs))


def test_arguments_the_extension_cannot_take_run_on_the_jit_path(extension, use):
    recording = _Recording(extension)
    use(recording)
    kernel = compiled.ENTRIES["row_squares"]
    indptr = np.array([0, 2, 3], dtype=np.int64)
    data = np.array([3.0, 4.0, 2.0])
    np.testing.assert_array_equal(kernel(indptr, data), [25.0, 4.0])
    assert recording.names() == {"row_squares"}
    readonly = data.copy()
    readonly.setflags(write=False)
    for other in (data.astype(np.float32), np.repeat(data, 2)[::2], readonly):
        recording.calls.clear()
        np.testing.assert_array_equal(kernel(indptr, other), [25.0, 4.0])
        assert recording.calls == []


def test_conforms():
    good = np.zeros((2, 3), dtype=np.int64)
    assert compiled.conforms("i2 i", (good, 5))
    assert not compiled.conforms("i2 i", (good.astype(np.int32), 5))
    assert not compiled.conforms("i2 i", (np.zeros((3, 2), dtype=np.int64).T, 5))
    assert not compiled.conforms("i1 i", (good, 5))
    readonly = good.copy()
    readonly.setflags(write=False)
    assert not compiled.conforms("i2 i", (readonly, 5))
    with pytest.raises(ValueError):
        compiled.conforms("i2 i", (good,))


def test_mode_is_checked_and_jit_builds_nothing(monkeypatch):
    monkeypatch.setenv(compiled.KERNELS_ENV, "fast")
    with pytest.raises(ValueError, match="MWSP_KERNELS='fast'"):
        compiled.mode()
    monkeypatch.setenv(compiled.KERNELS_ENV, "jit")
    monkeypatch.setitem(compiled._state, "tried", False)
    monkeypatch.setitem(compiled._state, "module", None)
    monkeypatch.setattr(compiled, "_built", lambda path: pytest.fail("built in jit mode"))
    assert compiled.extension() is None


def test_a_failed_build_warns_and_falls_back_or_raises(monkeypatch, tmp_path):
    runs = []

    def failing(args, **kwargs):
        runs.append(args)
        return subprocess.CompletedProcess(args, 1, stdout="", stderr="cc: not found\nerror: no compiler")

    monkeypatch.setenv(compiled.KERNEL_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(compiled.subprocess, "run", failing)
    marker = compiled.failed_marker(compiled.extension_path())
    for chosen, attempts in (("auto", 1), ("auto", 1), ("aot", 2)):
        monkeypatch.setenv(compiled.KERNELS_ENV, chosen)
        monkeypatch.setitem(compiled._state, "tried", False)  # as a new process
        monkeypatch.setitem(compiled._state, "module", None)
        if chosen == "auto":
            with pytest.warns(RuntimeWarning, match="status 1: cc: not found | error: no compiler"):
                assert compiled.extension() is None
            assert compiled.extension() is None  # decided once a process: no second attempt, no second warning
        else:
            with pytest.raises(RuntimeError, match="could not be built.*no compiler"):
                compiled.extension()
        # The failure is remembered on disk: a later auto process does not build again (its
        # warning names the file to delete); aot mode always tries again.
        assert len(runs) == attempts, chosen
        assert "no compiler" in marker.read_text()
    monkeypatch.setitem(compiled._state, "tried", False)
    monkeypatch.setenv(compiled.KERNELS_ENV, "auto")
    with pytest.warns(RuntimeWarning, match=f"earlier build failed.*delete {re.escape(str(marker))}"):
        compiled.extension()


def test_a_successful_build_clears_the_failure_and_stale_scratch_and_its_child_holds_the_lock(monkeypatch, tmp_path):
    path = tmp_path / "mwsp_kernels_0123456789abcdef.so"
    compiled.failed_marker(path).write_text("the build exited with status 1\n")
    left = [tmp_path / ".numba-killed", tmp_path / ".build-killed"]  # a killed build's scratch
    for folder in left:
        folder.mkdir()
    seen = {}

    def building(args, **kwargs):
        seen.update(kwargs)
        seen["handed"] = [os.fstat(fd) for fd in kwargs["pass_fds"]]
        Path(args[3]).write_bytes(b"built")
        return subprocess.CompletedProcess(args, 0, stdout="", stderr="")

    monkeypatch.setattr(compiled.subprocess, "run", building)
    assert compiled._built(path, retry_failed=True) == path
    assert not compiled.failed_marker(path).exists()
    assert not any(folder.exists() for folder in left)
    # The child is handed the locked file, so a build outlives a killed caller under the lock.
    (handed,) = seen["handed"]
    lock = (tmp_path / ".lock").stat()
    assert (handed.st_dev, handed.st_ino) == (lock.st_dev, lock.st_ino)
    assert Path(seen["cwd"]) == Path(compiled.__file__).resolve().parent.parent


def test_the_build_child_compiles_the_callers_package_from_any_folder(monkeypatch, tmp_path):
    """Run from a folder holding another ``mwsp_torch`` (a worktree, an old copy), ``python -m``
    would import that copy first and compile its sources under this package's key."""
    fake = tmp_path / "elsewhere" / "mwsp_torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "compiled.py").write_text("print('FAKE COPY BUILT')\n")
    monkeypatch.chdir(fake.parent)
    real_name = compiled.extension_path().name
    wrong_name = re.sub(r"_[0-9a-f]{16}", "_0000000000000000", real_name)
    argv, cwd, env = compiled.build_command(tmp_path / wrong_name, str(tmp_path / "numba"))
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert "FAKE" not in done.stdout
    assert done.returncode != 0
    assert f"the sources here give {real_name}, not {wrong_name}" in done.stderr
    # And a child that imported another package than the caller's refuses too.
    argv[-1] = str(fake)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "not the caller's package" in done.stderr


def test_the_build_child_drops_the_callers_numba_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_OPT", "0")
    monkeypatch.setenv("NUMBA_BOUNDSCHECK", "1")
    _, _, env = compiled.build_command(tmp_path / "x.so", "scratch-cache")
    assert {name for name in env if name.startswith("NUMBA_")} == {"NUMBA_CACHE_DIR"}
    assert env["NUMBA_CACHE_DIR"] == "scratch-cache" and env[compiled.KERNELS_ENV] == "jit"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_process_forked_during_a_build_does_not_wait_for_ever():
    with compiled._lock:  # as if another thread were building
        pid = os.fork()
        if pid == 0:  # the child: the lock it inherited held must not block it
            os._exit(0 if compiled._lock.acquire(timeout=5) else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_build_key_names_file_boundaries_and_numpy(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "__file__", str(tmp_path / "compiled.py"))
    monkeypatch.setattr(compiled, "SOURCE_MODULES", ("a", "b"))

    def key(a: bytes, b: bytes) -> str:
        (tmp_path / "a.py").write_bytes(a)
        (tmp_path / "b.py").write_bytes(b)
        return compiled.build_key()

    assert key(b"xy", b"") != key(b"x", b"y")  # the same bytes back to back, moved across files
    first = key(b"x", b"y")
    monkeypatch.setattr(np, "__version__", "0.0.0")
    assert key(b"x", b"y") != first


def test_build_key_follows_every_source_module(tmp_path, monkeypatch):
    package = Path(compiled.__file__).parent
    for name in compiled.SOURCE_MODULES:
        (tmp_path / compiled.source_file(name)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(package / compiled.source_file(name), tmp_path / compiled.source_file(name))
    monkeypatch.setattr(compiled, "__file__", str(tmp_path / "compiled.py"))
    first = compiled.build_key()
    assert first == compiled.build_key()
    for name in compiled.SOURCE_MODULES:
        path = tmp_path / compiled.source_file(name)
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        assert compiled.build_key() != first, name
        path.write_bytes(original)
    assert compiled.build_key() == first


def test_source_modules_are_every_module_with_numba_kernels():
    # A module of numba CPU functions or intrinsics is either compiled into the extension (its
    # source names the build) or deliberately outside it: the
    # protocols' SVM solver (svm), whose calls run for seconds to hours, so numba's per-process
    # set-up is no share of them, and template pooling's dense transport (nn.pooling,
    # transport.dense), which a training run calls thousands of times in one process and which
    # numba's disk cache serves after the first. (The thread engine's kernels are made inside a
    # function, for the CPU or CUDA, and stay on numba's JIT.)
    package = Path(compiled.__file__).parent
    with_numba = {
        ".".join(path.relative_to(package).with_suffix("").parts)
        for path in package.rglob("*.py")
        if re.search(r"^@(njit|intrinsic)", path.read_text(), re.M)
    }
    outside = {"svm", "nn.pooling", "transport.dense"}
    assert with_numba == set(compiled.SOURCE_MODULES) | outside
    # Every entry point is registered from one of them (entry() refuses others), and every
    # one the fit calls is registered once the package is imported.
    assert {kernel.module for kernel in compiled.ENTRIES.values()} <= set(compiled.SOURCE_MODULES)
    assert set(compiled.ENTRIES) == {
        "label_ids", "tree_ids", "path_features", "intern_rows", "intern_sparse_rows", "row_squares", "table_part",
        "mirror_part", "pairs_chunks",
    }  # fmt: skip


def test_entry_points_are_declared_once_from_a_source_module(monkeypatch):
    monkeypatch.setattr(compiled, "ENTRIES", dict(compiled.ENTRIES))
    known = compiled.ENTRIES["row_squares"]
    assert compiled.kernel("row_squares", known.codes, known.returns)(known.jit_function).module == "transport.costs"
    with pytest.raises(ValueError, match="declared twice"):
        compiled.kernel("row_squares", "i1 f1", "float64[::1]")(compiled.ENTRIES["intern_rows"].jit_function)
    with pytest.raises(ValueError, match="unknown argument codes"):
        compiled.kernel("other", "i1 x", "void")(known.jit_function)
    monkeypatch.setattr(compiled, "SOURCE_MODULES", tuple(set(compiled.SOURCE_MODULES) - {"transport.costs"}))
    with pytest.raises(ValueError, match="not in SOURCE_MODULES"):
        compiled.kernel("other", "i1 f1", "float64[::1]")(known.jit_function)


def test_a_fresh_process_fits_without_numba_dispatching(fixture_root, cache_dir, extension):
    """The point of the extension: a process's first fit calls no numba function, so it pays
    none of numba's set-up (``numba_ready`` never runs)."""
    script = f"""
import mwsp_torch.compiled as setup
from mwsp_torch import MWSP, load_tudataset
graphs, _ = load_tudataset("MUTAG", root={str(fixture_root)!r}, cache_dir={str(cache_dir)!r})
MWSP(d=2, k=1).fit(graphs[:40])
print("numba ready:", setup._ready)
"""
    env = {**os.environ, compiled.KERNEL_DIR_ENV: str(compiled.kernel_dir()), compiled.KERNELS_ENV: "aot"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "numba ready: False" in done.stdout
    env[compiled.KERNELS_ENV] = "jit"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "numba ready: True" in done.stdout


_NEGATIVE_INDEX_AUDIT = """
import numpy as np
from mwsp_torch import MWSP, compiled, load_tudataset
from mwsp_torch.transport.exact import transport_cost
from mwsp_torch.transport import exact_distances, upper_pairs

compiled._index_without_wraparound()  # as the build lowers the kernels; NUMBA_BOUNDSCHECK=1 is set
root, cache = {root!r}, {cache!r}
for name, count, d, k in {fits!r}:
    graphs, _ = load_tudataset(name, root=root, cache_dir=cache)
    model = MWSP(d=d, k=k, n_jobs=2).fit(graphs[:count])
    model.transform(graphs[count:count + 10])
graphs, _ = load_tudataset({costs_name!r}, root=root, cache_dir=cache)
support = MWSP(d=2, k=1).fit(graphs[:8]).support_
pairs = upper_pairs(8)
for costs in ("table", "lists", "scattered", "merged"):
    exact_distances(support, support, pairs, n_jobs=2, costs=costs, tile_size=10)
# The solver's every pricing rule and basis tree, on both sides of 63 points.
rng = np.random.default_rng(0)
for m, n in ((1, 5), (7, 3), (18, 18), (40, 45), (70, 9)):
    counts_a, counts_b = rng.integers(1, 4, m), rng.integers(1, 4, n)
    supply, demand = counts_a * counts_b.sum(), counts_b * counts_a.sum()
    cost = rng.integers(0, 3, (m, n)).astype(np.float64)
    for settings in ((96, 63, 600), (1, 0, 0), (96, 63, 1 << 30), (96, 0, 0)):
        transport_cost(supply, demand, cost, *settings)
print("audited")
"""


@pytest.mark.parametrize(
    "root, fits, costs_name",
    [
        pytest.param(
            "fixture_root", (("ENZYMES", 30, 3, 1), ("PTC_MR", 30, 2, 2), ("NCI1", 40, 2, 0)), "ENZYMES", id="fixtures"
        ),
        # DD's first 8 graphs (graph 5: 4,152 nodes) for the cost methods on large measures.
        pytest.param("tu_root", (), "DD", marks=pytest.mark.tudata("DD"), id="DD"),
    ],
)
@pytest.mark.slow  # compiles every kernel anew, with bounds checks, in a child process
def test_the_kernels_never_index_with_a_negative_number(request, root, fits, costs_name, cache_dir, tmp_path):
    """The build lowers the kernels' indexing without numba's wraparound of a negative index
    (:func:`mwsp_torch.compiled._index_without_wraparound`), which is sound only if no kernel
    ever indexes with one. Here they run (numba's JIT, a fresh cache) with that lowering and
    numba's bounds checks, under which a negative index is an IndexError: fits and transforms
    of the fixtures' datasets, each cost method (on DD's large graphs where the full data is),
    and the solver on its own."""
    root = request.getfixturevalue(root)
    script = _NEGATIVE_INDEX_AUDIT.format(root=str(root), cache=str(cache_dir), fits=fits, costs_name=costs_name)
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path), compiled.KERNELS_ENV: "jit"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["audited"], done.stderr[-3000:]


def test_only_this_package_loses_the_wraparound(tmp_path):
    """Functions outside the package keep numba's lowering of a negative index (Python's);
    the package's functions carry the name prefix that the build's lowering looks for."""
    script = """
import numba, numpy as np
from mwsp_torch import compiled
from mwsp_torch.transport.exact import cost_width
compiled._index_without_wraparound()

@numba.njit
def last(a, i):
    return a[i]

print(last(np.arange(5.0), -1))
cost_width(7)
names = [result.fndesc.mangled_name for result in cost_width.overloads.values()]
print(all(name.startswith(compiled.OWN_FUNCTION_PREFIX) for name in names) and len(names) == 1)
"""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), compiled.KERNELS_ENV: "jit"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["4.0", "True"]


def test_the_kernels_live_in_one_folder_per_user_and_machine_whatever_the_cache_folder(monkeypatch, tmp_path):
    """Not under ``$MWSP_CACHE_DIR``: a new cache folder (a CI run, a project of its own) finds
    the kernels built before; a folder per Python and numba version beside the key in the name."""
    monkeypatch.delenv(compiled.KERNEL_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    paths = set()
    for cache in ("one", "two"):
        monkeypatch.setenv("MWSP_CACHE_DIR", str(tmp_path / cache))
        paths.add(compiled.extension_path())
    (path,) = paths
    import numba

    folder = f"cp{sys.version_info.major}{sys.version_info.minor}-numba{numba.__version__}"
    assert path.parent == tmp_path / "user-cache" / "mwsp_torch" / "kernels" / folder
    monkeypatch.setenv(compiled.KERNEL_DIR_ENV, str(tmp_path / "mine"))
    assert compiled.extension_path().parent == tmp_path / "mine"


def test_a_second_cache_folder_does_not_rebuild_the_kernels(fixture_root, tmp_path):
    """Two fresh processes, each with a cache folder of its own and the default kernel folder:
    the second builds nothing (the first builds only where this machine has no kernels yet)."""
    script = f"""
import sys
from mwsp_torch import MWSP, compiled, load_tudataset
graphs, _ = load_tudataset("MUTAG", root={str(fixture_root)!r})
MWSP(d=2, k=0, n_jobs=1).fit(graphs[:10])
path = compiled.extension_path()
print("extension:", path, path.stat().st_mtime_ns)
"""
    env = {name: value for name, value in os.environ.items() if name != compiled.KERNEL_DIR_ENV}
    env[compiled.KERNELS_ENV] = "aot"
    seen = []
    for cache in ("first", "second"):
        env["MWSP_CACHE_DIR"] = str(tmp_path / cache)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        seen.append((done.stdout.split("extension:")[1].strip(), done.stderr))
    assert seen[0][0] == seen[1][0]  # the same file, untouched (its modification time)
    assert "compiling its CPU kernels" not in seen[1][1]
    assert not (tmp_path / "second" / "kernels").exists()
