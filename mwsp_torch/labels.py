"""One integer label per node, read the same way for a whole dataset (``docs/definition.md``).

Labels come from ``data.node_label`` if present, else from a discrete ``data.x`` (one-hot,
as ``TUDataset`` stores it, or several one-hot blocks), else from a policy: ``"degree"``
(the paper's choice for IMDB-BINARY) or ``"uniform"`` (its choice for REDDIT-BINARY).
Multi-column labels (``node_label`` of shape ``[num_nodes, c]``, or a multi-hot ``x``)
become one categorical label per distinct row. Nothing is coerced silently: bad input
raises a ``ValueError`` that names the graph's index. :func:`to_graph_set` reads a list of
graphs (their structure by :func:`mwsp_torch.graphs.read_graphs`) into a
:class:`~mwsp_torch.graphs.GraphSet` with these labels.

How labels are read is decided once for a whole dataset and then kept
(:class:`LabelScheme`): ``x`` is read as one-hot only if every graph's ``x``
is one-hot with two or more columns (a single column is a label column), so
one column never means a label in one graph and a category in another; and
graphs read later (``transform``) must have labels from the same field
(``node_label``, ``x`` or the policy), of the width, and ``x`` of the kind, that the
fitted graphs had. One-hot ``x`` is read by column position, whatever its width.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from mwsp_torch._interning import Vocabulary, intern_pair
from mwsp_torch.compiled import kernel
from mwsp_torch.graphs import GraphSet, as_numpy, read_graphs

__all__ = [
    "LABEL_POLICIES",
    "LabelScheme",
    "edge_label_reader",
    "intern_rows",
    "to_graph_set",
]

LABEL_POLICIES = ("auto", "degree", "uniform")


@dataclass
class LabelScheme:
    """How node labels are read, fixed by the first graphs read and checked on later ones.

    Attributes:
        one_hot_x (bool, optional): whether ``x`` is read as one-hot (``None`` until a
            graph with labels from ``x`` has been read).
        width (int, optional): columns of a label row after that (``None`` until set).
        vocab (Vocabulary): IDs of multi-column label rows.
        source (str, optional): where labels come from, ``"node_label"``, ``"x"`` or the
            policy (``None`` until set; a class default, so schemes pickled before it read
            as unset). ``node_label`` and ``x`` may number labels differently (TUDataset's
            one-hot ``x`` starts at the smallest label), so they are never mixed.
    """

    one_hot_x: bool | None = None
    width: int | None = None
    vocab: Vocabulary = field(default_factory=Vocabulary)
    source: str | None = None


def _is_one_hot(lab: np.ndarray) -> bool:
    """Two or more columns of 0/1 with one 1 a row (a single column is a label column)."""
    return lab.ndim == 2 and lab.shape[1] >= 2 and bool(np.all((lab == 0) | (lab == 1)) and np.all(lab.sum(1) == 1))


def _unlabelled_row(lab: np.ndarray) -> int | None:
    """The first all-zero row of an ``x`` that is one-hot but for such rows (two or more
    columns of 0/1, at most one 1 a row), else None. Read as multi-column rows, such an
    ``x`` would silently make "no label" a label of its own."""
    if lab.ndim != 2 or lab.shape[1] < 2 or not np.all((lab == 0) | (lab == 1)):
        return None
    sums = lab.sum(1)
    if np.any(sums > 1) or np.all(sums == 1):
        return None
    return int(np.argmax(sums == 0))


def _integral(lab: np.ndarray) -> bool:
    """Every value finite and a whole number (float labels MWSP can read as categories)."""
    return bool(np.all(np.isfinite(lab)) and np.all(lab == np.round(lab)))


def _beyond_int64(lab: np.ndarray):
    """The first label that int64 cannot hold (floats from ``2**63`` on, or unsigned
    integers past ``2**63 - 1``), or None; labels are read as int64, so these would wrap."""
    if lab.size == 0:
        return None
    if np.issubdtype(lab.dtype, np.floating):
        if float(np.finfo(lab.dtype).max) < 2.0**63:  # float16: cannot get there (and 2**63 would overflow it)
            return None
        beyond = np.abs(lab) >= 2.0**63
    elif np.issubdtype(lab.dtype, np.unsignedinteger) and lab.dtype.itemsize >= 8:
        beyond = lab > np.iinfo(np.int64).max
    else:
        return None
    return lab.flat[int(np.argmax(beyond))].item() if beyond.any() else None


def _raw_labels(data, index: int) -> tuple[np.ndarray, str] | None:
    """``node_label`` or else ``x`` as a numpy array, unchecked, with its source; None if neither."""
    node_label = getattr(data, "node_label", None)
    if node_label is not None:
        return as_numpy(node_label, "node_label", index), "node_label"
    x = getattr(data, "x", None)
    if x is None:
        return None
    return as_numpy(x, "x", index), "x"


def _labels_at_once(raw: list, sizes: np.ndarray, scheme: LabelScheme) -> np.ndarray | None:
    """All graphs' label rows, checked and decoded as :func:`_checked_labels` and
    :func:`_apply_scheme` would do graph by graph, but by a few numpy calls on their
    concatenation; None (the scheme untouched) when the graphs differ in source, shape or
    dtype, or fail a check: the caller then goes graph by graph, which names the graph.

    Graph by graph cost about 20 us a graph in numpy calls on 30-row arrays, a third of
    the features of the 400-NCI1 check.
    """
    if not raw:
        return None
    source = raw[0][1]
    first = raw[0][0]
    ndim, dtype = first.ndim, first.dtype
    if ndim not in (1, 2) or any(s != source or a.ndim != ndim or a.dtype != dtype for a, s in raw):
        return None
    if ndim == 2 and (first.shape[1] == 0 or any(a.shape[1] != first.shape[1] for a, _ in raw)):
        return None
    if not np.array_equal(np.fromiter((a.shape[0] for a, _ in raw), dtype=np.int64, count=len(raw)), sizes):
        return None
    if scheme.source is not None and source != scheme.source:
        return None
    if dtype.kind not in "biuf":  # complex, object, ...: the graph-by-graph path names the graph
        return None
    lab = np.concatenate([a for a, _ in raw])
    if not np.issubdtype(dtype, np.integer):
        if source == "node_label" or not _integral(lab):
            return None
    if _beyond_int64(lab) is not None:
        return None
    lab = lab.astype(np.int64)
    if ndim == 1:
        lab = lab[:, None]
    if lab.size and lab.min() < 0:
        return None
    decode = False
    one_hot_x = scheme.one_hot_x
    if source == "x" and one_hot_x is not False:
        all_one_hot = _is_one_hot(lab)  # equal widths: the concatenation is one-hot iff every graph is
        if one_hot_x is None:
            if not all_one_hot and _unlabelled_row(lab) is not None:
                return None  # refused graph by graph, naming the graph and the node
            one_hot_x = all_one_hot
        if one_hot_x and not all_one_hot:
            return None
        decode = one_hot_x
    width = 1 if decode else lab.shape[1]
    if scheme.width is not None and width != scheme.width:
        return None
    scheme.one_hot_x, scheme.width, scheme.source = one_hot_x, width, source
    return lab.argmax(1)[:, None] if decode else lab


def _checked_labels(lab: np.ndarray, source: str, index: int, num_nodes: int) -> np.ndarray:
    """One graph's integer label rows (``x`` not yet decoded from one-hot), checked.

    ``x`` may be float (PyG stores one-hot ``x`` as float) with whole values; ``node_label``
    must be integer: it is the field for labels as they are, so it is never rounded or cast.
    """
    if lab.ndim == 2 and lab.shape[1] == 0:  # what TUDataset leaves in x for a dataset without node labels
        raise ValueError(
            f"graph {index}: {source} has no columns (shape {list(lab.shape)}), so no node labels; "
            "choose labels='degree' or labels='uniform'"
        )
    if lab.dtype.kind not in "biuf":
        raise ValueError(
            f"graph {index}: {source} has dtype {lab.dtype}; node labels must be integers (or, in x, whole floats)"
        )
    if not np.issubdtype(lab.dtype, np.integer):
        if source == "node_label":
            raise ValueError(
                f"graph {index}: node_label must be an integer tensor, got {lab.dtype} (node_label is read "
                "as given, never cast; only x may be float, as PyG stores one-hot x as float); if its values "
                "are whole numbers, pass node_label.long()"
            )
        if not _integral(lab):
            raise ValueError(
                f"graph {index}: x has non-integer values; MWSP needs discrete node labels. If x holds "
                "continuous attributes and then one-hot labels (PyG's TUDataset(use_node_attr=True)), pass "
                "MWSP(num_node_attributes=dataset.num_node_attributes), or the dataset itself; if it holds "
                "attributes only, choose labels='degree' or labels='uniform', or pass node_label "
                "(and attributes='node' to use the attributes)"
            )
    beyond = _beyond_int64(lab)
    if beyond is not None:
        raise ValueError(
            f"graph {index}: {source} has a label that int64 cannot hold ({beyond!r}); labels are read as int64"
        )
    if lab.ndim == 1:
        lab = lab[:, None]
    if lab.ndim != 2 or lab.shape[0] != num_nodes or lab.shape[1] == 0:
        raise ValueError(
            f"graph {index}: {source} must have one row per node ({num_nodes}), got shape {list(lab.shape)}"
        )
    if lab.size and lab.min() < 0:
        raise ValueError(f"graph {index}: {source} has a negative label ({int(lab.min())})")
    return lab.astype(np.int64)


def _found_labels(data, index: int) -> tuple[np.ndarray, str]:
    """:func:`_raw_labels`, which ``labels="auto"`` needs to find."""
    found = _raw_labels(data, index)
    if found is None:
        raise ValueError(f"graph {index}: has neither node_label nor x; choose labels='degree' or labels='uniform'")
    return found


def edge_label_reader(scheme: LabelScheme) -> Callable[[object, int, int], np.ndarray]:
    """A reader of one graph's edge labels, ``read(graph, index, num_edges)`` -> ``[num_edges]``
    int64, for :func:`mwsp_torch.graphs.read_graphs` (``docs/definition.md``, section 7).

    Labels come from ``edge_label`` if present, else ``edge_attr``: one row per column of
    ``edge_index``, a 1-D tensor or one column of integers (whole floats allowed in
    ``edge_attr``) read as they are, several columns (TUDataset's one-hot ``edge_attr``)
    one categorical label per distinct row, interned exactly in ``scheme.vocab``. Like node
    labels, the field and width are fixed by the first graph and checked on the others.
    A graph without edges needs no labels.
    """

    def read(data, index: int, num_edges: int) -> np.ndarray:
        found = None
        for source in ("edge_label", "edge_attr"):
            value = getattr(data, source, None)
            if value is not None:
                found = as_numpy(value, source, index), source
                break
        if found is None:
            if num_edges == 0:
                return np.empty(0, dtype=np.int64)
            raise ValueError(
                f"graph {index}: has {num_edges} edges but no edge labels (edge_label or edge_attr); "
                "edge_labels=True needs a label on every edge"
            )
        lab, source = found
        if lab.dtype.kind not in "biuf":
            raise ValueError(f"graph {index}: {source} has dtype {lab.dtype}; edge labels must be integers")
        if source == "edge_label" and lab.dtype.kind == "f":  # as node_label: never rounded or cast
            raise ValueError(
                f"graph {index}: edge_label must be an integer tensor, got {lab.dtype} (edge_label is read as "
                "the labels themselves; whole floats are read from edge_attr only, as TUDataset's one-hot rows)"
            )
        if lab.ndim == 1:
            lab = lab[:, None]
        if lab.ndim != 2 or lab.shape[1] == 0:
            raise ValueError(
                f"graph {index}: {source} must be [num_edges] or [num_edges, columns], got {list(lab.shape)}"
            )
        if lab.shape[0] != num_edges:
            raise ValueError(
                f"graph {index}: {source} has {lab.shape[0]} rows for {num_edges} edges (edge_index columns); "
                "edge labels must be given for every edge or for none"
            )
        if not np.issubdtype(lab.dtype, np.integer) and not _integral(lab):
            raise ValueError(
                f"graph {index}: {source} has values that are not whole numbers (NaN, infinite or fractional); "
                "edge labels are categories, continuous edge attributes are not read"
            )
        beyond = _beyond_int64(lab)
        if beyond is not None:
            raise ValueError(f"graph {index}: {source} has a label that int64 cannot hold ({beyond!r})")
        lab = lab.astype(np.int64)
        if lab.size and lab.min() < 0:
            raise ValueError(f"graph {index}: {source} has a negative edge label ({int(lab.min())})")
        if scheme.source is None:
            scheme.source, scheme.width = source, lab.shape[1]
        elif source != scheme.source:
            raise ValueError(
                f"graph {index}: edge labels are read from {source}, but the graphs read before it had theirs "
                f"from {scheme.source}; give every graph the same field"
            )
        elif lab.shape[1] != scheme.width:
            raise ValueError(
                f"graph {index}: edge labels have {lab.shape[1]} columns ({source}), "
                f"the graphs read before it have {scheme.width}"
            )
        return lab[:, 0].copy() if lab.shape[1] == 1 else intern_rows(lab, scheme.vocab)

    return read


def to_graph_set(
    graphs,
    labels: str = "auto",
    scheme: LabelScheme | None = None,
    edge_scheme: LabelScheme | None = None,
) -> GraphSet:
    """Validate graphs and flatten them into a :class:`GraphSet`.

    Args:
        graphs: a list of PyG ``Data`` or a PyG dataset.
        labels (str): ``"auto"`` (``node_label``, else discrete ``x``),
            ``"degree"`` or ``"uniform"`` (default ``"auto"``).
        scheme (LabelScheme, optional): how labels are read; what it leaves
            unset is decided from these graphs and written into it, what it
            sets is checked, so equal label rows get equal labels across
            calls that share it (fit and transform). Default: a fresh one.
        edge_scheme (LabelScheme, optional): with it, edge labels are read too
            (:func:`edge_label_reader`), kept alike across calls that share it, and put in
            ``edge_labels``; without it (default) they are not read.

    Raises:
        ValueError: naming the graph's index, for an item that is not a ``Data`` (a
            ``Batch`` included), an empty graph or a bad ``num_nodes``, a bad ``edge_index``,
            negative, non-integer or out-of-int64 labels, sparse or zero-column
            ``node_label``/``x``, missing labels under ``"auto"``, label
            rows of differing widths, or labels that differ from the scheme's (field,
            one-hot ``x`` or not, width); without an index, for a single graph, a
            ``Batch`` or a ``DataLoader`` in place of a list.
    """
    if labels not in LABEL_POLICIES:
        raise ValueError(f"labels must be one of {LABEL_POLICIES}, got {labels!r}")
    each = _found_labels if labels == "auto" else None
    edge_values = None
    if edge_scheme is None:
        ptr, indptr, flat_indices, raw = read_graphs(graphs, each)
    else:
        ptr, indptr, flat_indices, raw, edge_values = read_graphs(graphs, each, edge_label_reader(edge_scheme))
    if scheme is None:
        scheme = LabelScheme()
    sizes = np.diff(ptr)
    label_mat = _labels_at_once(raw, sizes, scheme) if labels == "auto" else None
    if label_mat is None:  # graph by graph: other policies, and any input the fast path declines
        if labels == "auto":
            label_rows = [_checked_labels(lab, source, i, sizes[i]) for i, (lab, source) in enumerate(raw)]
            sources = [source for _, source in raw]
        else:
            per_node = np.diff(indptr) if labels == "degree" else np.zeros(ptr[-1], dtype=np.int64)
            label_rows = np.split(per_node[:, None], ptr[1:-1])
            sources = [labels] * len(sizes)
        _apply_scheme(label_rows, sources, scheme)
        label_mat = np.concatenate(label_rows)
    if label_mat.shape[1] == 1:
        node_labels = label_mat[:, 0].copy()
    else:
        node_labels = intern_rows(label_mat, scheme.vocab)
    return GraphSet(ptr=ptr, indptr=indptr, indices=flat_indices, labels=node_labels, edge_labels=edge_values)


def _apply_scheme(label_rows: list, sources: list, scheme: LabelScheme) -> None:
    """Decode one-hot ``x`` in place, if the scheme says so or (unset) every ``x`` is one-hot;
    then check that every graph's label width is the scheme's (set by the first graph if unset)."""
    for i, source in enumerate(sources):
        if scheme.source is None:
            scheme.source = source
        elif source != scheme.source:
            raise ValueError(
                f"graph {i}: labels are read from {source}, but the graphs read before it had theirs from "
                f"{scheme.source} (node_label and x may number labels differently: TUDataset's one-hot x starts "
                "at the smallest label); give every graph the same field"
            )
    from_x = [i for i, source in enumerate(sources) if source == "x"]
    # One pass over each x, none once the scheme has already said x is not one-hot.
    one_hot = {} if scheme.one_hot_x is False else {i: _is_one_hot(label_rows[i]) for i in from_x}
    if from_x and scheme.one_hot_x is None:
        scheme.one_hot_x = all(one_hot.values())
        if not scheme.one_hot_x and all(one_hot[i] or _unlabelled_row(label_rows[i]) is not None for i in from_x):
            i = next(i for i in from_x if not one_hot[i])
            node = _unlabelled_row(label_rows[i])
            raise ValueError(
                f"graph {i}: node {node}'s row of x is all zeros (no label), and every row of x is one-hot "
                "or all zeros; read as multi-column rows, no label would become a label of its own. "
                "Give every node a label, or pass node_label (node_label=x.long() reads the rows as given), "
                "or choose labels='degree' or labels='uniform'"
            )
    if scheme.one_hot_x:
        for i in from_x:
            if not one_hot[i]:
                raise ValueError(
                    f"graph {i}: x is not one-hot (two or more columns of 0/1, one 1 a row), but the "
                    "graphs read before it had one-hot x; pass the labels as node_label instead"
                )
            label_rows[i] = label_rows[i].argmax(1)[:, None]  # what TUDataset stores
    for i, lab in enumerate(label_rows):
        if scheme.width is None:
            scheme.width = lab.shape[1]
        elif lab.shape[1] != scheme.width:
            raise ValueError(
                f"graph {i}: labels have {lab.shape[1]} columns ({sources[i]}), "
                f"the graphs read before it have {scheme.width}"
            )


def intern_rows(rows: np.ndarray, vocab: Vocabulary) -> np.ndarray:
    """One categorical ID per distinct integer row, exact (a trie of pairs); grows ``vocab``."""
    out, vocab.table = _intern_rows_kernel(
        np.ascontiguousarray(rows, dtype=np.int64), Vocabulary().table, vocab.table, vocab.offset
    )
    return out


@njit(cache=True)
def _intern_rows(rows, frozen, fresh, offset):
    out = np.empty(rows.shape[0], dtype=np.int64)
    for i in range(rows.shape[0]):
        h = -1
        for j in range(rows.shape[1]):
            h, fresh = intern_pair(frozen, fresh, offset, h, rows[i, j])
        out[i] = h
    return out, fresh


_intern_rows_kernel = kernel("intern_rows", "i2 i1 i1 i", "Tuple((int64[::1], int64[::1]))")(_intern_rows)
