"""Explanations: which nodes a distance matches, what each pair costs, and why (``docs/explanations.md``).

``W(G, H)`` is an optimal transport between the rows ``phi(v)`` of the two graphs' nodes
(``docs/definition.md``, section 4). Its explanation (section 7) is an optimal plan between
the *nodes*: POT's network simplex (``ot.emd``) solves the two collapsed measures on the
ground costs the exact engine uses, in integer masses (``count * other graph's size``, so
the support-level plan is exact), and each support point's flow is then divided evenly
among the nodes that share its row (every node has mass ``1/|V|``). The node plan has the
same cost, so it is again optimal, and it is checked against the compiled engine's W to
1e-12 relative; the same input gives the same plan on every run.

A node's share of W is the cost of the flow leaving it (for ``H``: arriving at it), so each
graph's shares sum to W. The pairs of support points that carry most of W are listed with
the path representations on which their rows differ, decoded from the fitted vocabularies
into label sequences: ``C-C-O`` at scale 0, each node's tree as ``C(N,O)`` at scale 1 and
above (exact interning keeps every tree and path recoverable from its ID).

For an SVM on ``K = exp(-lam W)``, :func:`svm_contributions` ranks the training graphs by
``dual_coef * K(new, sv)``, the terms of its decision function. The figure of an
explanation, :func:`plot_explanation`, is drawn by :mod:`mwsp_torch.plot`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mwsp_torch._interning import Vocabulary, table_to_arrays

# The figure lives apart (it needs matplotlib); re-exported where users have imported it.
from mwsp_torch.plot import plot_explanation
from mwsp_torch.transport import exact_distances
from mwsp_torch.transport.costs import cost_matrix
from mwsp_torch.transport.measures import bank_arrays

__all__ = [
    "PLAN_TOLERANCE",
    "Explanation",
    "MatchedPair",
    "PathDifference",
    "SupportContributions",
    "explain",
    "explain_prediction",
    "plot_explanation",
    "svm_contributions",
]

#: Relative agreement required between the plan's cost and the compiled engine's W.
PLAN_TOLERANCE = 1e-12


@dataclass(frozen=True)
class PathDifference:
    """One path representation whose weight differs between two nodes' rows.

    Attributes:
        scale (int): the scale ``s`` of the representation; ``-1`` for an attribute column
            (``path`` then names it: ``"attribute j"``, or ``"attribute j, mean at distance r"``).
        path (str): the representation decoded, e.g. ``"C-C-O"`` (scale 0) or
            ``"C(C,O)-O(C)"`` (scale 1).
        weight_g, weight_h (float): its coordinate in the ``G`` node's row and in the ``H``
            node's (paths ending there, split over tied shortest paths by ``paths="split"``).
    """

    scale: int
    path: str
    weight_g: float
    weight_h: float


@dataclass(frozen=True)
class MatchedPair:
    """Nodes of ``G`` and of ``H`` that share one row each, and the flow between them.

    Attributes:
        nodes_g, nodes_h (tuple[int, ...]): the nodes (numbered within their graph) whose
            row is this pair's ``G`` row, and its ``H`` row.
        label_g, label_h (str): their node labels, decoded.
        flow (float): the mass sent between the two groups.
        cost (float): the ground cost ``|phi(v) - phi(u)|_2`` between the two rows.
        differences (list[PathDifference]): every path representation on which the rows
            differ, largest difference first; their squared differences sum to ``cost**2``.
    """

    nodes_g: tuple[int, ...]
    nodes_h: tuple[int, ...]
    label_g: str
    label_h: str
    flow: float
    cost: float
    differences: list[PathDifference]

    @property
    def contribution(self) -> float:
        """``flow * cost``, this pair's part of W."""
        return self.flow * self.cost


@dataclass(frozen=True)
class Explanation:
    """An optimal node-to-node plan behind ``W(G, H)`` (:func:`explain`).

    Attributes:
        distance (float): W, as the compiled exact engine computes it.
        plan (np.ndarray): ``[n_G, n_H]`` an optimal plan between the nodes; rows sum to
            ``1/n_G``, columns to ``1/n_H``, and ``(plan * costs).sum()`` is W to 1e-12.
        costs (np.ndarray): ``[n_G, n_H]`` ground costs between the nodes' rows.
        node_share_g (np.ndarray): ``[n_G]`` the cost of the flow leaving each node of ``G``.
        node_share_h (np.ndarray): ``[n_H]`` the cost of the flow arriving at each node of ``H``.
        pairs (list[MatchedPair]): the pairs of rows that carry most of W, largest
            ``flow * cost`` first (pairs at cost 0 are not listed).
        labels_g, labels_h (list[str]): each node's label, decoded.
        settings (dict): the model's settings that the rows depend on (``d``, ``k``, ``paths``,
            ``labels``: ``feature_settings()`` less the solver's).
    """

    distance: float
    plan: np.ndarray
    costs: np.ndarray
    node_share_g: np.ndarray
    node_share_h: np.ndarray
    pairs: list[MatchedPair]
    labels_g: list[str]
    labels_h: list[str]
    settings: dict

    def report(self, differences: int = 4) -> str:
        """A few lines of text: W, the nodes with the largest shares, and the top pairs with
        up to ``differences`` differing path representations each."""
        lines = [f"W = {self.distance:.6g} ({', '.join(f'{k}={v}' for k, v in self.settings.items())})"]
        for side, shares, labels in (("G", self.node_share_g, self.labels_g), ("H", self.node_share_h, self.labels_h)):
            order = np.argsort(-shares, kind="stable")[:5]
            top = ", ".join(f"{v} ({labels[v]}) {shares[v]:.4g}" for v in order if shares[v] > 0)
            lines.append(f"largest shares in {side}: {top or 'none (W = 0)'}")
        for rank, pair in enumerate(self.pairs, 1):
            lines.append(
                f"{rank}. G nodes {list(pair.nodes_g)} ({pair.label_g}) -> H nodes {list(pair.nodes_h)} "
                f"({pair.label_h}): flow {pair.flow:.4g} x cost {pair.cost:.4g} = {pair.contribution:.4g} "
                f"({100 * pair.contribution / self.distance:.1f} % of W)"
            )
            for diff in pair.differences[:differences]:
                where = f"scale {diff.scale} " if diff.scale >= 0 else ""
                lines.append(f"     {where}{diff.path}: {diff.weight_g:.4g} in G, {diff.weight_h:.4g} in H")
            if len(pair.differences) > differences:
                lines.append(f"     ... {len(pair.differences) - differences} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The explanation as plain JSON-ready values (the plan and costs as nested lists)."""
        return {
            "distance": self.distance,
            "settings": dict(self.settings),
            "plan": self.plan.tolist(),
            "costs": self.costs.tolist(),
            "node_share_g": self.node_share_g.tolist(),
            "node_share_h": self.node_share_h.tolist(),
            "labels_g": list(self.labels_g),
            "labels_h": list(self.labels_h),
            "pairs": [
                {
                    "nodes_g": list(p.nodes_g),
                    "nodes_h": list(p.nodes_h),
                    "label_g": p.label_g,
                    "label_h": p.label_h,
                    "flow": p.flow,
                    "cost": p.cost,
                    "differences": [vars(diff) for diff in p.differences],
                }
                for p in self.pairs
            ],
        }


class _Decoder:
    """Tree IDs and path columns back into readable strings, from the interning tables.

    Every ID is a chain of pairs ``(prefix ID, element)`` (:mod:`mwsp_torch._interning`): a
    tree is ``(-1, label)`` then one pair per child tree, sorted; a path at scale ``s`` is
    ``(-1 - s, t_s(w0))`` then one pair per further node. With edge labels a child is the
    ID of the pair ``(-2 - e, subtree)`` (:mod:`mwsp_torch.trees`), written ``[e]subtree``, and
    a path puts the key ``-2 - e`` before each further node, written ``-[e]-``. With
    attributes the first ``rows.attribute_columns`` columns are ``beta * a(v)``, the path
    columns after them.
    """

    def __init__(self, rows, label_names) -> None:
        self.trees = _inverse(*rows.tree_vocabs)
        self.paths = _inverse(*rows.path_vocabs)
        self.attribute_columns = int(rows.attribute_columns)
        self.attribute_width = int(rows.attribute_width)
        self.label_rows = _inverse(None, rows.label_scheme.vocab)
        self.multi_column = rows.label_scheme.width is not None and rows.label_scheme.width > 1
        self.label_names = label_names
        self.tree_cache: dict[int, str] = {}

    def label(self, value: int) -> str:
        value = int(value)
        if self.multi_column:  # an ID of the label row's chain
            return "(" + ",".join(map(str, _chain(self.label_rows, value)[1])) + ")"
        names = self.label_names
        if names is not None and (value in names if isinstance(names, Mapping) else 0 <= value < len(names)):
            return str(names[value])
        return str(value)

    def tree(self, tree_id: int) -> str:
        text = self.tree_cache.get(tree_id)
        if text is None:
            label, *children = _chain(self.trees, tree_id)[1]
            text = self.label(label)
            if children:
                text += "(" + ",".join(sorted(self.child(c) for c in children)) + ")"
            self.tree_cache[tree_id] = text
        return text

    def child(self, child_id: int) -> str:
        """A child of a tree: a subtree, or with edge labels ``[e]subtree``."""
        head, elements = _chain(self.trees, child_id)
        if head <= -2:  # the pair (-2 - edge label, subtree)
            return f"[{-2 - head}]" + self.tree(elements[0])
        return self.tree(child_id)

    def path(self, column: int) -> tuple[int, str]:
        """``(scale, representation)`` of a column of the node rows; scale ``-1`` for a column
        that is not a path (an attribute)."""
        if column < self.attribute_columns:
            j, distance = column % self.attribute_width, column // self.attribute_width
            return -1, f"attribute {j}" + (f", mean at distance {distance}" if distance else "")
        column -= self.attribute_columns
        if column >= len(self.paths[0]):
            return -1, f"column {column}"  # not a path representation
        head, elements = _chain(self.paths, column)
        text = self.tree(elements[0])
        for element in elements[1:]:
            if element <= -2:  # an edge label's key, before the next node's tree
                text += f"-[{-2 - element}]-"
            else:
                text += ("" if text.endswith("]-") else "-") + self.tree(element)
        return -1 - head, text


def _inverse(fitted: Vocabulary | None, fresh: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """``(prefix, element)`` arrays indexed by ID, from a fitted table and the fresh one after it."""
    size = fresh.size
    prefix = np.full(size, -1, dtype=np.int64)
    element = np.zeros(size, dtype=np.int64)
    for vocab in (fitted, fresh):
        if vocab is not None:
            keys, ids = table_to_arrays(vocab.table)
            prefix[ids], element[ids] = keys[:, 0], keys[:, 1]
    return prefix, element


def _chain(table: tuple[np.ndarray, np.ndarray], key: int) -> tuple[int, list[int]]:
    """``(head, elements)`` of ``key``'s chain: the negative prefix it starts from, and its
    elements in order."""
    prefix, element = table
    elements = [int(element[key])]
    while prefix[key] >= 0:
        key = prefix[key]
        elements.append(int(element[key]))
    return int(prefix[key]), elements[::-1]


def _graph_name(message: str) -> str:
    """A ``to_graph_set`` message about the pair ``[G, H]``, naming ``G`` or ``H``."""
    for index, name in ((0, "G"), (1, "H")):
        if message.startswith(f"graph {index}:"):
            return f"{name}{message.removeprefix(f'graph {index}')}"
    return message


def explain(model, G, H, top: int = 5, label_names: Mapping[int, str] | Sequence[str] | None = None) -> Explanation:
    """The optimal node-to-node plan behind ``W(G, H)``, each node's share of W, and the pairs
    of rows that carry most of it with the path representations they differ on.

    ``G`` and ``H`` are read as the fitted ``model`` reads new graphs (its vocabularies; any
    graphs, training graphs or not). The plan is of the exact W, whatever ``model.solver``.
    It is dense, ``[n_G, n_H]``.

    Args:
        model (MWSP): a fitted estimator.
        G, H (Data): the two graphs.
        top (int): how many pairs of rows to list (default ``5``).
        label_names (mapping or sequence, optional): a name for each integer node label, as
            :func:`mwsp_torch.datasets.node_label_names` reads them from a TU dataset's
            README (``{0: "C", 1: "N", ...}``; default: the integers).

    Returns:
        :class:`Explanation`.

    Raises:
        ValueError: for a model that is not a fitted ``MWSP``, a ``top`` below 0, or a
            graph the model cannot read (naming ``G`` or ``H``).
    """
    import ot

    if not hasattr(model, "node_rows") or not hasattr(model, "distances_"):
        raise ValueError(f"explain needs a fitted MWSP (call fit first), got {type(model).__name__}")
    if not isinstance(top, (int, np.integer)) or isinstance(top, bool) or top < 0:
        raise ValueError(f"top must be an integer >= 0, got {top!r}")
    try:
        rows = model.node_rows([G, H])
    except ValueError as err:
        raise ValueError(_graph_name(str(err))) from None
    support = rows.support
    lo, mid, hi = (int(i) for i in support.graph_ptr)
    sa, ca = support.support[lo:mid], support.counts[lo:mid]
    sb, cb = support.support[mid:hi], support.counts[mid:hi]
    na, nb = (int(n) for n in support.sizes)
    costs = cost_matrix(*bank_arrays(support.rows), sa, sb)
    # Integer masses, both summing to na * nb: the simplex's plan is then exact in float64.
    flow, log = ot.emd(
        (ca * nb).astype(np.float64), (cb * na).astype(np.float64), costs, numItermax=10_000_000, log=True
    )
    if log["warning"] is not None:
        raise RuntimeError(f"POT's network simplex did not finish: {log['warning']}")
    flow = flow / (na * nb)
    distance = float(exact_distances(support, support, np.array([[0, 1]]), n_jobs=1)[0])
    plan_cost = float((flow * costs).sum())
    if abs(plan_cost - distance) > PLAN_TOLERANCE * max(distance, plan_cost):
        raise RuntimeError(f"the plan costs {plan_cost!r}, the exact engine's W is {distance!r}")

    # Each node's support point, then its even part of that point's flow.
    point_g = np.searchsorted(sa, rows.row_ids[:na])
    point_h = np.searchsorted(sb, rows.row_ids[na : na + nb])
    node_costs = costs[np.ix_(point_g, point_h)]
    plan = flow[np.ix_(point_g, point_h)] / np.outer(ca[point_g], cb[point_h])
    paid = plan * node_costs

    decoder = _Decoder(rows, label_names)
    labels = [decoder.label(value) for value in rows.node_labels]
    order = sorted(
        ((flow[i, j] * costs[i, j], i, j) for i, j in zip(*np.nonzero(flow), strict=True) if costs[i, j] > 0),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    pairs = []
    for _, i, j in order[:top]:
        nodes_g = tuple(int(v) for v in np.flatnonzero(point_g == i))
        nodes_h = tuple(int(u) for u in np.flatnonzero(point_h == j))
        pairs.append(
            MatchedPair(
                nodes_g=nodes_g,
                nodes_h=nodes_h,
                label_g=labels[nodes_g[0]],
                label_h=labels[na + nodes_h[0]],
                flow=float(flow[i, j]),
                cost=float(costs[i, j]),
                differences=_differences(support.rows, sa[i], sb[j], decoder),
            )
        )
    return Explanation(
        distance=distance,
        plan=plan,
        costs=node_costs,
        node_share_g=paid.sum(axis=1),
        node_share_h=paid.sum(axis=0),
        pairs=pairs,
        labels_g=labels[:na],
        labels_h=labels[na : na + nb],
        # What the rows depend on (the plan is of the exact W, whatever the solver).
        settings={k: v for k, v in model.feature_settings().items() if k not in ("solver", "blur", "scaling")},
    )


def _differences(bank, row_g: int, row_h: int, decoder: _Decoder) -> list[PathDifference]:
    """The columns on which two rows of the bank differ, decoded, largest difference first."""
    a, b = bank[row_g], bank[row_h]
    weights: dict[int, list[float]] = {}
    for side, row in enumerate((a, b)):
        for column, value in zip(row.indices, row.data, strict=True):
            weights.setdefault(int(column), [0.0, 0.0])[side] = float(value)
    out = []
    for column, (wg, wh) in weights.items():
        if wg != wh:
            scale, path = decoder.path(column)
            out.append(PathDifference(scale=scale, path=path, weight_g=wg, weight_h=wh))
    out.sort(key=lambda p: (-abs(p.weight_g - p.weight_h), p.scale, p.path))
    return out


@dataclass(frozen=True)
class SupportContributions:
    """The terms of a binary SVM's decision on one new graph (:func:`svm_contributions`).

    Attributes:
        indices (np.ndarray): the support vectors' training graphs, largest ``|contribution|`` first.
        contributions (np.ndarray): ``dual_coef * K(new, sv)`` of each, same order; with
            ``intercept`` they sum to ``decision``.
        dual_coef (np.ndarray): the SVM's dual coefficients (``y_i alpha_i``), same order.
        kernel (np.ndarray): ``K(new, sv)``, same order.
        classes (np.ndarray): the class each support vector pulls towards (``classes_[1]``
            where its dual coefficient is positive).
        intercept (float): the SVM's intercept.
        decision (float): the decision function's value; ``classes_[1]`` when positive.
    """

    indices: np.ndarray
    contributions: np.ndarray
    dual_coef: np.ndarray
    kernel: np.ndarray
    classes: np.ndarray
    intercept: float
    decision: float


def svm_contributions(svc, kernel_row) -> SupportContributions:
    """The training graphs that weighed most in a binary ``SVC(kernel="precomputed")``'s
    decision on one graph: each support vector's ``dual_coef * K(new, sv)``.

    Args:
        svc: a fitted binary ``sklearn.svm.SVC(kernel="precomputed")``.
        kernel_row (array): ``[n_train]`` (or ``[1, n_train]``) the kernel between the new
            graph and the training graphs the SVM was fitted on, e.g.
            ``model.transform([graph])``.

    Returns:
        :class:`SupportContributions`.

    Raises:
        ValueError: for an SVM that is not fitted, not on a precomputed kernel, or not
            binary, or a kernel row of another length than its training set.
    """
    if not hasattr(svc, "dual_coef_") or not hasattr(svc, "support_"):
        raise ValueError(f"svm_contributions needs a fitted SVC, got {type(svc).__name__} without dual_coef_")
    if getattr(svc, "kernel", None) != "precomputed":
        raise ValueError(f"svm_contributions needs an SVC on a precomputed kernel, got kernel={svc.kernel!r}")
    if len(svc.classes_) != 2:
        raise ValueError(f"svm_contributions reads a binary SVC, this one has {len(svc.classes_)} classes")
    row = np.asarray(kernel_row, dtype=np.float64)
    if row.ndim == 2 and row.shape[0] == 1:
        row = row[0]
    n_train = svc.shape_fit_[1]
    if row.ndim != 1 or row.shape[0] != n_train:
        raise ValueError(
            f"kernel_row must hold one value per training graph ({n_train}), got shape {list(np.shape(kernel_row))}"
        )
    dual = np.asarray(svc.dual_coef_, dtype=np.float64)[0]
    kernel = row[svc.support_]
    contributions = dual * kernel
    order = np.lexsort((svc.support_, -np.abs(contributions)))
    intercept = float(svc.intercept_[0])
    return SupportContributions(
        indices=np.asarray(svc.support_)[order],
        contributions=contributions[order],
        dual_coef=dual[order],
        kernel=kernel[order],
        classes=np.where(dual[order] > 0, svc.classes_[1], svc.classes_[0]),
        intercept=intercept,
        decision=float(contributions.sum() + intercept),
    )


def explain_prediction(model, svc, graph) -> SupportContributions:
    """:func:`svm_contributions` for one new graph, its kernel row from ``model.transform``."""
    return svm_contributions(svc, model.transform([graph])[0])
