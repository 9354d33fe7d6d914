"""The scikit-learn estimator: graphs in, MWSP distances and kernels out.

A thin stateful layer over the pure functions of ``graphs -> labels -> trees -> paths ->
transport -> kernel``. ``fit`` learns the vocabularies (label rows, trees,
path representations, distinct node rows) and the training distances;
``transform`` gives unseen trees, paths and rows fresh IDs in throw-away
tables, so the fitted state never changes.

W depends on neither ``lam`` nor an SVM's ``C``, so a search over them needs it once per
training fold: the clones of one estimator share their fits and transforms through
:mod:`mwsp_torch.fit_cache`. Inside a joblib worker process, ``n_jobs=-1`` means the worker's
share of the cores (what joblib gives its inner thread pools), not every core.
"""

from __future__ import annotations

import copy
import hashlib
import time
import uuid
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from mwsp_torch._checks import check_parameter
from mwsp_torch._interning import Vocabulary
from mwsp_torch.attributes import (
    dataset_attribute_columns,
    multiscale_attributes,
    read_attributes,
    split_attribute_columns,
    standardisation,
    with_attributes,
)
from mwsp_torch.fit_cache import (
    FIT_CACHE,
    NOT_IN_KEY,
    graphs_digest,
    joblib_worker_threads,
    nbytes,
)
from mwsp_torch.graphs import as_graph_list
from mwsp_torch.kernel import laplacian_kernel
from mwsp_torch.labels import LabelScheme, to_graph_set
from mwsp_torch.paths import node_feature_maps
from mwsp_torch.progress import ProgressBar
from mwsp_torch.transport import Exact, RowVocabulary, Sinkhorn, SupportSet, collapse, distances, upper_pairs
from mwsp_torch.transport.engines import SinkhornOnCPUWarning, build_cpu_kernels
from mwsp_torch.transport.solvers import check_execution, solver_options
from mwsp_torch.trees import tree_ids

__all__ = ["MWSP", "NodeRows"]


class MWSP(TransformerMixin, BaseEstimator):
    """Multi-scale Wasserstein shortest-path kernel ``K = exp(-lam W)`` (``docs/definition.md``).

    Each node's row counts the shortest paths of up to ``d`` edges that leave it, each path
    named by the canonical trees (scales ``0..k``) of the nodes on it; a graph is the uniform
    measure on its nodes' rows, and ``W(G, H)`` the exact optimal transport between two graphs'
    measures under the Euclidean cost between rows. ``fit`` learns the vocabularies and the
    training ``distances_``; ``transform`` gives ``exp(-lam W)`` between new graphs and the
    training graphs. W uses no class labels and does not depend on ``lam``: ``lam`` may be
    swept without computing W again.

    Args:
        d (int): maximal shortest-path length in edges (default ``2``; the paper's tables
            print one less, so their ``d=1`` is ``d=2`` here).
        k (int): deepest tree scale (default ``0``).
        lam (float): kernel parameter in ``exp(-lam W)`` (default ``1.0``).
        paths (str): ``"split"`` (each endpoint mass 1, split over its shortest paths) or
            ``"all"`` (each shortest path 1) (default ``"split"``).
        labels (str): ``"auto"`` (the graphs' node labels), ``"degree"`` or ``"uniform"``
            (default ``"auto"``).
        edge_labels (bool): read edge labels (``edge_label``, else ``edge_attr``: one
            categorical label per edge, one per distinct row of several columns) into the trees
            and paths (``docs/definition.md``, section 7) (default ``False``).
        attributes (str, optional): continuous node attributes (``node_attr``, else an ``x``
            that does not hold the labels) appended to each node's row as ``beta * a(v)``:
            ``"node"`` (its own, standardised on the ``fit`` graphs) or ``"multiscale"`` (its own,
            then the mean over the nodes at distance ``1..d``) (default ``None``: not read).
        beta (float): weight of the attributes in a row, ``> 0`` (default ``1.0``; read only
            with ``attributes``).
        num_node_attributes (int, optional): PyG's layout of ``x``: its first
            ``num_node_attributes`` columns are continuous attributes and the rest the one-hot
            labels, as ``TUDataset(name, use_node_attr=True)`` stores them. ``0``: ``x`` is read
            as it is (default ``None``: the dataset's ``num_node_attributes`` when ``fit`` is
            given a ``TUDataset`` whose ``x`` holds them, else ``0``).
        solver (str, Exact or Sinkhorn): how W is solved: ``"exact"`` (the default) stands for
            :class:`~mwsp_torch.transport.Exact` ``()``, the transportation simplex equal to
            POT's network simplex to 1e-9, ``Exact(engine=...)`` picking its engine;
            ``"sinkhorn"`` for :class:`~mwsp_torch.transport.Sinkhorn` ``()``, an approximation
            with its ``blur``, ``scaling``, ``backend`` and ``check_pairs`` (whose measured error
            ``fit`` reports). Their options are nested parameters (``solver__blur``).
        device (str): torch device (default ``"cpu"``) of Sinkhorn and of the thread exact
            engine (the compiled engine runs on the CPU).
        n_jobs (int): CPU threads of the exact engines, ``-1`` for all cores (default ``-1``:
            like torch's own operations, and unlike scikit-learn's ``None``, a fit uses every
            core unless told otherwise; W does not depend on it). Inside a joblib worker process,
            ``-1`` is the worker's share of the cores.
        checkpoint (str, optional): directory for finished tiles of the compiled exact
            engine; a killed ``fit`` started again recomputes only unfinished tiles and ends with
            the identical matrix (default: none).
        progress (bool): tqdm bars over graphs (tree IDs, then paths) and over pairs
            (default ``False``).
        client (distributed.Client or str, optional): a Dask client, or a scheduler's address,
            to run the compiled exact engine's tiles as tasks on its workers
            (:mod:`mwsp_torch.distributed`): the same W bit for bit, with ``checkpoint``
            sharing the in-process tiles (default ``None``: this process).

    Attributes:
        distances_ (np.ndarray): ``[n, n]`` float64 W between training graphs.
        features_ (scipy.sparse.csr_matrix): each training node's row, the point its graph's
            measure puts mass on: ``phi(v)``, or with ``attributes`` ``beta * a(v)`` in columns
            ``0 .. w - 1`` (``w`` attributes, times ``d + 1`` for ``"multiscale"``) followed by
            ``phi(v)``. :meth:`node_rows` gives the same rows for any graphs.
        attribute_mean_, attribute_scale_ (np.ndarray or None): the standardisation of the
            attributes fitted on the training graphs (None without ``attributes``).
        num_node_attributes_ (int): the leading attribute columns of ``x`` that ``fit`` read;
            ``transform`` reads new graphs alike.
        label_scheme_ (LabelScheme): how the training graphs' labels were read (one-hot
            ``x`` or not, label width); ``transform`` reads new graphs the same way.
        tree_vocab_, path_vocab_ (Vocabulary), row_vocab_ (transport.RowVocabulary):
            fitted tables.
        timings_ (dict): seconds spent in ``features`` and ``transport`` (a first use's
            build of the CPU kernels excluded:
            :func:`~mwsp_torch.transport.engines.build_cpu_kernels`), how many distinct
            measures (graphs up to an equal node-row distribution) and pairs the transport
            solved, and the ``engine`` that solved them (``"compiled"``, ``"thread"``,
            ``"sinkhorn"``, or ``"dask"`` with a ``client``); with a
            ``checkpoint``, ``pairs_from_checkpoint`` (``transport`` then timed only the rest);
            with Sinkhorn, also ``sinkhorn_check`` (seconds), ``sinkhorn_check_pairs`` and
            ``sinkhorn_error_``'s three figures.
        sinkhorn_error_ (dict or None): with Sinkhorn, the approximation measured on ``pairs``
            random training pairs (seeded, so a refit measures the same ones):
            ``median_relative`` and ``max_relative`` error against exact W (pairs with W > 0)
            and ``max_absolute``, the largest among those pairs, not a bound over all pairs,
            with the ``blur`` and ``scaling`` used. ``None`` for the exact solver or
            ``check_pairs=0``.

    What decides the features or the meaning of W (``d``, ``k``, ``paths``, ``labels``, the
    solver, with Sinkhorn its ``blur`` and ``scaling``, and the extensions:
    :meth:`feature_settings`) is that of the last ``fit``: changing it with ``set_params``
    needs a refit before ``transform`` (an error says so). The rest (``lam``, the exact engine,
    Sinkhorn's ``backend`` and ``check_pairs``, and the execution parameters) may change freely.

    The clones of an estimator (``sklearn.base.clone``, as ``GridSearchCV`` makes them) share
    their fits: a clone's ``fit`` on graphs with the same content, with the same parameters but
    ``lam``, ``n_jobs`` and ``progress``, copies the fitted state of the earlier fit instead of
    computing W again (``timings_["from_cache"]`` is then ``True``), and likewise ``transform``
    on the same graphs. Not with a ``checkpoint`` or a ``client``. The cache is in-process,
    least recently used first out, bounded by ``$MWSP_FIT_CACHE_MB`` (default 512 MiB; ``0``
    turns it off); :func:`mwsp_torch.fit_cache.clear_fit_cache` empties it.

    Sinkhorn pays on a GPU; on a CPU the exact solver is both faster and exact, so ``fit``
    warns there (:class:`~mwsp_torch.transport.engines.SinkhornOnCPUWarning`). How fast each
    engine is: ``docs/engines.md``, ``docs/gpu.md`` and ``docs/performance.md``.

    Examples:
        >>> from mwsp_torch import MWSP, make_csl
        >>> graphs, y = make_csl(graphs_per_class=2)
        >>> model = MWSP(d=3, k=0).fit(graphs[:12])
        >>> model.distances_.shape, model.transform(graphs[12:]).shape
        ((12, 12), (8, 12))
        >>> from mwsp_torch.transport import Sinkhorn
        >>> MWSP(d=3, solver=Sinkhorn(blur=0.05)).get_params()["solver__blur"]
        0.05
    """

    def __init__(
        self,
        *,
        d: int = 2,
        k: int = 0,
        lam: float = 1.0,
        paths: str = "split",
        labels: str = "auto",
        edge_labels: bool = False,
        attributes: str | None = None,
        beta: float = 1.0,
        num_node_attributes: int | None = None,
        solver: str | Exact | Sinkhorn = "exact",
        device: str = "cpu",
        n_jobs: int = -1,
        checkpoint: str | None = None,
        progress: bool = False,
        client=None,
    ) -> None:
        self.d = d
        self.k = k
        self.lam = lam
        self.paths = paths
        self.labels = labels
        self.edge_labels = edge_labels
        self.attributes = attributes
        self.beta = beta
        self.num_node_attributes = num_node_attributes
        self.solver = solver
        self.device = device
        self.n_jobs = n_jobs
        self.checkpoint = checkpoint
        self.progress = progress
        self.client = client

    def __sklearn_clone__(self) -> MWSP:
        """A clone that shares ``client`` (a connection, which cannot be deep-copied) and copies
        every other parameter, as :func:`sklearn.base.clone` does; it joins this estimator's
        family, whose members share their fits (the class docstring)."""
        client = self.client
        try:
            self.client = None
            new = super().__sklearn_clone__()
        finally:
            self.client = client
        new.client = client
        new._clone_family = self.__dict__.setdefault("_clone_family", uuid.uuid4().hex)
        return new

    #: The parameters checked against :data:`mwsp_torch._checks.PARAMETERS` by name.
    _TABLE_CHECKED = ("d", "k", "lam", "paths", "labels", "edge_labels", "attributes", "beta", "num_node_attributes")

    def validate_params(self) -> None:
        """Check every parameter, before any work, so that a bad one fails in seconds rather
        than after the features: each against :data:`mwsp_torch._checks.PARAMETERS` (the table
        the command line reads too), then what the solver needs of ``device``, ``checkpoint``
        and ``client`` (:func:`~mwsp_torch.transport.solvers.check_execution`). ``fit`` and
        ``cross_distances`` call it; a caller that skips ``fit`` (a cache of W, say) calls it
        to refuse what ``fit`` would refuse.

        Raises:
            ParameterError: a ValueError naming the parameter and the values it takes.
        """
        for name in self._TABLE_CHECKED:
            check_parameter(name, getattr(self, name))
        check_parameter("n_jobs", self.n_jobs)
        check_execution(self.solver, self.device, self.checkpoint, self.client)

    def _solver(self) -> Exact | Sinkhorn:
        """``solver`` as an options object (``"exact"`` is ``Exact()``, ``"sinkhorn"`` ``Sinkhorn()``)."""
        return solver_options(self.solver)

    def supports(self, graphs) -> tuple[SupportSet, sp.csr_matrix]:
        """The graphs as transport measures, as ``fit`` computes them before its transport,
        with vocabularies of their own: nothing is fitted or changed. For timing or running
        the transport alone (``transport.exact_distances`` and its siblings take the
        support sets).

        Args:
            graphs: a list of PyG ``Data`` or a PyG dataset.

        Returns:
            ``(support_set, features)``: a ``transport.SupportSet`` (the distinct node rows
            and each graph's weighted support on them) and the ``[num_nodes, num_features]``
            sparse node feature maps.
        """
        self.validate_params()
        return self._features(graphs, fitted=False)

    def _features(self, graphs, fitted: bool, tables: dict | None = None) -> tuple[SupportSet, sp.csr_matrix]:
        """Supports of ``graphs``; during ``fit`` the vocabularies grow (and are put in ``tables``
        for ``fit`` to keep once all of it has succeeded), after it they are frozen."""
        if fitted:
            label_scheme = copy.deepcopy(self.label_scheme_)
            edge_scheme = copy.deepcopy(getattr(self, "edge_label_scheme_", None))
            tree_frozen, path_frozen = self.tree_vocab_, self.path_vocab_
            tree_vocab = Vocabulary(offset=tree_frozen.size)
            path_vocab = Vocabulary(offset=path_frozen.size)
            row_vocab = RowVocabulary(frozen=self.row_vocab_)
        else:
            label_scheme, tree_vocab, path_vocab, row_vocab = LabelScheme(), Vocabulary(), Vocabulary(), RowVocabulary()
            edge_scheme = LabelScheme() if self.edge_labels else None
            tree_frozen = path_frozen = None
        count = self._attribute_count(graphs, fitted)
        if count:
            graphs = split_attribute_columns(graphs, count, self.labels)
        if self.attributes is not None:
            graphs = as_graph_list(graphs)  # read twice: labels and structure, then attributes
        graph_set = to_graph_set(graphs, labels=self.labels, scheme=label_scheme, edge_scheme=edge_scheme)
        with ProgressBar(total=graph_set.num_graphs, desc="trees", unit="graph", disable=not self.progress) as bar:
            trees = tree_ids(graph_set, self.k, tree_vocab, frozen=tree_frozen, progress=bar.update)
        with ProgressBar(total=graph_set.num_graphs, desc="paths", unit="graph", disable=not self.progress) as bar:
            features = node_feature_maps(
                graph_set, trees, self.d, self.paths, path_vocab, frozen=path_frozen, progress=bar.update
            )
        mean = scale = None
        if self.attributes is not None:
            values = read_attributes(graphs, graph_set.sizes, labels=self.labels)
            if fitted:
                mean, scale = self.attribute_mean_, self.attribute_scale_
                if values.shape[1] != len(mean):
                    raise ValueError(
                        f"the graphs have {values.shape[1]} attribute columns, the fitted graphs had {len(mean)}"
                    )
            else:
                mean, scale = standardisation(values)
            values = (values - mean) / scale
            if self.attributes == "multiscale":
                values = multiscale_attributes(graph_set, values, self.d)
            features = with_attributes(features, values, float(self.beta))
        row_ids = row_vocab.intern(features)
        if fitted:
            # Bank = fitted rows, then this call's fresh rows (IDs continue the fitted ones).
            fresh = row_ids >= self.row_vocab_.size
            fresh_ids, first = np.unique(row_ids[fresh], return_index=True)
            new_rows = features[np.flatnonzero(fresh)[first]]
            width = max(features.shape[1], self.rows_.shape[1])
            bank = sp.vstack([_widen(self.rows_, width), _widen(new_rows, width)], format="csr")
            if tables is not None:  # node_rows: what names this call's columns, fresh IDs included
                tables.update(
                    graph_set=graph_set, tree_ids=trees, row_ids=row_ids, label_scheme=label_scheme,
                    tree_vocabs=(tree_frozen, tree_vocab), path_vocabs=(path_frozen, path_vocab),
                )  # fmt: skip
        else:
            if tables is not None:
                tables.update(
                    label_scheme_=label_scheme,
                    edge_label_scheme_=edge_scheme,
                    tree_vocab_=tree_vocab,
                    path_vocab_=path_vocab,
                    row_vocab_=row_vocab,
                    attribute_mean_=mean,
                    attribute_scale_=scale,
                    num_node_attributes_=count,
                )
            _, first = np.unique(row_ids, return_index=True)
            bank = features[first]
        bank.sort_indices()
        graph_ptr, support, counts = collapse(row_ids, graph_set.ptr, bank.shape[0])
        support_set = SupportSet(rows=bank, graph_ptr=graph_ptr, support=support, counts=counts, sizes=graph_set.sizes)
        return support_set, features

    def _attribute_count(self, graphs, fitted: bool) -> int:
        """The leading attribute columns of ``x``: ``num_node_attributes``, else (``None``) the
        dataset's in ``fit`` and the fitted count after it."""
        found = dataset_attribute_columns(graphs)
        if self.num_node_attributes is not None:
            return int(self.num_node_attributes)
        if not fitted:
            return found
        count = getattr(self, "num_node_attributes_", 0)
        if found and found != count:
            raise ValueError(
                f"the dataset's x holds {found} attribute columns (num_node_attributes), the fitted graphs' {count}"
            )
        return count

    def _n_threads(self) -> int:
        """``n_jobs``, except that ``-1`` inside a joblib worker process is the worker's share of
        the cores (:func:`joblib_worker_threads`)."""
        if self.n_jobs == -1:
            return joblib_worker_threads() or -1
        return self.n_jobs

    def _distances(
        self, left: SupportSet, right: SupportSet, pairs: np.ndarray, stats: dict | None = None
    ) -> np.ndarray:
        """The pairs' values by :func:`~mwsp_torch.transport.distances`, under a progress bar."""
        with ProgressBar(total=len(pairs), desc="transport", unit="pair", disable=not self.progress) as bar:
            return distances(
                left,
                right,
                pairs,
                solver=self._solver(),
                device=self.device,
                n_jobs=self._n_threads(),
                checkpoint=self.checkpoint,
                client=self.client,
                progress=bar.update,
                stats=stats,
            )

    def feature_settings(self) -> dict:
        """The parameters that ``distances_`` and the fitted vocabularies depend on: ``d``,
        ``k``, ``paths``, ``labels``, ``solver`` (its name), with Sinkhorn ``blur`` and
        ``scaling``, and the extensions when they are on (``edge_labels``; ``attributes`` and
        ``beta``; ``num_node_attributes``). What a cache of W keys on, and what ``transform``
        refuses to see changed after ``fit``.

        Returns:
            ``{name: value}``.
        """
        solver = self._solver()
        settings = {"d": self.d, "k": self.k, "paths": self.paths, "labels": self.labels, "solver": solver.name}
        if isinstance(solver, Sinkhorn):
            settings.update(blur=solver.blur, scaling=solver.scaling)
        # Extensions join the settings only when on, so the keys of label-only W stay as they were.
        if self.edge_labels:
            settings.update(edge_labels=True)
        if self.attributes is not None:
            settings.update(attributes=self.attributes, beta=float(self.beta))
        if self.num_node_attributes is not None:
            settings.update(num_node_attributes=int(self.num_node_attributes))
        return settings

    def _sinkhorn_error(self, support: SupportSet, pairs: np.ndarray, values: np.ndarray) -> dict | None:
        """Sinkhorn's values on up to ``check_pairs`` random ``pairs`` against exact W."""
        solver = self._solver()
        if not isinstance(solver, Sinkhorn) or solver.check_pairs == 0 or len(pairs) == 0:
            return None
        rng = np.random.default_rng(0)
        picked = np.sort(rng.choice(len(pairs), min(solver.check_pairs, len(pairs)), replace=False))
        exact = distances(support, support, pairs[picked], solver=Exact(engine="compiled"), n_jobs=self._n_threads())
        gap = np.abs(values[picked] - exact)
        positive = exact > 0
        relative = gap[positive] / exact[positive]
        return {
            "pairs": len(picked),
            "median_relative": float(np.median(relative)) if positive.any() else 0.0,
            "max_relative": float(relative.max()) if positive.any() else 0.0,
            "max_absolute": float(gap.max()),
            "blur": solver.blur,
            "scaling": solver.scaling,
        }

    def fit(self, graphs, y=None) -> MWSP:
        """Learn vocabularies and the training distances ``distances_``.

        Args:
            graphs: a list of PyG ``Data`` or a PyG dataset.
            y: ignored: W uses no class labels, as an unsupervised transformer's fit does not
                (it is accepted so that ``MWSP`` fits in a scikit-learn ``Pipeline`` before a
                classifier, which takes ``y``). One label per graph is still checked, so that
                graphs and labels of different lengths fail here rather than later.

        Returns:
            self

        Raises:
            ValueError: for a bad parameter, a bad graph (naming it), or a ``y`` with another
                length than ``graphs``.
        """
        self.validate_params()
        _check_targets(graphs, y)
        key = self._fit_key(graphs)
        if key is not None:
            cached = FIT_CACHE.get(key)
            if cached is not None:
                for name, value in copy.deepcopy(cached).items():
                    setattr(self, name, value)
                self.timings_ = {**self.timings_, "from_cache": True}
                self._fit_key_ = key
                return self
        if isinstance(self._solver(), Sinkhorn) and _device_type(self.device) == "cpu":
            warnings.warn(
                "Sinkhorn on a CPU is slower than the exact solver there, and only approximate: use "
                "solver='exact' (the default), or Sinkhorn on a CUDA device; a lower scaling is faster but "
                "less accurate (docs/performance.md, Sinkhorn on a CPU)",
                SinkhornOnCPUWarning,
                stacklevel=2,
            )
        build_cpu_kernels()  # a first use's build, before the timer and the progress bars
        start = time.perf_counter()
        # Everything goes into locals first and becomes the model's at the end, so a fit that
        # fails or is interrupted (Ctrl-C) leaves the previous fit whole, not half replaced.
        fitted = {}
        support, fitted["features_"] = self._features(graphs, fitted=False, tables=fitted)
        mid = time.perf_counter()
        # Graphs that are the same measure need one transport problem per pair of measures.
        representatives, inverse = support.distinct_measures()
        distinct = support.take(representatives)
        n = distinct.num_graphs
        pairs = upper_pairs(n)
        stats = {}
        values = self._distances(distinct, distinct, pairs, stats=stats)
        distances = np.zeros((n, n), dtype=np.float64)
        distances[pairs[:, 0], pairs[:, 1]] = values
        distances[pairs[:, 1], pairs[:, 0]] = values
        timings = {
            "features": mid - start,
            "transport": time.perf_counter() - mid,
            "distinct_measures": n,
            "pairs": len(pairs),
            **stats,  # with a checkpoint: pairs_from_checkpoint (transport timed the rest only)
        }
        check = time.perf_counter()
        error = self._sinkhorn_error(distinct, pairs, values)
        if error is not None:
            timings["sinkhorn_check"] = time.perf_counter() - check
            timings["sinkhorn_check_pairs"] = error["pairs"]
            for name in ("median_relative", "max_relative", "max_absolute"):
                timings[f"sinkhorn_{name}_error"] = error[name]
        fitted.update(
            support_=support,
            rows_=support.rows,
            distances_=distances[np.ix_(inverse, inverse)],
            timings_=timings,
            sinkhorn_error_=error,
            fitted_settings_=self.feature_settings(),
        )
        for name, value in fitted.items():
            setattr(self, name, value)
        self._fit_key_ = key
        if key is not None:
            FIT_CACHE.put(key, copy.deepcopy(fitted), nbytes(fitted))
        return self

    def _cache_key(self, graphs) -> str | None:
        """What a fit or transform's result depends on, as a key: the parameters but ``lam``,
        ``n_jobs`` and ``progress``, and the graphs' content (:func:`graphs_digest`); None
        where nothing is cached (no clone family, a ``checkpoint`` or ``client``, graphs that
        cannot be read twice or hashed)."""
        family = self.__dict__.get("_clone_family")
        if family is None or self.checkpoint is not None or self.client is not None:
            return None
        if not (isinstance(graphs, (list, tuple)) or (hasattr(graphs, "__getitem__") and hasattr(graphs, "__len__"))):
            return None  # an iterator: read once, by the fit itself
        try:
            digest = graphs_digest(graphs)
        except Exception:  # a field no digest can read (a quantized tensor, ...): the fit names what is wrong
            return None
        if digest is None:
            return None
        params = {name: value for name, value in self.get_params(deep=False).items() if name not in NOT_IN_KEY}
        params["solver"] = self._solver()  # "exact" and Exact() are one setting (its repr names every option)
        count = dataset_attribute_columns(graphs)
        return hashlib.sha1(f"{family} {sorted(params.items())!r} {count} {digest}".encode()).hexdigest()

    def _fit_key(self, graphs) -> str | None:
        key = self._cache_key(graphs)
        return None if key is None else f"fit {key}"

    def kernel(self, distances: np.ndarray | None = None) -> np.ndarray:
        """``exp(-lam W)`` of the given distances, or of ``distances_``."""
        check_is_fitted(self, "distances_")
        return laplacian_kernel(self.distances_ if distances is None else distances, self.lam)

    def fit_transform(self, graphs, y=None) -> np.ndarray:
        """Fit, then return the ``[n, n]`` training kernel."""
        return self.fit(graphs, y).kernel()

    def _check_fitted(self) -> None:
        """Fitted, with the parameters the fitted vocabularies belong to (a ValueError if not)."""
        check_is_fitted(self, "distances_")
        self.validate_params()
        self._check_fitted_settings()

    def cross_distances(self, graphs) -> np.ndarray:
        """W between new graphs and the training graphs, ``[n_new, n_train]``."""
        self._check_fitted()
        fit_key = getattr(self, "_fit_key_", None)
        key = None if fit_key is None else self._cache_key(graphs)
        if key is not None:
            key = f"cross {fit_key} {key}"
            cached = FIT_CACHE.get(key)
            if cached is not None:
                return cached.copy()
        distances = self._cross_distances(graphs)
        if key is not None:
            FIT_CACHE.put(key, distances.copy(), distances.nbytes)
        return distances

    def _cross_distances(self, graphs) -> np.ndarray:
        new = self._features(graphs, fitted=True)[0]
        train = SupportSet(
            rows=new.rows,
            graph_ptr=self.support_.graph_ptr,
            support=self.support_.support,
            counts=self.support_.counts,
            sizes=self.support_.sizes,
        )
        n_new, n_train = new.num_graphs, train.num_graphs
        i, j = np.meshgrid(np.arange(n_new), np.arange(n_train), indexing="ij")
        pairs = np.stack([i.ravel(), j.ravel()], axis=1)
        return self._distances(new, train, pairs).reshape(n_new, n_train)

    def _check_fitted_settings(self) -> None:
        """A ValueError if a parameter W depends on changed since ``fit``."""
        fitted = getattr(self, "fitted_settings_", None)
        if fitted is None:
            return
        now = self.feature_settings()
        # An extension's setting is absent when it is off (feature_settings): compare as off.
        off = {"edge_labels": False, "attributes": None, "num_node_attributes": None}
        for name in dict.fromkeys([*fitted, *now]):  # fitted order: solver before blur and scaling
            value, fitted_value = now.get(name, off.get(name)), fitted.get(name, off.get(name))
            if value != fitted_value:
                raise ValueError(
                    f"{name} is {value!r} but the model was fitted with {fitted_value!r}: "
                    f"its vocabularies and distances_ belong to the fitted value; refit, or set it back"
                )

    def node_features(self, graphs=None) -> tuple[sp.csr_matrix, np.ndarray]:
        """Each node's row, the point of its graph's measure, as the distances see it
        (:meth:`node_rows` adds what decodes the columns, for explanations).

        Without ``graphs``, the training graphs' (``features_``); with them, new graphs' rows
        in the fitted columns (as ``transform`` reads them; nothing fitted changes). The ground
        cost between two rows is their Euclidean distance
        (``transport.costs.cost_matrix`` on one bank), so W between two graphs is the exact
        optimal transport between their nodes' rows with mass ``1 / |V|`` each.

        Returns:
            ``(rows, ptr)``: ``[num_nodes, num_columns]`` CSR float64 (``beta * a(v)`` first with
            ``attributes``, then ``phi(v)``), and ``[num_graphs + 1]`` node offsets.
        """
        check_is_fitted(self, "distances_")
        if graphs is None:
            rows = self.features_
            sizes = self.support_.sizes
        else:
            self.validate_params()
            self._check_fitted_settings()
            support, rows = self._features(graphs, fitted=True)
            sizes = support.sizes
        ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        return rows, ptr

    def transform(self, graphs) -> np.ndarray:
        """Kernel between new graphs and the training graphs, ``[n_new, n_train]``."""
        return self.kernel(self.cross_distances(graphs))

    def node_rows(self, graphs) -> NodeRows:
        """The graphs node by node as ``transform`` sees them, with what names each column: for
        explanations (:mod:`mwsp_torch.explain`), which need a node's row, not just its graph's
        measure. Nothing fitted changes.

        Args:
            graphs: a list of PyG ``Data`` or a PyG dataset.

        Returns:
            :class:`NodeRows`.
        """
        self._check_fitted()
        tables = {}
        support = self._features(graphs, fitted=True, tables=tables)[0]
        graph_set = tables["graph_set"]
        return NodeRows(
            support=support,
            node_ptr=graph_set.ptr,
            row_ids=tables["row_ids"],
            node_labels=graph_set.labels,
            tree_ids=tables["tree_ids"],
            label_scheme=tables["label_scheme"],
            tree_vocabs=tables["tree_vocabs"],
            path_vocabs=tables["path_vocabs"],
            attribute_columns=self._attribute_columns(),
            attribute_width=0 if self.attributes is None else len(self.attribute_mean_),
        )

    def _attribute_columns(self) -> int:
        """How many leading columns of a row hold ``beta * a(v)``: the attribute width, times
        ``d + 1`` for ``"multiscale"``; 0 without attributes."""
        if self.attributes is None:
            return 0
        return len(self.attribute_mean_) * (self.d + 1 if self.attributes == "multiscale" else 1)

    def explain(self, G, H, top: int = 5, label_names=None):
        """The optimal node-to-node plan behind ``W(G, H)``: :func:`mwsp_torch.explain.explain`."""
        from mwsp_torch.explain import explain

        return explain(self, G, H, top=top, label_names=label_names)


@dataclass(frozen=True)
class NodeRows:
    """Graphs node by node, as a fitted :class:`MWSP` reads them (:meth:`MWSP.node_rows`).

    Attributes:
        support (transport.SupportSet): the graphs' measures, on a row bank of the fitted rows
            and then this call's fresh ones.
        node_ptr (np.ndarray): ``[num_graphs + 1]`` offsets of each graph's nodes.
        row_ids (np.ndarray): ``[num_nodes]`` each node's row ``phi(v)`` in ``support.rows``.
        node_labels (np.ndarray): ``[num_nodes]`` the integer labels read (multi-column label
            rows as IDs of ``label_scheme.vocab``).
        tree_ids (np.ndarray): ``[num_nodes, k + 1]`` tree IDs ``t_s(v)``.
        label_scheme (LabelScheme): how the labels were read (a copy of the fitted one).
        tree_vocabs, path_vocabs (tuple): ``(fitted, fresh)`` vocabularies; an ID below the
            fitted one's size is in the fitted table, a larger one in the fresh table.
        attribute_columns (int): the leading columns holding ``beta * a(v)`` (0 without
            attributes); path column ``c`` of the vocabularies is row column
            ``attribute_columns + c``.
        attribute_width (int): attributes per node (``attribute_columns`` is this times
            ``d + 1`` for ``"multiscale"``).
    """

    support: SupportSet
    node_ptr: np.ndarray
    row_ids: np.ndarray
    node_labels: np.ndarray
    tree_ids: np.ndarray
    label_scheme: LabelScheme
    tree_vocabs: tuple[Vocabulary, Vocabulary]
    path_vocabs: tuple[Vocabulary, Vocabulary]
    attribute_columns: int = 0
    attribute_width: int = 0


def _check_targets(graphs, y) -> None:
    """``y`` (ignored by ``fit``), where given, has one entry per graph."""
    if y is None or not hasattr(graphs, "__len__"):
        return
    try:
        count = len(y)
    except TypeError:
        raise ValueError(f"y must hold one label per graph, got {type(y).__name__}") from None
    if count != len(graphs):
        raise ValueError(f"y has {count} labels for {len(graphs)} graphs; MWSP ignores y, but it must match the graphs")


def _device_type(device) -> str:
    """``"cpu"`` or ``"cuda"``: the type of a torch device given as a string or ``torch.device``."""
    import torch

    return torch.device(device).type


def _widen(matrix: sp.csr_matrix, width: int) -> sp.csr_matrix:
    return sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=(matrix.shape[0], width))
