import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

os.environ.setdefault("KEOPS_VERBOSE", "0")
os.environ.setdefault("PYKEOPS_VERBOSE", "0")

REPO = Path(__file__).resolve().parents[1]


def _devices() -> list[str]:
    """Torch devices the device-generic tests run on: always the CPU, and CUDA where there is one.

    CI has no GPU, so there the same logic runs on CPU tensors. On a GPU machine set
    ``MWSP_TEST_CUDA=1``: a missing CUDA device is then an error, not a shorter list.
    """
    if os.environ.get("MWSP_TEST_CUDA") == "1":
        if not torch.cuda.is_available():
            raise RuntimeError("MWSP_TEST_CUDA=1 but torch sees no CUDA device")
        return ["cpu", "cuda"]
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


DEVICES = _devices()


def make_data(num_nodes, edges, labels) -> Data:
    edge_index = torch.tensor(np.asarray(edges, dtype=np.int64).reshape(-1, 2).T.copy())
    return Data(edge_index=edge_index, num_nodes=num_nodes, node_label=torch.tensor(labels, dtype=torch.long))


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """The ahead-of-time kernels, built (about a minute, once per machine and source) before
    any test runs, so that no test, a property test with a deadline say, times the build."""
    from mwsp_torch import _aot

    return _aot.module()


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The TU raw files: $MWSP_DATA_ROOT (CI sets it to a scratch copy), else ../shared/tudatasets.

    Missing data is an error, not a skip: CI provides it.
    """
    root = os.environ.get("MWSP_DATA_ROOT") or str(REPO.parent / "shared" / "tudatasets")
    if not (Path(root) / "MUTAG" / "raw" / "MUTAG_A.txt").is_file():
        raise RuntimeError(f"TU datasets not found under {root}; set MWSP_DATA_ROOT")
    return Path(root)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mwsp_cache")


@pytest.fixture(scope="session")
def mutag(data_root, cache_dir):
    """MUTAG as ``(graphs, y)``, loaded once per session from a scratch copy."""
    from mwsp_torch import load_tudataset

    return load_tudataset("MUTAG", root=data_root, cache_dir=cache_dir)


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
