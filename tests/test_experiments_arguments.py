"""The paper scripts under ``experiments/`` refuse options they cannot mean before any work.

A review found tracebacks (``--d -1``, ``--budget -1``, ``--n-jobs 0``), work done twice
(``--datasets MUTAG MUTAG``), a failure only after every matrix was computed
(``--repeats 0``) and, in ``sensitivity.py``, a ``--d 7`` cell saved outside Fig. 5's grid
that crashed every later run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

from common import add_run_arguments, check_arguments  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="script")
    add_run_arguments(parser, ("MUTAG", "PTC_MR"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--subset", type=int, default=0)
    parser.add_argument("--repetitions-now", type=int, default=0)
    return parser


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--datasets", "NOPE"], "--datasets: NOPE not among MUTAG, PTC_MR"),
        (["--datasets", "MUTAG", "MUTAG"], "--datasets: MUTAG given more than once"),
        (["--d", "2", "2"], "--d: 2 given more than once"),
        (["--k", "1", "0", "1"], "--k: 1 given more than once"),
        (["--d", "-1"], "--d -1: must be >= 0"),
        (["--k", "-2"], "--k -2: must be >= 0"),
        (["--budget", "-1"], "--budget -1.0: must be a number of seconds > 0"),
        (["--budget", "nan"], "--budget nan: must be a number of seconds > 0"),
        (["--n-jobs", "0"], "--n-jobs 0: must be >= 1, or -1 for all cores"),
        (["--eval-jobs", "-3"], "--eval-jobs -3: must be >= 1, or -1 for all cores"),
        (["--repeats", "0"], "--repeats 0: must be >= 1"),
        (["--subset", "-5"], "--subset -5: must be >= 0"),
        (["--repetitions-now", "-1"], "--repetitions-now -1: must be >= 1, or 0 for all"),
    ],
)
def test_bad_options_are_refused_with_their_name(argv, message, capsys):
    parser = _parser()
    with pytest.raises(SystemExit) as stop:
        check_arguments(parser, parser.parse_args(argv), ("MUTAG", "PTC_MR"))
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_good_options_pass_and_scales_can_be_capped(capsys):
    parser = _parser()
    args = parser.parse_args(["--datasets", "PTC_MR", "MUTAG", "--d", "0", "6", "--k", "3", "--n-jobs", "-1"])
    check_arguments(parser, args, ("MUTAG", "PTC_MR"), max_scale=6)
    with pytest.raises(SystemExit):
        check_arguments(parser, parser.parse_args(["--d", "7"]), ("MUTAG", "PTC_MR"), max_scale=6)
    assert "--d 7: must be >= 0 and <= 6" in capsys.readouterr().err


def test_scripts_without_the_run_options_pass():
    """ablation.py and timing.py have only some of the options; timing.py's --subset is a list."""
    parser = argparse.ArgumentParser(prog="script")
    parser.add_argument("--datasets", nargs="+", default=["MUTAG"])
    parser.add_argument("--eval-jobs", type=int, default=2)
    check_arguments(parser, parser.parse_args([]), ("MUTAG",))
    parser.add_argument("--subset", nargs="*", default=[])
    check_arguments(parser, parser.parse_args(["--subset", "MUTAG=10"]), ("MUTAG",))


@pytest.mark.parametrize("script", ["accuracy.py", "ablation.py", "sensitivity.py", "timing.py"])
def test_each_script_checks_its_options_before_any_work(script, tmp_path):
    """Run from another folder, with a data root that does not exist: the refusal comes first."""
    argv = ["--datasets", "PTC_FM", "PTC_FM"]
    run = subprocess.run(
        [sys.executable, str(EXPERIMENTS / script), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "MWSP_DATA_ROOT": str(tmp_path / "missing")},
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "--datasets: PTC_FM given more than once" in run.stderr


def test_sensitivity_refuses_a_scale_outside_its_grid(tmp_path):
    run = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "sensitivity.py"), "--datasets", "PTC_FM", "--d", "7", "--k", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "--d 7: must be >= 0 and <= 6" in run.stderr
