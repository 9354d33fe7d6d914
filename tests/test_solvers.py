"""The one distances entry point (``transport.solvers``): its solver options, the engine it
chooses, the estimator's keyword-only parameters, and the import graph it frees."""

import ast
import doctest
import inspect
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.svm import SVC

import mwsp_torch
from mwsp_torch import MWSP, MWSPNystroem, make_csl
from mwsp_torch.transport import Exact, Sinkhorn, distances, exact_distances, sinkhorn_distances, upper_pairs

GRAPHS, Y = make_csl(graphs_per_class=2, num_nodes=11)


def test_distances_is_each_engine_bit_for_bit():
    support, _ = MWSP(d=2, k=1).supports(GRAPHS)
    pairs = upper_pairs(len(GRAPHS))
    stats = {}
    exact = distances(support, support, pairs, n_jobs=1, stats=stats)
    assert stats["engine"] == "compiled"
    np.testing.assert_array_equal(exact, exact_distances(support, support, pairs, n_jobs=1))
    options = Sinkhorn(blur=0.05, scaling=0.9, backend="fused")
    approx = distances(support, support, pairs, solver=options, stats=stats)
    assert stats["engine"] == "sinkhorn"
    np.testing.assert_array_equal(approx, MWSP(d=2, k=1, solver=options).fit(GRAPHS).distances_[tuple(pairs.T)])
    assert not np.array_equal(approx, exact)
    assert np.array_equal(
        distances(support, support, pairs, solver="sinkhorn"), distances(support, support, pairs, solver=Sinkhorn())
    )
    values = distances(support, support, pairs, solver=Exact(engine="thread"), stats=stats)
    assert stats["engine"] == "thread"
    np.testing.assert_allclose(values, exact, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"solver": "greedy"}, r"solver must be one of \('exact', 'sinkhorn'\), got 'greedy'"),
        ({"solver": Sinkhorn(scaling=1.0)}, r"scaling must be in \(0, 1\), got 1.0"),
        ({"solver": Exact(engine="gpu")}, r"engine must be one of \('auto', 'compiled', 'thread'\), got 'gpu'"),
        ({"solver": Exact(engine="batched")}, "engine 'batched': the batched exact engine was removed"),
        ({"n_jobs": 0}, "n_jobs must be an integer >= 1, or -1 for every core, got 0"),
        ({"solver": Sinkhorn(), "checkpoint": "tiles"}, "checkpoint is only kept by the compiled exact engine"),
    ],
)
def test_distances_refuses_what_it_cannot_run(options, message):
    support, _ = MWSP().supports(GRAPHS[:3])
    with pytest.raises(ValueError, match=message):
        distances(support, support, upper_pairs(3), **options)


def test_the_options_follow_scikit_learns_parameter_protocol():
    options = Sinkhorn(blur=0.05)
    assert options.get_params() == {"blur": 0.05, "scaling": 0.99, "backend": "auto", "check_pairs": 64}
    assert options.set_params(scaling=0.5) is options and options.scaling == 0.5
    with pytest.raises(ValueError, match="Sinkhorn has no option 'engine'"):
        options.set_params(engine="thread")
    model = MWSP(d=3, solver=options)
    assert model.get_params()["solver__blur"] == 0.05
    copy = clone(model)
    assert copy.solver == options and copy.solver is not options  # copied, not shared
    copy.set_params(solver__blur=0.2)
    assert copy.solver.blur == 0.2 and options.blur == 0.05
    assert clone(MWSP(solver=Exact(engine="thread"))).solver == Exact(engine="thread")


def test_a_grid_search_sets_the_solvers_options():
    """``solver__blur`` in a grid reaches Sinkhorn; each candidate's W is its blur's."""
    search = GridSearchCV(
        make_pipeline(MWSP(d=2, k=1, solver=Sinkhorn(scaling=0.9, check_pairs=0)), SVC(kernel="precomputed")),
        {"mwsp__solver__blur": [0.05, 1.0]},
        cv=2,
    )
    search.fit(GRAPHS, Y)
    assert [params["mwsp__solver__blur"] for params in search.cv_results_["params"]] == [0.05, 1.0]
    fitted = search.best_estimator_.named_steps["mwsp"]
    assert fitted.fitted_settings_["blur"] == search.best_params_["mwsp__solver__blur"]
    expected = MWSP(d=2, k=1, solver=Sinkhorn(blur=fitted.solver.blur, scaling=0.9, check_pairs=0)).fit(GRAPHS)
    np.testing.assert_array_equal(fitted.distances_, expected.distances_)


def test_blur_and_scaling_decide_w_and_the_fit_cache_keys_them(mutag):
    graphs = mutag[0][:8]  # supports of several points, where the blur matters
    base = MWSP(d=2, solver=Sinkhorn(blur=0.05, scaling=0.9, check_pairs=0))
    first = clone(base).fit(graphs)
    other = clone(base).set_params(solver__blur=0.5).fit(graphs)
    assert not other.timings_.get("from_cache") and np.abs(first.distances_ - other.distances_).max() > 1e-3
    again = clone(base).fit(graphs)
    assert again.timings_["from_cache"] and np.array_equal(again.distances_, first.distances_)
    support, _ = base.supports(graphs)
    pairs = upper_pairs(len(graphs))
    direct = sinkhorn_distances(support, support, pairs, blur=0.5, scaling=0.9)
    np.testing.assert_array_equal(other.distances_[tuple(pairs.T)], direct)


def test_mwsp_takes_keywords_only_modelling_parameters_first():
    parameters = list(inspect.signature(MWSP).parameters.values())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    names = [p.name for p in parameters]
    assert names[:9] == ["d", "k", "lam", "paths", "labels", "edge_labels", "attributes", "beta", "num_node_attributes"]
    assert names[9:] == ["solver", "device", "n_jobs", "checkpoint", "progress", "client"]
    with pytest.raises(TypeError):
        MWSP(2, 1)


def test_nystroem_composes_an_mwsp_and_its_nested_parameters():
    nystroem = MWSPNystroem(MWSP(d=3, k=1, lam=0.5), n_components=4, random_state=0)
    assert nystroem.get_params()["mwsp__d"] == 3
    features = nystroem.fit(GRAPHS).transform(GRAPHS)
    assert nystroem.model_.d == 3 and nystroem.lams_ == 0.5  # the kernel's lam where lam is None
    same = MWSPNystroem(MWSP(d=3, k=1), n_components=4, lam=0.5, random_state=0).fit(GRAPHS)
    np.testing.assert_array_equal(same.transform(GRAPHS), features)


def _imports(path: Path) -> set[str]:
    """The ``mwsp_torch`` modules a file imports at its top level (not inside functions)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mwsp_torch"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("mwsp_torch"))
    return found


def test_estimator_distributed_and_cache_do_not_import_each_other():
    package = Path(mwsp_torch.__file__).parent
    distributed, cache, estimator = (_imports(package / f"{name}.py") for name in ("distributed", "cache", "estimator"))
    assert "mwsp_torch.estimator" not in distributed and "mwsp_torch.estimator" not in cache
    assert not any(name.startswith("mwsp_torch.distributed") for name in estimator)
    # No circle among the top-level imports of the package's modules.
    modules = {
        ".".join(("mwsp_torch", *p.relative_to(package).with_suffix("").parts)): p for p in package.rglob("*.py")
    }
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    state = {}

    def visit(name, trail):
        state[name] = "open"
        for child in graph[name]:
            assert state.get(child) != "open", f"import circle: {' -> '.join([*trail, child])}"
            if child not in state:
                visit(child, [*trail, child])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


@pytest.mark.parametrize(
    "module", ["mwsp_torch.transport.solvers", "mwsp_torch.estimator", "mwsp_torch.nystroem", "mwsp_torch._checks"]
)
def test_the_examples_in_the_docstrings_run(module):
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
