"""Distance matrices cached on disk, one file per (dataset, setting).

Distances use no class labels, so one matrix per ``(d, k)`` serves every
protocol, ``lam`` and fold. The key covers everything that changes W: the
setting, and the graphs' own content as W reads it (:func:`graphs_fingerprint`),
so a dataset of the same name read from other files is never served another's W, and a
format number (``CACHE_FORMAT``) raised whenever W's definition changes. A stored matrix
is checked before it is served (float64 ``[n, n]``, finite, ``>= 0``, symmetric, zero
diagonal); one that fails is named in a warning and computed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from pathlib import Path

import numpy as np
from sklearn.base import clone

from mwsp_torch.attributes import read_attributes
from mwsp_torch.datasets import resolve_cache_dir
from mwsp_torch.graphs import as_graph_list
from mwsp_torch.labels import LabelScheme, to_graph_set

__all__ = ["CACHE_FORMAT", "cached_distances", "graphs_fingerprint"]

#: Part of every key: raised whenever this library's W for a setting changes (a fix to the
#: definition, a new default), so matrices of older versions are never served.
CACHE_FORMAT = 1


def cached_distances(
    model, graphs, dataset: str, *, cache_dir: str | os.PathLike | None = None
) -> tuple[np.ndarray, dict]:
    """W of ``model`` on ``graphs``, read from the cache when this exact setting was computed before.

    Args:
        model (MWSP): the setting. What decides W (:meth:`MWSP.feature_settings
            <mwsp_torch.MWSP.feature_settings>`: ``d``, ``k``, ``paths``, ``labels``, the solver
            with Sinkhorn's ``blur`` and ``scaling``, the extensions when on) is part of the key;
            how it is computed (engine, ``device``, ``n_jobs``, ``checkpoint``, ``progress``,
            ``client``) is not: the exact engines agree to 1e-9, and so do the Sinkhorn
            backends, all in float64. A clone of it is fitted on a miss; ``model`` itself is
            left as it is.
        graphs: the dataset's graphs (their number and content, as :func:`graphs_fingerprint`
            reads it, are part of the key).
        dataset (str): name, part of the key and the file name.
        cache_dir (str, optional): default ``$MWSP_CACHE_DIR`` or ``~/.cache/mwsp_torch``.

    Returns:
        ``(W, timings)``; timings is the ``timings_`` of the fit that computed W
        (``features`` and ``transport`` seconds, pair counts, and with Sinkhorn its measured
        error, see :class:`mwsp_torch.MWSP`), and ``cached`` (bool).

    Raises:
        ValueError: for a bad parameter, as :class:`mwsp_torch.MWSP` does, or for a bad
            graph, naming its index, as :func:`mwsp_torch.labels.to_graph_set` does.
    """
    model.validate_params()  # a cache hit must not let bad parameters pass unseen
    if not isinstance(dataset, str) or not dataset or Path(dataset).name != dataset or dataset in (".", ".."):
        raise ValueError(f"dataset must be a plain name (it names the cache file), got {dataset!r}")
    # The setting is what the estimator itself holds W to (what transform may not change).
    key = json.dumps(
        {
            "dataset": dataset,
            "n": len(graphs),
            "format": CACHE_FORMAT,
            **model.feature_settings(),
            "graphs": graphs_fingerprint(
                graphs, labels=model.labels, edge_labels=model.edge_labels, attributes=model.attributes is not None
            ),
        },
        sort_keys=True,
    )
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    extensions = ("-edges" if model.edge_labels else "") + (
        f"-{model.attributes}{float(model.beta):g}" if model.attributes else ""
    )
    path = resolve_cache_dir(cache_dir) / "distances" / f"{dataset}-d{model.d}-k{model.k}{extensions}-{digest}.npz"
    if path.is_file():
        try:
            stored = np.load(path)
            if not isinstance(stored, np.lib.npyio.NpzFile):  # a bare .npy loads as an array
                raise ValueError(f"not an .npz archive but a bare {type(stored).__name__}")
            with stored:
                timings = {"features": float(stored["features"]), "transport": float(stored["transport"])}
                # The rest of the run's timings_ (pair counts, Sinkhorn's measured error).
                rest = [name for name in stored.files if name not in ("distances", *timings)]
                timings.update({name: stored[name].item() for name in rest})
                distances = stored["distances"]
            _check_stored(distances, len(graphs))
            return distances, {**timings, "cached": True}
        except Exception as err:  # a damaged header can raise SyntaxError, TokenError, ...
            warnings.warn(f"cached distances {path} cannot be read ({err}); computing them again", stacklevel=2)
    model = clone(model).fit(graphs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.npz")
    np.savez(tmp, distances=model.distances_, **model.timings_)
    os.replace(tmp, path)
    return model.distances_, {**model.timings_, "cached": False}


def _check_stored(distances: np.ndarray, n: int) -> None:
    """What every W this library writes is: ``[n, n]`` float64, finite, ``>= 0``, symmetric,
    zero on the diagonal. A file that is not (damaged, or written by something else) raises."""
    if distances.dtype != np.float64 or distances.shape != (n, n):
        raise ValueError(f"holds a {distances.dtype} matrix of shape {distances.shape}, not ({n}, {n}) float64")
    if not np.all(np.isfinite(distances)) or distances.min(initial=0.0) < 0:
        raise ValueError("holds entries that are not finite and >= 0")
    if not np.array_equal(distances, distances.T) or np.any(np.diagonal(distances) != 0):
        raise ValueError("holds a matrix that is not symmetric with a zero diagonal")


def graphs_fingerprint(graphs, labels: str = "auto", edge_labels: bool = False, attributes: bool = False) -> str:
    """SHA-1 of the graphs as W reads them: the arrays of :func:`mwsp_torch.labels.to_graph_set`.

    W is computed from those arrays alone (node offsets, the symmetric loop-free CSR
    adjacency and one integer label per node), so every input form that ``MWSP`` accepts is
    covered (``edge_index`` dense or sparse, ``adj_t``, labels from ``node_label`` or ``x``),
    the same graphs in different forms share a fingerprint, and what W ignores (edge
    weights, ``edge_attr``, ``x`` beside ``node_label``) does not change it. Reading NCI1's
    4,110 graphs this way takes about 0.1 s.

    Args:
        graphs: a list of PyG ``Data`` or a PyG dataset.
        labels (str): the label policy, as in :class:`mwsp_torch.MWSP` (default ``"auto"``).
        edge_labels (bool): also the edge labels, as ``MWSP(edge_labels=True)`` reads them
            (default ``False``: the fingerprint is the label-only one).
        attributes (bool): also the node attributes, as ``MWSP(attributes=...)`` reads them
            (default ``False``).

    Returns:
        40 hex digits.

    Raises:
        ValueError: naming the graph's index, for a graph that ``MWSP`` would refuse.
    """
    if attributes:
        graphs = as_graph_list(graphs)
    graph_set = to_graph_set(graphs, labels=labels, edge_scheme=LabelScheme() if edge_labels else None)
    digest = hashlib.sha1()
    for name in ("ptr", "indptr", "indices", "labels") + (("edge_labels",) if edge_labels else ()):
        array = np.ascontiguousarray(getattr(graph_set, name), dtype=np.int64)
        digest.update(f"{name}:{array.shape}".encode())
        digest.update(array.tobytes())
    if attributes:
        array = np.ascontiguousarray(read_attributes(graphs, graph_set.sizes, labels=labels))
        digest.update(f"attributes:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
