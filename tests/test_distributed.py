"""Dask scale-out: a LocalCluster's matrix equals the in-process one bit for bit, a worker killed
mid-run loses nothing, a driver restarted resumes from the shared tile store, bad input fails early."""

import os
import signal
import threading
import time

import numpy as np
import pytest
from sklearn.base import clone

from mwsp_torch import MWSP
from mwsp_torch import distributed as mwsp_distributed
from mwsp_torch.distributed import connect, dask_distances
from mwsp_torch.transport import Exact, exact_distances, upper_pairs

from helpers import require_extra
from random_graphs import random_graphs

require_extra("distributed", "dask")


@pytest.fixture(scope="module")
def client():
    client = connect(n_workers=2)
    yield client
    cluster = client.cluster
    client.close()
    cluster.close()


@pytest.fixture(scope="module")
def problem():
    """Support sets of 60 small graphs and all their pairs (1,770)."""
    support = MWSP(d=3, k=1).fit(random_graphs(60, seed=11, max_nodes=12)).support_
    pairs = upper_pairs(support.num_graphs)
    return support, pairs, exact_distances(support, support, pairs, n_jobs=1)


def test_local_cluster_equals_in_process_bit_for_bit(client, problem):
    support, pairs, expected = problem
    stats = {}
    values = dask_distances(support, support, pairs, client, tile_size=100, stats=stats)
    assert stats == {"pairs_from_checkpoint": 0, "tasks": 18}
    assert np.array_equal(values, expected)
    assert (values[pairs[:, 0] != pairs[:, 1]] > 0).any()


def test_a_worker_killed_mid_run_loses_nothing(client, problem):
    support, pairs, expected = problem
    pids = client.run(os.getpid)  # {worker address: pid}
    result, killed = {}, []

    def run():
        result["values"] = dask_distances(support, support, pairs, client, tile_size=5)

    driver = threading.Thread(target=run)
    driver.start()
    deadline = time.monotonic() + 60
    while not killed and time.monotonic() < deadline and driver.is_alive():
        busy = [address for address, tasks in client.processing().items() if tasks and address in pids]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed.append(busy[0])
        time.sleep(0.01)
    driver.join(timeout=180)
    assert killed, "no worker was busy to kill: the run ended before the test could interrupt it"
    assert not driver.is_alive()
    assert np.array_equal(result["values"], expected)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker for the next test


def test_a_restarted_driver_resumes_from_the_shared_tile_store(client, problem, tmp_path):
    support, pairs, expected = problem
    first = {}
    values = dask_distances(support, support, pairs, client, tile_size=100, checkpoint=tmp_path, stats=first)
    assert first["tasks"] == 18 and np.array_equal(values, expected)
    tiles = sorted(tmp_path.rglob("tile-*.npy"))
    assert len(tiles) == 18
    tiles[3].unlink()  # as if the driver died before saving tile 3
    again = {}
    values = dask_distances(support, support, pairs, client, tile_size=100, checkpoint=tmp_path, stats=again)
    assert again == {"pairs_from_checkpoint": len(pairs) - 100, "tasks": 1}
    assert np.array_equal(values, expected)
    # The in-process engine reads the same tiles: nothing left to compute.
    local = {}
    values = exact_distances(support, support, pairs, n_jobs=1, tile_size=100, checkpoint=tmp_path, stats=local)
    assert local["pairs_from_checkpoint"] == len(pairs)
    assert np.array_equal(values, expected)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({}, ValueError, "give a scheduler address or a number of local workers"),
        ({"scheduler": "tcp://127.0.0.1:1", "n_workers": 2}, ValueError, "not both or neither"),
        ({"n_workers": 0}, ValueError, "n_workers must be an integer >= 1"),
        ({"n_workers": 1, "threads_per_worker": 0}, ValueError, "threads_per_worker must be an integer >= 1"),
    ],
)
def test_bad_cluster_arguments_fail_before_any_work(kwargs, error, message):
    with pytest.raises(error, match=message):
        connect(**kwargs)


def test_an_unreachable_scheduler_is_named(monkeypatch):
    monkeypatch.setattr(mwsp_distributed, "CONNECT_TIMEOUT", 1.0)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"no Dask scheduler answered at 'tcp://127.0.0.1:1'"):
        connect(scheduler="tcp://127.0.0.1:1")
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("kwargs,message", [({"tile_size": 0}, "tile_size"), ({"n_jobs": 0}, "n_jobs")])
def test_bad_task_settings_fail_before_any_work(problem, kwargs, message):
    support, pairs, _ = problem
    with pytest.raises(ValueError, match=message):
        dask_distances(support, support, pairs, client=None, **kwargs)


def test_the_estimator_with_a_client_equals_it_without(client):
    graphs = random_graphs(30, seed=12, max_nodes=10)
    local = MWSP(d=2, k=1).fit(graphs[:20])
    dask = MWSP(d=2, k=1, client=client).fit(graphs[:20])
    assert dask.timings_["engine"] == "dask" and local.timings_["engine"] == "compiled"
    assert np.array_equal(dask.distances_, local.distances_)
    assert np.array_equal(dask.transform(graphs[20:]), local.transform(graphs[20:]))
    # clone keeps the client (scikit-learn deep-copies parameters; a Client must survive it)
    assert clone(dask).client is not None


@pytest.mark.parametrize(
    "params,message",
    [
        ({"client": 3}, "client must be a distributed.Client or a scheduler address"),
        (
            {"client": "tcp://127.0.0.1:1", "solver": "sinkhorn"},
            r"needs Exact\(engine='auto'\) or Exact\(engine='compiled'\), got Sinkhorn",
        ),
        ({"client": "tcp://127.0.0.1:1", "solver": Exact(engine="thread")}, r"got Exact\(engine='thread'\)"),
    ],
)
def test_the_estimator_refuses_a_bad_client_before_any_work(params, message):
    with pytest.raises(ValueError, match=message):
        MWSP(**params).fit(random_graphs(3, seed=0))


def test_the_command_line_on_a_local_cluster_writes_the_same_matrix(tmp_path, capsys):
    from mwsp_torch.cli import main

    common = ["distances", "--dataset", "CSL", "--d", "3", "--k", "1", "--quiet"]
    assert main([*common, "--cache-dir", str(tmp_path / "a"), "--out", str(tmp_path / "local.npy")]) == 0
    dask = [*common, "--cache-dir", str(tmp_path / "b"), "--out", str(tmp_path / "dask.npy"), "--dask-workers", "2"]
    assert main(dask) == 0
    assert '"engine": "dask"' in capsys.readouterr().out.splitlines()[-1]
    assert np.array_equal(np.load(tmp_path / "dask.npy"), np.load(tmp_path / "local.npy"))


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--scheduler", "tcp://127.0.0.1:1", "--dask-workers", "2"], "exclude each other"),
        (["--dask-workers", "0"], "--dask-workers must be >= 1"),
        (
            ["--dask-workers", "2", "--solver", "sinkhorn"],
            "--scheduler or --dask-workers runs the compiled exact engine",
        ),
        (["--dask-workers", "2", "--exact-engine", "thread"], "runs the compiled exact engine's tiles on Dask workers"),
    ],
)
def test_the_command_line_refuses_bad_dask_options(flags, message, capsys, tmp_path):
    from mwsp_torch.cli import main

    with pytest.raises(SystemExit):
        main(["distances", "--out", str(tmp_path / "W.npy"), *flags])
    assert message in capsys.readouterr().err


def test_the_command_line_names_an_unreachable_scheduler(monkeypatch, capsys, tmp_path):
    from mwsp_torch.cli import main

    monkeypatch.setattr(mwsp_distributed, "CONNECT_TIMEOUT", 1.0)
    assert main(["distances", "--out", str(tmp_path / "W.npy"), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "no Dask scheduler answered at 'tcp://127.0.0.1:1'" in capsys.readouterr().err


def test_pairs_made_from_their_flat_range_are_upper_pairs():
    pairs = upper_pairs(9)
    for lo, hi in [(0, 36), (0, 1), (7, 8), (5, 23), (35, 36)]:
        assert np.array_equal(mwsp_distributed.upper_pairs_between(9, lo, hi), pairs[lo:hi])


@pytest.mark.parametrize("on_dask", [False, True])
def test_a_streamed_matrix_equals_the_fitted_one_bit_for_bit(client, tmp_path, on_dask):
    # Two copies of graph 0 among 40: the distinct measures are streamed, then expanded.
    graphs = random_graphs(40, seed=11, max_nodes=12)
    graphs = [*graphs, graphs[0], graphs[3]]
    expected = MWSP(d=3, k=1).fit(graphs).distances_
    path = tmp_path / "W.npy"
    model = MWSP(d=3, k=1, n_jobs=1, client=client if on_dask else None)
    w = mwsp_distributed.stream_distances(model, graphs, path, tile_size=97)
    assert isinstance(w, np.memmap) and not (tmp_path / "W.npy.distinct.npy").exists()
    assert np.array_equal(np.load(path), expected)
    assert w[0, 40] == 0 and (w[0, 1:40] > 0).all()


def test_the_command_line_streams_the_same_matrix(tmp_path, capsys):
    from mwsp_torch.cli import main

    common = ["distances", "--dataset", "CSL", "--d", "3", "--k", "1", "--quiet", "--cache-dir", str(tmp_path)]
    assert main([*common, "--out", str(tmp_path / "held.npy")]) == 0
    assert main([*common, "--out", str(tmp_path / "streamed.npy"), "--stream"]) == 0
    assert '"streamed": true' in capsys.readouterr().out.splitlines()[-1]
    assert np.array_equal(np.load(tmp_path / "streamed.npy"), np.load(tmp_path / "held.npy"))
    with pytest.raises(SystemExit):
        main([*common, "--out", str(tmp_path / "x.npy"), "--stream", "--solver", "sinkhorn"])
    assert "--stream runs the compiled exact engine" in capsys.readouterr().err
