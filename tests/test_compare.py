"""The comparison: kernel cells on a split file's folds that never read a test fold's labels,
paired tests equal to scipy's and to the corrected t-test by hand, and a run that writes its
table, resumes without recomputing, and refuses cells of another request."""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from mwsp_torch.compare import KernelGrid, compare, comparison_data, paired_test
from mwsp_torch.compare.kernels import kernel_cell_path, run_kernel_cell
from mwsp_torch.compare.stats import corrected_t_test

from helpers import require_extra

DATA = Path(__file__).parent / "data"
GRID = KernelGrid(mwsp=((1, 0), (2, 0)), wl_h=(1, 2), lams=(0.1, 1.0), Cs=(0.1, 1.0, 10.0))


@pytest.fixture(scope="module")
def mutag(tmp_path_factory):
    folds = tmp_path_factory.mktemp("splits") / "MUTAG.json"
    graphs, y, outer, labels, _ = comparison_data("MUTAG", data_root=DATA, splits=None)
    from mwsp_torch.splits import save_splits

    save_splits(outer, folds)
    return graphs, y, outer, labels, folds


def test_the_corrected_t_test_is_nadeau_and_bengio_by_hand():
    d = np.array([1.0, 2.0, -0.5, 3.0, 0.5, 1.5, 2.5, 0.0, 1.0, 2.0])
    t = d.mean() / np.sqrt((1 / 10 + 20 / 180) * d.var(ddof=1))
    assert corrected_t_test(d, 180, 20) == pytest.approx(2 * stats.t.sf(abs(t), 9), rel=1e-12)
    # The correction widens the plain paired t-test, so its p is larger.
    assert corrected_t_test(d, 180, 20) > stats.ttest_1samp(d, 0.0).pvalue


def test_a_paired_test_is_scipys_wilcoxon_and_needs_both_tests():
    a = [81.0, 83.0, 80.0, 85.0, 79.0, 84.0, 82.0, 86.0, 80.0, 83.0]
    b = [79.0, 80.0, 80.5, 81.0, 78.0, 80.0, 79.0, 81.0, 79.5, 80.0]
    result = paired_test(a, b, 900, 100)
    assert result["wilcoxon_p"] == stats.wilcoxon(a, b).pvalue
    assert result["mean_difference"] == pytest.approx(np.mean(np.subtract(a, b)))
    assert result["significant"] == (result["wilcoxon_p"] < 0.05 and result["corrected_t_p"] < 0.05)
    assert result["significant"]
    same = paired_test(a, a, 900, 100)
    assert same["wilcoxon_p"] == 1.0 and same["corrected_t_p"] == 1.0 and not same["significant"]
    with pytest.raises(ValueError, match="one shape"):
        paired_test(a, b[:5], 900, 100)


def test_a_kernel_cell_never_reads_a_test_folds_labels(mutag, tmp_path):
    """Flipping the labels of fold 3's test graphs changes neither fold 3's selection nor its
    predictions (only its accuracy), while every other fold, which trains on them, may move."""
    graphs, y, outer, labels, _ = mutag
    test = outer.folds[3].test
    flipped = y.copy()
    flipped[test] = 1 - flipped[test]
    cells = [
        run_kernel_cell(
            tmp_path / name,
            "mwsp",
            graphs,
            labels_,
            outer,
            dataset="MUTAG",
            labels=labels,
            grid=GRID,
            n_jobs=1,
            progress=False,
        )  # fmt: skip
        for name, labels_ in (("plain", y), ("flipped", flipped))
    ]
    plain, poisoned = (cell["folds"][3] for cell in cells)
    assert plain["selected"] == poisoned["selected"]
    assert plain["test_predictions"] == poisoned["test_predictions"]
    assert plain["accuracy"] + poisoned["accuracy"] == pytest.approx(100.0)
    assert plain["test_indices"] == np.asarray(test).tolist()
    predictions = np.array(plain["test_predictions"])
    assert 100.0 * np.mean(predictions == y[test]) == plain["accuracy"]


def test_a_comparison_writes_its_table_resumes_and_refuses_another_request(mutag, tmp_path):
    require_extra("grakel", "kernels")  # WL and SP
    require_extra("matplotlib", "experiments")  # the figure
    _, _, outer, _, folds = mutag
    run = dict(data_root=DATA, root=tmp_path, splits=folds, grid=GRID, methods=("mwsp", "wl", "sp", "baseline"),
               max_epochs=2, patience=2, n_jobs=1, progress=False)  # fmt: skip
    first = compare("MUTAG", **run)
    assert [row["method"] for row in first["rows"]] == ["mwsp", "wl", "sp", "baseline"]
    assert all(row["folds_done"] == 10 and row["split_sha256"] == outer.sha256 for row in first["rows"])
    for path in first["paths"].values():
        assert path.is_file() and path.stat().st_size > 0
    table = first["paths"]["md"].read_text()
    assert "| MUTAG | mwsp |" in table and "Wilcoxon" in table
    assert "(d,k) in (1,0) (2,0) x lam in [0.1, 1.0]" in table  # the grid each row searched, in words
    best = max(first["rows"], key=lambda row: row["accuracy_mean"])["method"]
    assert {(t["a"], t["b"]) for t in first["tests"]} >= {(best, "baseline")}
    stamp = kernel_cell_path(tmp_path, "MUTAG", "mwsp").stat().st_mtime_ns
    again = compare("MUTAG", **run)
    assert kernel_cell_path(tmp_path, "MUTAG", "mwsp").stat().st_mtime_ns == stamp  # read, not recomputed
    assert [row["fold_accuracies"] for row in again["rows"]] == [row["fold_accuracies"] for row in first["rows"]]
    with pytest.raises(ValueError, match="another request"):
        compare("MUTAG", **{**run, "grid": KernelGrid(mwsp=((1, 0),), lams=(1.0,), Cs=(1.0,)), "methods": ("mwsp",)})
    cell = json.loads(kernel_cell_path(tmp_path, "MUTAG", "wl").read_text())
    assert {fold["selected"]["kernel"] for fold in cell["folds"]} <= {"wl-h1", "wl-h2"}


def test_the_command_line_writes_the_report(mutag, tmp_path, capsys):
    require_extra("grakel", "kernels")  # WL and SP
    require_extra("matplotlib", "experiments")  # the figure
    from mwsp_torch.cli import main

    _, _, _, _, folds = mutag
    argv = ["compare", "--dataset", "MUTAG", "--root", str(DATA), "--splits", str(folds), "--methods", "sp", "wl",
            "--raw-dir", str(tmp_path), "--n-jobs", "1", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| MUTAG | sp |" in printed and "| MUTAG | wl |" in printed
    assert (tmp_path / "MUTAG" / "comparison.png").is_file()
    assert main(["compare", "--dataset", "MUTAG", "--root", str(DATA), "--methods", "mwsp_attributes",
                 "--raw-dir", str(tmp_path)]) == 2  # fmt: skip
    assert "has no node attributes" in capsys.readouterr().err


def test_bad_methods_and_missing_attributes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="methods must be among"):
        compare("MUTAG", data_root=DATA, root=tmp_path, methods=("gcn",))
    with pytest.raises(ValueError, match="has no node attributes"):
        compare("MUTAG", data_root=DATA, root=tmp_path, methods=("mwsp_attributes",))
