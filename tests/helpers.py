"""What many test files build on: the devices the device-generic tests run on, and a small
labelled graph from an edge list. (Fixtures stay in ``conftest.py``; plain helpers live here,
imported by name.)"""

import os

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["DEVICES", "REQUIRE_EXTRAS", "make_data", "require_extra"]


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


#: Set by ``.ci/run``: there every extra is installed, and a missing one is an error, not a skip.
REQUIRE_EXTRAS = os.environ.get("MWSP_REQUIRE_EXTRAS") == "1"


def require_extra(module: str, extra: str):
    """``module``, imported; where it is missing, the test (or file) is skipped and says which
    extra brings it (``pip install -e '.[EXTRA]'``), except under ``MWSP_REQUIRE_EXTRAS=1``
    (CI, which installs every extra), where the ImportError stands."""
    import importlib

    import pytest

    if REQUIRE_EXTRAS:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"needs {module}: pip install -e '.[{extra}]' (CI installs it)")
