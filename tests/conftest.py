import os
from pathlib import Path

import pytest

os.environ.setdefault("KEOPS_VERBOSE", "0")
os.environ.setdefault("PYKEOPS_VERBOSE", "0")


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """The ahead-of-time kernels, built (about a minute, once per machine and source) before
    any test runs, so that no test, a property test with a deadline say, times the build."""
    from mwsp_torch import compiled

    return compiled.extension()


#: Small TU datasets in the raw layout, in the repository (``tests/data/README.md``): MUTAG
#: whole, the first graphs of PTC_MR, NCI1, ENZYMES, Cuneiform and IMDB-BINARY.
FIXTURE_ROOT = Path(__file__).resolve().parent / "data"


#: Set to 1 to run the tests marked ``slow`` (CI does, ``.ci/run``).
SLOW_ENV = "MWSP_SLOW_TESTS"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "tudata(*names): needs the full TU datasets NAMES under $MWSP_DATA_ROOT (the tu_root fixture); "
        "skipped when MWSP_DATA_ROOT is not set, an error when it is set and one of them is missing",
    )
    config.addinivalue_line(
        "markers",
        "slow: takes tens of seconds to minutes on 2 cores (kernels compiled anew in a child process, "
        "Triton's interpreter); "
        f"skipped unless {SLOW_ENV}=1",
    )


def pytest_collection_modifyitems(config, items):
    """Without ``$MWSP_DATA_ROOT`` the tests marked ``tudata`` are skipped, saying what to set
    and which datasets they need. With it they run, and a missing dataset is an error (the
    ``tu_root`` fixture): CI sets it and must never hide missing data. The tests marked
    ``slow`` run with ``MWSP_SLOW_TESTS=1``, which CI sets too. So the default suite needs
    nothing outside the repository and takes minutes; CI's runs every test."""
    data = bool(os.environ.get("MWSP_DATA_ROOT"))
    slow = os.environ.get(SLOW_ENV) == "1"
    for item in items:
        marker = item.get_closest_marker("tudata")
        if marker is not None and not data:
            names = ", ".join(marker.args) or "TU datasets"
            item.add_marker(
                pytest.mark.skip(
                    reason=f"needs the full {names}: set MWSP_DATA_ROOT to a folder holding NAME/raw/NAME_*.txt"
                )
            )
        if item.get_closest_marker("slow") is not None and not slow:
            item.add_marker(pytest.mark.skip(reason=f"slow (tens of seconds or more): set {SLOW_ENV}=1 to run it"))


@pytest.fixture(scope="session")
def fixture_root() -> Path:
    """The small datasets under ``tests/data`` (in the repository; only read)."""
    return FIXTURE_ROOT


@pytest.fixture
def tu_root(request) -> Path:
    """``$MWSP_DATA_ROOT``, holding the full datasets the test's ``tudata`` marker names.

    Only for tests marked ``tudata(*names)``, which are skipped when MWSP_DATA_ROOT is not
    set. When it is set, a dataset the marker names and the root lacks is an error, not a
    skip: CI sets it (``.ci/run``) and must never hide missing data.
    """
    marker = request.node.get_closest_marker("tudata")
    if marker is None or not marker.args:
        raise RuntimeError(f"{request.node.nodeid} uses tu_root: mark it tudata(NAMES) with the datasets it reads")
    value = os.environ.get("MWSP_DATA_ROOT")
    if not value:  # not reached through the marker's skip: a direct call, say
        pytest.skip("needs the full TU datasets: set MWSP_DATA_ROOT")
    root = Path(value).expanduser()
    missing = [name for name in marker.args if not (root / name / "raw" / f"{name}_A.txt").is_file()]
    if missing:
        raise RuntimeError(f"MWSP_DATA_ROOT={value} lacks {', '.join(missing)} (NAME/raw/NAME_A.txt)")
    return root


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mwsp_cache")


@pytest.fixture(scope="session")
def mutag(fixture_root, cache_dir):
    """MUTAG (whole, from ``tests/data``) as ``(graphs, y)``, loaded once per session."""
    from mwsp_torch import load_tudataset

    return load_tudataset("MUTAG", root=fixture_root, cache_dir=cache_dir)


@pytest.fixture
def kernel_calls(monkeypatch) -> list[int]:
    """The pair count of each tile the exact engine computes from now on (its tile kernel,
    numba's or the ahead-of-time extension's, is wrapped for the test), to check what a
    resumed run recomputes."""
    import mwsp_torch.transport.exact as transport

    calls = []
    kernel = transport._tile_kernel

    def counting(workers, *args):
        calls.append(len(args[0]))
        return kernel(workers, *args)

    monkeypatch.setattr(transport, "_tile_kernel", counting)
    return calls
