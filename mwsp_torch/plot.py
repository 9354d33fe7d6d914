"""The figure of an explanation: two graphs side by side, their matched nodes joined.

:func:`plot_explanation` draws what :func:`mwsp_torch.explain.explain` computed and adds
nothing to it, so the explanation itself needs neither matplotlib nor networkx (the
``explain`` extra). It is importable from :mod:`mwsp_torch.explain` and from the package too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mwsp_torch.explain import Explanation

__all__ = ["plot_explanation"]


def plot_explanation(
    explanation: Explanation,
    G,
    H,
    path: str | Path,
    titles: tuple[str, str] = ("G", "H"),
    dpi: int = 100,
) -> Path:
    """Draw ``G`` and ``H`` side by side, matched nodes joined, and save a PNG.

    Lines join nodes with flow between them: width by flow, colour by ground cost (flows at
    cost 0, between equal rows, thin and grey). A node's fill is its share of W, its text its
    label. Layouts are networkx's Kamada-Kawai (deterministic), so the same explanation gives
    the same picture.

    Args:
        explanation (Explanation): from :func:`~mwsp_torch.explain.explain`.
        G, H (Data): the two graphs it explains (for their edges).
        path (str or Path): the PNG to write.
        titles (tuple[str, str]): a caption for each graph (default ``("G", "H")``).
        dpi (int): resolution (default ``100``).

    Returns:
        The path written.

    Raises:
        ValueError: when ``G`` or ``H`` has another node count than the explanation's.
    """
    try:
        import matplotlib
        import matplotlib.cm as cm
        import matplotlib.colors as mcolors
        import networkx  # noqa: F401  (for _layout)
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            f"plot_explanation needs matplotlib and networkx: pip install 'mwsp_torch[explain]' ({err})"
        ) from err

    n_g, n_h = explanation.plan.shape
    positions = []
    for name, graph, n in (("G", G, n_g), ("H", H, n_h)):
        if graph.num_nodes != n:
            raise ValueError(f"{name} has {graph.num_nodes} nodes, the explanation's {name} has {n}")
        positions.append(_layout(graph))
    positions[1] = positions[1] + np.array([1.45, 0.0])
    pos_g, pos_h = positions

    fig = Figure(figsize=(11, 5.2))
    ax = fig.add_axes((0.01, 0.02, 0.86, 0.86))
    ax.set_axis_off()
    ax.set_aspect("equal")
    # Matching lines first (beneath the graphs): zero-cost grey, the rest by cost.
    v, u = np.nonzero(explanation.plan > 0)
    flows = explanation.plan[v, u]
    cost = explanation.costs[v, u]
    widths = 0.4 + 4.0 * flows / flows.max() if len(flows) else flows
    segments = np.stack([pos_g[v], pos_h[u]], axis=1)
    free = cost == 0
    ax.add_collection(LineCollection(segments[free], linewidths=widths[free] * 0.5, colors="0.75", alpha=0.5, zorder=1))
    cost_norm = mcolors.Normalize(vmin=0.0, vmax=max(float(cost.max()) if len(cost) else 1.0, 1e-12))
    # plasma without its last, palest yellows, which a white page would swallow
    cost_map = mcolors.ListedColormap(matplotlib.colormaps["plasma"](np.linspace(0.0, 0.85, 256)))
    paid = ~free
    ax.add_collection(
        LineCollection(
            segments[paid], linewidths=widths[paid], colors=cost_map(cost_norm(cost[paid])), alpha=0.8, zorder=2
        )
    )
    # The graphs' own edges, then the nodes, filled by share of W.
    share_max = max(float(explanation.node_share_g.max()), float(explanation.node_share_h.max()), 1e-300)
    share_map = mcolors.LinearSegmentedColormap.from_list("share", ["#ffffff", "#d62728"])
    for graph, pos, shares, labels in (
        (G, pos_g, explanation.node_share_g, explanation.labels_g),
        (H, pos_h, explanation.node_share_h, explanation.labels_h),
    ):
        edges = graph.edge_index.numpy().T if graph.edge_index is not None else np.empty((0, 2), dtype=np.int64)
        ax.add_collection(LineCollection(pos[edges], colors="black", linewidths=1.6, zorder=3))
        ax.scatter(
            pos[:, 0], pos[:, 1], s=260, c=share_map(shares / share_max), edgecolors="black", linewidths=1.0, zorder=4
        )
        for (x, y), text in zip(pos, labels, strict=True):
            ax.text(x, y, text, ha="center", va="center", fontsize=7, zorder=5)
    for pos, title in ((pos_g, titles[0]), (pos_h, titles[1])):
        ax.text(pos[:, 0].mean(), 1.12, title, ha="center", va="bottom", fontsize=11)
    ax.set_xlim(-0.1, 2.55)
    ax.set_ylim(-0.1, 1.2)
    fig.suptitle(
        f"W = {explanation.distance:.4f}   (" + ", ".join(f"{k}={v}" for k, v in explanation.settings.items()) + ")"
    )
    scalar = cm.ScalarMappable(norm=cost_norm, cmap=cost_map)
    fig.colorbar(scalar, cax=fig.add_axes((0.89, 0.15, 0.015, 0.6)), label="ground cost of a matched pair")
    fig.text(0.89, 0.08, "node fill: share of W\nline width: flow", fontsize=8, va="top")
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    return path


def _layout(graph) -> np.ndarray:
    """``[n, 2]`` node positions in the unit square, centred: networkx's Kamada-Kawai layout of
    each connected component (deterministic), largest first, side by side, and isolated nodes
    in a grid after them."""
    import networkx as nx

    n = graph.num_nodes
    nx_graph = nx.Graph()
    nx_graph.add_nodes_from(range(n))
    if graph.edge_index is not None:
        nx_graph.add_edges_from((int(a), int(b)) for a, b in graph.edge_index.numpy().T if a != b)
    pos = np.zeros((n, 2))
    components = sorted((sorted(c) for c in nx.connected_components(nx_graph)), key=lambda c: (-len(c), c[0]))
    x = 0.0
    for nodes in (c for c in components if len(c) > 1):
        layout = nx.kamada_kawai_layout(nx_graph.subgraph(nodes))
        points = np.array([layout[v] for v in nodes])
        points -= points.min(axis=0)
        points = points / max(points.max(), 1e-12) * np.sqrt(len(nodes))
        pos[nodes] = points + np.array([x, 0.0])
        x += points[:, 0].max() + 1.0
    singles = [c[0] for c in components if len(c) == 1]
    columns = int(np.ceil(np.sqrt(len(singles))))
    for t, v in enumerate(singles):
        pos[v] = (x + t % columns, t // columns)
    pos -= pos.min(axis=0)
    pos /= max(pos.max(), 1e-12)
    return pos + (1.0 - pos.max(axis=0)) / 2  # centred in the unit square
