"""The command line (mwsp_torch.cli): evaluate, distances and explain's arguments, errors,
resumption and output."""

import argparse
import functools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import mwsp_torch.cli as cli
import mwsp_torch.transport as transport
import mwsp_torch.transport.solvers as solvers
from mwsp_torch.cli import main


def test_cli_evaluate_paper_json(fixture_root, cache_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(
        [
            "evaluate",
            "--dataset",
            "MUTAG",
            "--root",
            str(fixture_root),
            "--cache-dir",
            str(cache_dir),
            "--d",
            "2",
            "--k",
            "0",
            "--protocol",
            "paper",
            "--json",
            str(out),
            "--quiet",
            "--n-jobs",
            "2",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["accuracy_mean"] >= 88.0 and result["accuracy_unit"] == "percent"
    assert result["protocol"] == "paper" and result["grid"]["d"] == [2] and result["grid"]["k"] == [0]
    assert "distances" in result["timings_seconds"]
    line = f"MUTAG: {result['accuracy_mean']:.2f} +- {result['accuracy_std']:.2f} % (paper protocol, std over 10 folds,"
    assert line in capsys.readouterr().out


def test_cli_folds_the_classes_cannot_fill_are_refused_before_any_distance(
    fixture_root, cache_dir, monkeypatch, capsys
):
    def computed(*args, **kwargs):
        raise AssertionError("a distance matrix was computed before the folds were checked")

    monkeypatch.setattr(cli, "_distances", computed)
    argv = ["evaluate", "--dataset", "MUTAG", "--root", str(fixture_root), "--cache-dir", str(cache_dir), "--quiet"]
    for protocol, name in (("nested", "n_outer"), ("paper", "n_splits")):
        assert main([*argv, "--protocol", protocol, "--folds", "64"]) == 2
        err = capsys.readouterr().err
        assert f"mwsp: error: {name}=64 stratified folds need every class to have at least 64 graphs" in err
        assert "the smallest class has 63: pass" in err and "(--folds 63 on the command line)" in err


def test_cli_nested_grid_on_csl(cache_dir, tmp_path, capsys):
    out = tmp_path / "csl.json"
    code = main(
        [
            "evaluate",
            "--cache-dir",
            str(cache_dir),
            "--d",
            "1",
            "4",
            "--k",
            "0",
            "--repeats",
            "1",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["dataset"] == "CSL" and result["protocol"] == "nested"
    assert result["grid"]["settings"] == [[1, 0], [4, 0]]
    # d=1 sees only 4-regular stars (chance, 10 %); d=4 separates 9 of 10 classes (skips 6 and 16 tie).
    assert result["accuracy_mean"] >= 80.0
    # One repetition: the std over repetitions is 0 by construction, so the line gives the folds'.
    line = f"CSL: {result['accuracy_mean']:.2f} +- {result['fold_accuracy_std']:.2f} % (nested protocol, std over "
    assert line + "the 10 folds of one repetition," in capsys.readouterr().out


def test_cli_quiets_pykeops_on_its_stdout(monkeypatch, capsys, tmp_path):
    """pykeops prints each compilation on stdout unless PYKEOPS_VERBOSE=0 is set before its
    import (KEOPS_VERBOSE quiets keopscore only); the command sets both before any work."""
    monkeypatch.delenv("PYKEOPS_VERBOSE", raising=False)
    monkeypatch.delenv("KEOPS_VERBOSE", raising=False)
    assert main(["distances", "--dataset", "MUTAG", "--root", "/nonexistent", "--out", str(tmp_path / "w.npy")]) == 2
    assert os.environ.get("PYKEOPS_VERBOSE") == "0" and os.environ.get("KEOPS_VERBOSE") == "0"
    capsys.readouterr()


@pytest.mark.parametrize("command", [["explain", "--graphs", "0", "1"], ["distances", "--out", "w.npy"]])
def test_cli_quiets_pykeops_in_every_subcommand(monkeypatch, command):
    """`explain` returned before the variables were set, and POT imports geomloss, whose
    pykeops then wrote its CUDA warning on the command's stdout."""
    monkeypatch.delenv("PYKEOPS_VERBOSE", raising=False)
    monkeypatch.delenv("KEOPS_VERBOSE", raising=False)
    assert main([command[0], "--dataset", "MUTAG", "--root", "/nonexistent", *command[1:]]) == 2
    assert os.environ.get("PYKEOPS_VERBOSE") == "0" and os.environ.get("KEOPS_VERBOSE") == "0"


def test_cli_summary_says_what_its_std_is_over():
    """The paper protocol's std is over folds; the nested one's over repetitions' means, and
    with one repetition (where that is 0) over its folds."""
    common = {"dataset": "X", "accuracy_mean": 80.0, "majority_rate": 50.0, "outer_folds": 10}
    common["grid"] = {"d": [2], "k": [0]}
    paper = {**common, "protocol": "paper", "accuracy_std": 4.5}
    assert cli.summary(paper).startswith("X: 80.00 +- 4.50 % (paper protocol, std over 10 folds, majority class 50.00")
    nested = {**common, "protocol": "nested", "accuracy_std": 1.25, "fold_accuracy_std": 3.75, "seeds": [0, 1, 2]}
    assert cli.summary(nested).startswith("X: 80.00 +- 1.25 % (nested protocol, std over 3 repetitions' means,")
    one = {**nested, "accuracy_std": 0.0, "seeds": [7]}
    assert cli.summary(one).startswith("X: 80.00 +- 3.75 % (nested protocol, std over the 10 folds of one repetition,")


def test_cli_distances_and_errors(fixture_root, cache_dir, tmp_path, capsys):
    out = tmp_path / "w.npy"
    assert (
        main(
            [
                "distances",
                "--dataset",
                "MUTAG",
                "--root",
                str(fixture_root),
                "--cache-dir",
                str(cache_dir),
                "--d",
                "1",
                "--k",
                "1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    w = np.load(out)
    assert w.shape == (188, 188) and np.array_equal(w, w.T)
    assert (
        main(
            [
                "distances",
                "--dataset",
                "NOPE",
                "--root",
                str(fixture_root),
                "--cache-dir",
                str(cache_dir),
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 2
    )
    assert "NOPE_A.txt" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["--n-jobs", "0"], "--n-jobs must be an integer >= 1, or -1 for every core, got 0"),
        (["--d", "2", "-1"], "--d must be an integer >= 0, got -1"),
        (["--solver", "sinkhorn", "--blur", "-1"], "--blur must be > 0 and finite, got -1.0"),
        (["--solver", "sinkhorn", "--checkpoint", "ckpt"], "--checkpoint is only kept by the compiled exact engine"),
        (["--folds", "1"], "--folds must be >= 2, got 1"),
        (["--solver", "sinkhorn", "--scaling", "1.0"], "--scaling must be in (0, 1), got 1.0"),
        # options that the other choice would ignore are refused, not dropped
        (["--blur", "0.1"], "--blur is read only with --solver sinkhorn, not with --solver exact"),
        (["--scaling", "0.5"], "--scaling is read only with --solver sinkhorn, not with --solver exact"),
        (["--sinkhorn-backend", "fused"], "--sinkhorn-backend is read only with --solver sinkhorn"),
        (["--solver", "sinkhorn", "--exact-engine", "thread"], "--exact-engine is read only with --solver exact"),
        (["--protocol", "paper", "--repeats", "3"], "--repeats is read only with --protocol nested, not with"),
        (["--krein", "clip"], "--krein is read only with --svm krein, not with --svm svc"),
        # an output that cannot be written is refused before the run, not after it
        (["--json", "/nonexistent/r.json"], "--json /nonexistent/r.json: the directory /nonexistent does not exist"),
        (["--json", "/"], "--json / is a directory; give a file path"),
        (["--d", "0", "2", "0"], "--d lists a value more than once: 0 2 0"),
        (["--k", "1", "1"], "--k lists a value more than once: 1 1"),
        # seeds numpy cannot take, refused before any distance is computed
        (["--seed", "-1"], "--seed must be >= 0, got -1"),
        (["--protocol", "paper", "--seed", "4294967296"], "--seed 4294967296 past the largest seed numpy takes"),
        (["--seed", "4294967295", "--repeats", "2"], "--seed 4294967295 with --repeats 2 uses seeds up to 4294967296,"),
    ],
)
def test_cli_refuses_bad_arguments_before_reading_data(extra, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--dataset", "NOT_READ", "--root", "/nonexistent", *extra])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# Run by test_cli_run_killed_mid_way_resumes: the CLI with small tiles and a pause after each
# tile, so that the parent can kill it between some tiles and the next.
_SLOW_CLI = """
import functools, sys, time
import mwsp_torch.cli as cli
import mwsp_torch.transport.solvers as solvers
import mwsp_torch.transport.exact as transport
kernel = transport._tile_kernel
def slow(*args):
    kernel(*args)
    time.sleep(0.05)
transport._tile_kernel = slow
solvers.exact_distances = functools.partial(transport.exact_distances, tile_size=TILE)
from mwsp_torch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_cli_run_killed_mid_way_resumes(fixture_root, tmp_path, monkeypatch, kernel_calls, capsys):
    """A CLI run killed (SIGKILL) between tiles, started again with the same --checkpoint,
    writes the matrix of an uninterrupted run and computes only the tiles it lacked."""
    tile = 300
    checkpoint = tmp_path / "ckpt"

    def args(out, cache, with_checkpoint=True):
        common = ["distances", "--dataset", "MUTAG", "--root", str(fixture_root), "--d", "2", "--k", "1"]
        extra = ["--checkpoint", str(checkpoint)] if with_checkpoint else []
        return common + ["--cache-dir", str(tmp_path / cache), "--out", str(out), "--quiet"] + extra

    driver = tmp_path / "slow_cli.py"
    driver.write_text(textwrap.dedent(_SLOW_CLI).replace("TILE", str(tile)))
    env = {**os.environ, "KEOPS_VERBOSE": "0"}
    killed_out = tmp_path / "killed.npy"
    run = subprocess.Popen([sys.executable, str(driver), *args(killed_out, "cache")], env=env)
    deadline = time.monotonic() + 600
    while len(list(checkpoint.rglob("tile-*.npy"))) < 3:
        assert run.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no tiles written in 600 s"
        time.sleep(0.01)
    run.send_signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL and not killed_out.exists()
    kept = len(list(checkpoint.rglob("tile-*.npy")))

    kernel_calls.clear()
    monkeypatch.setattr(solvers, "exact_distances", functools.partial(transport.exact_distances, tile_size=tile))
    resumed_out = tmp_path / "resumed.npy"
    capsys.readouterr()
    assert main(args(resumed_out, "cache")) == 0
    tiles = len(list(checkpoint.rglob("tile-*.npy")))
    assert kept < tiles and len(kernel_calls) == tiles - kept
    # Its timings say how much was read rather than computed (the kept tiles are full ones).
    assert json.loads(capsys.readouterr().out)["timings_seconds"]["pairs_from_checkpoint"] == kept * tile
    whole_out = tmp_path / "whole.npy"
    assert main(args(whole_out, "other-cache", with_checkpoint=False)) == 0
    assert "pairs_from_checkpoint" not in json.loads(capsys.readouterr().out)["timings_seconds"]
    np.testing.assert_array_equal(np.load(resumed_out), np.load(whole_out))


def test_cli_distances_writes_exactly_the_out_path(fixture_root, cache_dir, tmp_path, capsys):
    out = tmp_path / "w_without_suffix"
    argv = ["distances", "--dataset", "MUTAG", "--root", str(fixture_root), "--cache-dir", str(cache_dir)]
    assert main([*argv, "--d", "1", "--k", "0", "--out", str(out), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == str(out)
    assert [p.name for p in tmp_path.iterdir()] == ["w_without_suffix"]  # numpy appends no .npy
    assert np.load(out).shape == (188, 188)


def test_cli_unwritable_out_is_refused_before_the_run(fixture_root, cache_dir, tmp_path, capsys, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("computed W for an output it cannot write")

    monkeypatch.setattr(cli, "cached_distances", no_run)
    out = tmp_path / "w.npy"
    out.mkdir()  # a directory where the matrix should go
    argv = ["distances", "--dataset", "MUTAG", "--root", str(fixture_root), "--cache-dir", str(cache_dir)]
    for target, message in [(out, "is a directory; give a file path"), (out / "no" / "w.npy", "does not exist")]:
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--d", "1", "--out", str(target), "--quiet"])
        assert exit_info.value.code == 2
        assert f"mwsp: error: --out {target}" in (err := capsys.readouterr().err) and message in err


def test_cli_json_that_fails_late_still_prints_the_result(fixture_root, cache_dir, tmp_path, capsys, monkeypatch):
    def full_disk(self, text, *args, **kwargs):
        raise OSError(28, "No space left on device")

    out = tmp_path / "r.json"
    monkeypatch.setattr(cli.Path, "write_text", full_disk)  # passes the check before the run, fails after it
    argv = ["evaluate", "--dataset", "MUTAG", "--root", str(fixture_root), "--cache-dir", str(cache_dir), "--quiet"]
    code = main([*argv, "--d", "1", "--k", "0", "--protocol", "paper", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and f"mwsp: error: cannot write --json {out}: [Errno 28] No space left" in captured.err
    assert re.search(r"^MUTAG: \d+\.\d\d \+- \d+\.\d\d % \(paper protocol", captured.out, re.M)


def test_cli_svm_solver_reaches_the_protocol(cache_dir, tmp_path):
    runs = {}
    for solver in ("libsvm", "path"):
        out = tmp_path / f"{solver}.json"
        argv = ["evaluate", "--cache-dir", str(cache_dir), "--d", "4", "--k", "0", "--repeats", "1"]
        assert main([*argv, "--svm-solver", solver, "--json", str(out), "--quiet"]) == 0
        runs[solver] = json.loads(out.read_text())
    assert runs["path"]["svm_solver"] == "path" and runs["libsvm"]["svm_solver"] == "libsvm"
    # CSL's graphs at W = 0 tie exactly in the inner scores, so a fold may pick another of the
    # tied settings (tests/test_svm.py pins equal selections where nothing ties); the
    # folds' accuracies, all at CSL's ceiling, do not move.
    assert runs["path"]["fold_accuracies"] == runs["libsvm"]["fold_accuracies"]


def test_cli_checkpoint_resumes_the_selection(cache_dir, tmp_path):
    """``evaluate --checkpoint`` keeps the selection's steps: the same command again reads
    every one of them and prints the same result."""
    argv = ["evaluate", "--cache-dir", str(cache_dir), "--d", "4", "--k", "0", "--repeats", "2", "--quiet"]
    runs = []
    for run in range(2):
        out = tmp_path / f"{run}.json"
        assert main([*argv, "--checkpoint", str(tmp_path / "ckpt"), "--json", str(out)]) == 0
        runs.append(json.loads(out.read_text()))
    assert len(list((tmp_path / "ckpt").glob("selection-*.jsonl"))) == 1
    steps = 2 * runs[0]["outer_folds"] * len(runs[0]["grid"]["lam"])
    assert runs[0]["resumed_steps"] == 0 and runs[1]["resumed_steps"] == steps
    assert runs[1]["selected"] == runs[0]["selected"]
    assert runs[1]["fold_accuracies"] == runs[0]["fold_accuracies"]


@pytest.mark.parametrize("extra", [["--edge-labels"], ["--attributes", "node"]])
def test_cli_stream_refuses_the_extensions_it_does_not_compute(extra, tmp_path, capsys):
    argv = ["distances", "--dataset", "NOT_READ", "--root", "/nonexistent", "--out", str(tmp_path / "w.npy")]
    with pytest.raises(SystemExit):
        main([*argv, "--stream", *extra])
    assert "--stream writes label-only W: it does not take --edge-labels or --attributes yet" in capsys.readouterr().err


def test_the_cli_parses_its_arguments_before_importing_the_library():
    """``mwsp --help`` (and a refused argument) needs none of torch, PyG, numba or scikit-learn:
    cli.py, loaded on its own, builds its parser and answers ``--help`` without importing them."""
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("cli_alone", {cli.__file__!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
for argv in (["--help"], ["evaluate", "--help"], ["distances", "--help"]):
    try:
        module.build_parser().parse_args(argv)
    except SystemExit:
        pass
print(sorted(name for name in ("torch", "torch_geometric", "numba", "sklearn", "numpy") if name in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_clis_choices_are_the_librarys():
    """The one table of parameters holds the library's own choices, and the parser offers them."""
    from mwsp_torch._checks import PARAMETERS
    from mwsp_torch.attributes import ATTRIBUTE_MODES
    from mwsp_torch.labels import LABEL_POLICIES
    from mwsp_torch.paths import PATH_MODES
    from mwsp_torch.transport.engines import EXACT_ENGINES

    library = {
        "paths": PATH_MODES,
        "labels": LABEL_POLICIES,
        "attributes": ATTRIBUTE_MODES,
        "solver": transport.SOLVERS,
        "engine": EXACT_ENGINES,
        "backend": transport.SINKHORN_BACKENDS,
    }
    assert {name: PARAMETERS[name][1] for name in library} == library
    commands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    flags = {"paths": "paths", "labels": "labels", "attributes": "attributes", "solver": "solver"}
    flags.update(engine="exact_engine", backend="sinkhorn_backend")
    for command in ("evaluate", "distances"):
        offered = {action.dest: tuple(action.choices) for action in commands[command]._actions if action.choices}
        assert {name: offered[flag] for name, flag in flags.items()} == library, command


@pytest.mark.parametrize("checkpoint", [False, True])
def test_ctrl_c_ends_in_one_line_that_says_how_to_go_on(fixture_root, tmp_path, monkeypatch, capsys, checkpoint):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_distances", interrupted)
    extra = ["--checkpoint", str(tmp_path / "ckpt")] if checkpoint else []
    for command in (["evaluate", "--protocol", "paper"], ["distances", "--out", str(tmp_path / "w.npy")]):
        argv = [*command, "--dataset", "MUTAG", "--root", str(fixture_root), "--cache-dir", str(tmp_path), "--quiet"]
        assert main(argv + extra) == 130
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert err.startswith("mwsp: interrupted;") and "run the same command again" in err
        if checkpoint:
            assert f"--checkpoint {tmp_path / 'ckpt'}" in err and "resume" in err
        else:
            assert "add --checkpoint DIR" in err
