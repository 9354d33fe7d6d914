"""Defaults that do not trap: the exact engine ``"auto"``, Sinkhorn's warning on a CPU, the
kernels' build kept out of the timings, the protocols' progress and accuracy ceiling, and
a data root that points inside a dataset's folder. None of these tests needs data files."""

import itertools
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import mwsp_torch.estimator as estimator
import mwsp_torch.transport.solvers as solvers
from mwsp_torch import MWSP, load_tudataset, make_csl, nested_protocol, paper_protocol
from mwsp_torch.cli import build_parser, check_args, main, solver_from_args, summary
from mwsp_torch.evaluation import PAPER_LAMS, accuracy_ceiling, check_folds, check_inner_folds, check_labels
from mwsp_torch.transport import Exact, Sinkhorn
from mwsp_torch.transport.engines import (
    EXACT_ENGINES,
    ExactEngineFallbackWarning,
    SinkhornOnCPUWarning,
    choose_exact_engine,
)

from helpers import make_data


def _graphs(seed=0, count=8, low=5, high=10, num_labels=3):
    """Small random connected graphs with a few labels: supports of several points each."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(low, high + 1))
        edges = [(u, u + 1) for u in range(n - 1)] + [tuple(rng.choice(n, 2, replace=False)) for _ in range(n // 3)]
        graphs.append(make_data(n, edges, rng.integers(0, num_labels, n).tolist()))
    return graphs


# --- exact_engine="auto" ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "cuda", "numba_cuda", "checkpoint", "table_fits"),
    list(itertools.product(["cpu", "cuda", "cuda:1", torch.device("cuda:0")], *[[False, True]] * 4)),
)
def test_auto_takes_the_thread_engine_only_on_a_usable_cuda_device(device, cuda, numba_cuda, checkpoint, table_fits):
    """The GPU engine where the device is CUDA, torch and numba can both use it, no
    checkpoint is asked for (only the compiled engine keeps one) and its table fits; the
    compiled CPU engine in every other case."""
    want = "thread" if str(device) != "cpu" and cuda and numba_cuda and not checkpoint and table_fits else "compiled"
    got = choose_exact_engine(device, cuda, numba_cuda, checkpoint=checkpoint, table_fits=table_fits)
    assert got == want


def test_auto_is_the_default_and_the_engine_is_recorded():
    graphs = _graphs()
    assert MWSP().solver == "exact" and Exact().engine == "auto" and "auto" in EXACT_ENGINES
    auto = MWSP(d=3, k=1).fit(graphs)
    assert auto.timings_["engine"] == "compiled"  # device="cpu"
    for engine in ("compiled", "thread"):  # explicit choices run as asked
        model = MWSP(d=3, k=1, solver=Exact(engine=engine)).fit(graphs)
        assert model.timings_["engine"] == engine
        np.testing.assert_allclose(model.distances_, auto.distances_, rtol=1e-9, atol=1e-12)


def test_auto_on_a_cuda_device_it_cannot_use_warns_and_runs_the_compiled_engine(monkeypatch):
    graphs = _graphs()
    reference = MWSP(d=2, k=1).fit(graphs)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(ExactEngineFallbackWarning, match="torch sees no usable CUDA device: the compiled CPU engine"):
        model = MWSP(d=2, k=1, device="cuda").fit(graphs)
    assert model.timings_["engine"] == "compiled"
    np.testing.assert_array_equal(model.distances_, reference.distances_)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(solvers, "numba_cuda_available", lambda: False)
    with pytest.warns(ExactEngineFallbackWarning, match="numba sees no usable CUDA device"):
        assert MWSP(d=2, k=1, device="cuda").fit(graphs).timings_["engine"] == "compiled"
    # A device index torch does not have (one GPU, cuda:1) is not usable either.
    monkeypatch.setattr(solvers, "numba_cuda_available", lambda: True)
    with pytest.warns(ExactEngineFallbackWarning, match="device='cuda:1', but torch sees no usable CUDA device"):
        assert MWSP(d=2, k=1, device="cuda:1").fit(graphs).timings_["engine"] == "compiled"


def test_auto_on_a_usable_cuda_device_runs_the_thread_engine_on_it(monkeypatch, tmp_path):
    """With CUDA seen by torch and numba (faked here), ``auto`` hands the pairs to the thread
    engine on the model's device; with a checkpoint, or a row bank whose table is too
    large, to the compiled engine, without a warning."""
    graphs = _graphs()
    reference = MWSP(d=2, k=1).fit(graphs)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(solvers, "numba_cuda_available", lambda: True)
    calls = []
    thread = solvers.thread_exact_distances

    def on_the_cpu(left, right, pairs, device, **kwargs):
        calls.append(device)
        return thread(left, right, pairs, device="cpu", **kwargs)

    monkeypatch.setattr(solvers, "thread_exact_distances", on_the_cpu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = MWSP(d=2, k=1, device="cuda:0").fit(graphs)
        assert model.timings_["engine"] == "thread" and calls == ["cuda:0"]
        np.testing.assert_allclose(model.distances_, reference.distances_, rtol=1e-12, atol=1e-15)
        model.transform(graphs[:2])
        assert calls == ["cuda:0", "cuda:0"]
        assert MWSP(d=2, k=1, device="cuda", checkpoint=str(tmp_path)).fit(graphs).timings_["engine"] == "compiled"
        monkeypatch.setattr(solvers, "THREAD_TABLE_BYTES", 8)
        assert MWSP(d=2, k=1, device="cuda").fit(graphs).timings_["engine"] == "compiled"
    assert len(calls) == 2


SIMULATED_AUTO = """
import numpy as np
import torch
torch.cuda.is_available = lambda: True  # torch is a CPU build here; numba's simulator is the GPU
torch.cuda.device_count = lambda: 1
from helpers import make_data
from mwsp_torch import MWSP
from mwsp_torch.transport import Exact
rng = np.random.default_rng(1)
graphs = []
for _ in range(6):
    n = int(rng.integers(5, 9))
    edges = [(u, u + 1) for u in range(n - 1)] + [(0, n - 1)]
    graphs.append(make_data(n, edges, rng.integers(0, 3, n).tolist()))
auto = MWSP(d=2, k=1, device="cuda").fit(graphs)
compiled = MWSP(d=2, k=1, solver=Exact(engine="compiled")).fit(graphs)
print(auto.timings_["engine"])
print(float(np.max(np.abs(auto.distances_ - compiled.distances_))))
"""


def test_auto_runs_the_cuda_kernel_in_numbas_simulator():
    """The whole path of ``MWSP(device="cuda")`` with the default engine, down to the CUDA
    kernel's launch, run by numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` must be set
    before ``numba.cuda`` is imported: a child process). A few small graphs: the simulator
    runs every CUDA thread in Python."""
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=os.pathsep.join([str(tests.parent), str(tests)]))
    done = subprocess.run(
        [sys.executable, "-c", SIMULATED_AUTO], env=env, capture_output=True, text=True, timeout=600, cwd=tests
    )
    assert done.returncode == 0, done.stderr[-3000:]
    engine, gap = done.stdout.strip().splitlines()[-2:]
    assert engine == "thread"
    assert float(gap) <= 1e-12


def test_cli_exact_engine_defaults_to_auto():
    parser = build_parser()
    args = parser.parse_args(["distances", "--out", "w.npy"])
    check_args(parser, args)
    assert solver_from_args(args) == Exact(engine="auto")
    args = parser.parse_args(["distances", "--out", "w.npy", "--exact-engine", "compiled"])
    check_args(parser, args)
    assert solver_from_args(args) == Exact(engine="compiled")
    args = parser.parse_args(["distances", "--out", "w.npy", "--solver", "sinkhorn", "--blur", "0.1"])
    check_args(parser, args)
    assert solver_from_args(args) == Sinkhorn(blur=0.1)  # the options not given are the library's defaults


# --- Sinkhorn on a CPU --------------------------------------------------------------------


def test_sinkhorn_on_a_cpu_warns_once_and_says_what_to_use():
    graphs = _graphs(count=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = MWSP(solver=Sinkhorn(check_pairs=0, scaling=0.5)).fit(graphs)
    on_cpu = [w for w in caught if issubclass(w.category, SinkhornOnCPUWarning)]
    assert len(on_cpu) == 1 and issubclass(SinkhornOnCPUWarning, UserWarning)
    message = str(on_cpu[0].message)
    assert "use solver='exact'" in message and "lower scaling" in message
    assert on_cpu[0].filename == __file__  # points at the caller's fit
    assert model.timings_["engine"] == "sinkhorn"
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkhornOnCPUWarning)
        MWSP().fit(graphs)  # the exact solver: no warning


# --- the kernels' build, out of the timings -----------------------------------------------


def test_fit_builds_the_kernels_before_its_timer(monkeypatch):
    """A first use's build (about a minute) happens before ``fit`` starts its clock and its
    progress bars, so ``timings_["features"]`` is the features' time alone."""
    built = []
    monkeypatch.setattr(estimator, "build_cpu_kernels", lambda: (built.append(True), time.sleep(0.5)))
    model = MWSP().fit(_graphs())
    assert built == [True] and model.timings_["features"] < 0.5


# --- the protocols: progress and ceiling ---------------------------------------------------


def _csl():
    graphs, y = make_csl(graphs_per_class=10)
    return MWSP(d=4, k=0).fit(graphs).distances_, y


def test_protocols_show_one_bar_over_the_whole_selection(capsys):
    w, y = _csl()
    lams, Cs = (0.1, 1.0), (1.0, 10.0)
    nested_protocol({(4, 0): w, (4, 1): w}, y, lams=lams, Cs=Cs, seeds=(0,), n_outer=2, n_inner=2, progress=True)
    err = capsys.readouterr().err
    steps = 2 * 2 * 2 + 2  # folds x settings x lams, then one final fit a fold
    assert "nested CV: 100%" in err and f"{steps}/{steps}" in err
    paper_protocol(w, y, lams=lams, Cs=Cs, n_splits=2, progress=True)
    err = capsys.readouterr().err
    assert "paper protocol: 100%" in err and f"{2 * 2 + 2}/{2 * 2 + 2}" in err
    # The default shows a bar on a terminal only: none under pytest (stderr is captured).
    paper_protocol(w, y, lams=lams, Cs=Cs, n_splits=2)
    assert capsys.readouterr().err == ""


def test_accuracy_ceiling_counts_graphs_at_distance_zero():
    w = np.array([[0, 0, 1, 2], [0, 0, 1, 2], [1, 1, 0, 3], [2, 2, 3, 0]], dtype=float)
    assert accuracy_ceiling(w, [0, 1, 1, 0]) == 75.0  # graphs 0 and 1 get one prediction
    assert accuracy_ceiling(w, [0, 0, 1, 1]) == 100.0
    other = w.copy()
    other[0, 1] = other[1, 0] = 0.5
    assert accuracy_ceiling({(2, 0): w, (3, 0): other}, [0, 1, 1, 0]) == 100.0  # the best setting's
    # CSL: skips 6 and 16 have as many nodes at every distance, so they are one measure.
    distances, y = _csl()
    assert accuracy_ceiling(distances, y) == 90.0
    result = paper_protocol(distances, y, lams=PAPER_LAMS[:2], Cs=(1.0,), n_splits=2)
    assert result["accuracy_ceiling"] == 90.0 and result["accuracy_mean"] <= 90.0


def test_cli_summary_says_what_the_number_means():
    result = {
        "dataset": "CSL",
        "protocol": "nested",
        "paths": "split",
        "accuracy_mean": 86.67,
        "accuracy_std": 0.0,
        "fold_accuracy_std": 0.0,
        "fold_accuracies": [86.67] * 20,
        "seeds": [0, 1],
        "outer_folds": 10,
        "majority_rate": 10.0,
        "accuracy_ceiling": 90.0,
        "grid": {"d": [4], "k": [0, 1]},
    }
    lines = summary(result).splitlines()
    assert lines[0].startswith("CSL: 86.67 +- 0.00 % (nested protocol, std over 2 repetitions' means")
    assert "the std is over repetitions" in lines[1] and "the 20 folds scored 86.67 to 86.67 %" in lines[1]
    assert "ceiling of these distances: 90.00 %" in lines[2] and "skip-6 and skip-16" in lines[2]
    other = summary({**result, "dataset": "X", "accuracy_ceiling": 95.0})
    assert "95.00 % (graphs at W = 0 from each other get one prediction" in other
    assert len(summary({**result, "accuracy_ceiling": 100.0}).splitlines()) == 2


def test_checks_the_cli_uses_are_public():
    y = check_labels(torch.tensor([0, 1, 0, 1]))
    assert isinstance(y, np.ndarray)
    with pytest.raises(ValueError, match="n_outer=3 stratified folds"):
        check_folds(y, 3, "n_outer")
    with pytest.raises(ValueError, match="n_inner=2 stratified inner folds"):
        check_inner_folds(np.array([0, 1] * 3), 2, 2)
    model = MWSP(solver=Sinkhorn(blur=0.1))
    model.validate_params()
    assert model.feature_settings() == {
        "d": 2,
        "k": 0,
        "paths": "split",
        "labels": "auto",
        "solver": "sinkhorn",
        "blur": 0.1,
        "scaling": 0.99,
    }
    with pytest.raises(ValueError, match="lam must be > 0"):
        MWSP(lam=0).validate_params()


# --- a data root inside the dataset's folder ----------------------------------------------


@pytest.fixture
def fake_root(tmp_path):
    raw = tmp_path / "tudatasets" / "MUTAG" / "raw"
    raw.mkdir(parents=True)
    for part in ("A", "graph_indicator", "graph_labels"):
        (raw / f"MUTAG_{part}.txt").write_text("")
    return tmp_path / "tudatasets"


@pytest.mark.parametrize("inside", ["MUTAG", "MUTAG/raw"])
def test_a_root_inside_the_dataset_folder_gets_a_hint(fake_root, inside, capsys):
    root = fake_root / inside
    with pytest.raises(FileNotFoundError, match="should be the folder that holds MUTAG/raw/; did you mean") as info:
        load_tudataset("MUTAG", root=root, cache_dir=fake_root / "cache")
    assert repr(str(fake_root)) in str(info.value)
    assert main(["evaluate", "--dataset", "MUTAG", "--root", str(root), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--root" in err and f"did you mean {str(fake_root)!r}?" in err


def test_labels_too_many_for_a_one_hot_x_stay_node_labels_only(tmp_path, monkeypatch):
    import mwsp_torch.datasets as datasets

    root = tmp_path / "root"
    shutil.copytree(Path(__file__).parent / "data" / "MUTAG", root / "MUTAG")
    full, y_full = load_tudataset("MUTAG", root=root, cache_dir=tmp_path / "a")
    assert full[0].x is not None
    # MUTAG's 7 labels on 3,371 nodes make a 94 KB one-hot x: a limit below it keeps node_label only.
    monkeypatch.setattr(datasets, "ONE_HOT_LIMIT_BYTES", 1000)
    with pytest.warns(UserWarning, match="MUTAG's node labels would make PyG's one-hot x"):
        graphs, y = load_tudataset("MUTAG", root=root, cache_dir=tmp_path / "b")
    assert graphs[0].x is None and np.array_equal(y, y_full)
    assert all(torch.equal(a.node_label, b.node_label) for a, b in zip(graphs, full, strict=True))
    assert np.array_equal(MWSP().fit(graphs[:30]).distances_, MWSP().fit(full[:30]).distances_)
