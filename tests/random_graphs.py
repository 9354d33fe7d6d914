"""Small random labelled graphs for tests that need a few dozen distinct graphs and no data files."""

import numpy as np

from helpers import make_data


def random_graphs(n: int, seed: int, min_nodes: int = 4, max_nodes: int = 8, num_labels: int = 3) -> list:
    """``n`` connected graphs: a random tree on ``min_nodes..max_nodes`` nodes plus up to two
    extra edges, node labels ``0..num_labels - 1``, all drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(n):
        size = int(rng.integers(min_nodes, max_nodes + 1))
        edges = [(int(rng.integers(i)), i) for i in range(1, size)]
        edges += [tuple(int(v) for v in rng.choice(size, 2, replace=False)) for _ in range(int(rng.integers(0, 3)))]
        graphs.append(make_data(size, edges, rng.integers(0, num_labels, size).tolist()))
    return graphs
