"""Resumable tiles of the exact engine (transport.store): keyed by their inputs, temporary
tiles of dead runs dropped, damaged tiles named and recomputed."""

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from mwsp_torch import MWSP, make_csl
from mwsp_torch.transport import (
    exact_distances,
    upper_pairs,
)


def _checkpointed(directory, graphs_per_class: int, num_nodes: int, d: int, k: int):
    """A CSL dataset's all-pairs W computed into a checkpoint of 50-pair tiles, and a
    function that computes it again from that checkpoint."""
    graphs, _ = make_csl(graphs_per_class=graphs_per_class, num_nodes=num_nodes)
    support = MWSP(d=d, k=k).fit(graphs).support_
    pairs = upper_pairs(len(graphs))

    def run():
        return exact_distances(support, support, pairs, tile_size=50, checkpoint=directory)

    full = run()
    np.testing.assert_array_equal(full, exact_distances(support, support, pairs, tile_size=50))  # no checkpoint
    return pairs, full, run


def test_checkpoint_resume_recomputes_only_missing_tiles(tmp_path, kernel_calls):
    pairs, full, resume = _checkpointed(tmp_path, 3, 15, d=3, k=1)
    tiles = sorted(tmp_path.rglob("tile-*.npy"))
    assert len(tiles) == -(-len(pairs) // 50)
    # A killed run: some tiles never written, one corrupted mid-way is impossible (atomic rename).
    for tile in tiles[1::2]:
        tile.unlink()
    kernel_calls.clear()
    assert np.array_equal(resume(), full)
    assert len(kernel_calls) == len(tiles[1::2])


def test_checkpoint_drops_temporary_tiles_of_dead_runs(tmp_path):
    _, full, resume = _checkpointed(tmp_path, 2, 11, d=2, k=0)
    (directory,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left_by_dead = directory / f".tile-0000000.{dead.pid}.npy"  # killed while saving
    left_by_live = directory / f".tile-0000001.{os.getpid()}.npy"  # still saving
    for path in (left_by_dead, left_by_live):
        np.save(path, np.zeros(3))
    np.testing.assert_array_equal(resume(), full)
    assert not left_by_dead.exists() and left_by_live.exists()


def test_checkpoint_is_keyed_by_inputs(tmp_path):
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    a = MWSP(d=1, k=0, checkpoint=str(tmp_path)).fit(graphs).distances_
    b = MWSP(d=3, k=1, checkpoint=str(tmp_path)).fit(graphs).distances_
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, MWSP(d=1, k=0).fit(graphs).distances_)  # as without a checkpoint
    np.testing.assert_array_equal(b, MWSP(d=3, k=1).fit(graphs).distances_)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
    again = MWSP(d=3, k=1, checkpoint=str(tmp_path)).fit(graphs)
    np.testing.assert_array_equal(again.distances_, b)
    assert again.timings_["pairs_from_checkpoint"] == again.timings_["pairs"] > 0  # all read, none computed


def test_checkpoint_is_keyed_by_the_cost_method(tmp_path):
    """The cost methods agree only to rounding, so one method's tiles must not serve another's."""
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    support = MWSP(d=2, k=1).fit(graphs).support_
    pairs = upper_pairs(len(graphs))
    for costs in ("table", "lists", "scattered"):
        expected = exact_distances(support, support, pairs, tile_size=50, costs=costs)
        got = exact_distances(support, support, pairs, tile_size=50, costs=costs, checkpoint=tmp_path)
        np.testing.assert_array_equal(got, expected)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 3


def test_checkpoint_temporary_tiles_are_named_by_process_and_thread(tmp_path, monkeypatch):
    """Two threads of one process saving the same tile must not share a temporary file."""
    saved = []
    real_save = np.save

    def recording(path, values):
        saved.append(Path(path).name)
        real_save(path, values)

    monkeypatch.setattr(np, "save", recording)
    graphs, _ = make_csl(graphs_per_class=1, num_nodes=11)
    support = MWSP(d=2, k=0).fit(graphs).support_
    exact_distances(support, support, upper_pairs(len(graphs)), tile_size=50, checkpoint=tmp_path)
    assert saved and all(
        re.fullmatch(rf"\.tile-\d{{7}}\.{os.getpid()}\.{threading.get_ident()}\.npy", name) for name in saved
    )


def test_checkpoint_is_keyed_by_both_sides_and_the_pairs(tmp_path):
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    support = MWSP(d=2, k=0).fit(graphs).support_
    pairs = np.array([[0, 0], [1, 1], [2, 0]])
    for right, rows in (
        (support.take([0, 1]), pairs),
        (support.take([2, 3]), pairs),
        (support.take([2, 3]), pairs[:2]),
    ):
        expected = exact_distances(support, right, rows, tile_size=2)
        np.testing.assert_array_equal(exact_distances(support, right, rows, tile_size=2, checkpoint=tmp_path), expected)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 3


def test_damaged_checkpoint_tile_is_named_and_recomputed(tmp_path, kernel_calls):
    _, full, resume = _checkpointed(tmp_path, 2, 11, d=2, k=0)
    tiles = sorted(tmp_path.rglob("tile-*.npy"))
    assert len(tiles) == 4 and all(re.fullmatch(r"tile-000000\d-[0-9a-f]{16}\.npy", t.name) for t in tiles)
    tiles[0].write_bytes(tiles[0].read_bytes()[:90])  # truncated by something outside the library
    np.save(tiles[1], np.zeros(3))  # another array under a tile's name
    flipped = bytearray(tiles[2].read_bytes())
    flipped[-3] ^= 0x40  # one bit of a value: still a readable float64 array of the right shape
    tiles[2].write_bytes(bytes(flipped))
    last = len(np.load(tiles[2]))
    fourth = len(np.load(tiles[3]))
    tiles[3].write_bytes(tiles[3].read_bytes().replace(b"'<f8'", b"',f8'", 1))  # numpy's parser: SyntaxError
    kernel_calls.clear()
    with pytest.warns(UserWarning, match=r"checkpoint tile .*tile-0000000-[0-9a-f]{16}\.npy cannot be read") as record:
        resumed = resume()
    messages = [str(w.message) for w in record]
    assert any(re.search(r"tile-0000001-\w+\.npy holds float64 \[3\], not float64 \[50\]", m) for m in messages)
    assert any(re.search(r"tile-0000002-\w+\.npy does not match its checksum", m) for m in messages)
    assert any(re.search(r"tile-0000003-\w+\.npy cannot be read", m) for m in messages)
    np.testing.assert_array_equal(resumed, full)
    assert kernel_calls == [50, 50, last, fourth]
    kernel_calls.clear()
    np.testing.assert_array_equal(resume(), full)
    assert kernel_calls == []  # both were saved again
