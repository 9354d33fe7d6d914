"""Parameter checks shared by every module: type predicates, and :data:`PARAMETERS`, the one
table of what each parameter of :class:`~mwsp_torch.MWSP` and of its solver options takes.

``MWSP.validate_params`` checks every parameter against the table, and the command line reads
its ``choices`` from it and validates by building the estimator, so the two cannot drift apart.
Nothing here imports numpy or torch: the command line builds its parser from this module alone
(so that ``mwsp --help`` answers at once), and no module imports one further down the
``graphs -> labels -> trees -> paths -> transport -> kernel`` flow for a check.
"""

from __future__ import annotations

import math
import numbers
import sys

__all__ = ["PARAMETERS", "ParameterError", "check_parameter", "is_integer", "is_positive_number", "is_real"]

#: Each parameter's kind and what it allows, by name: ``MWSP``'s own, then its solver options'
#: (:class:`~mwsp_torch.transport.Exact`'s ``engine``, :class:`~mwsp_torch.transport.Sinkhorn`'s
#: ``blur`` to ``check_pairs``), then ``n_jobs`` wherever threads are asked for. Kinds:
#: ``"integer"`` (an integer >= the bound allowed), ``"positive"`` (a finite number > 0),
#: ``"fraction"`` (a number in (0, 1)), ``"choice"`` (one of the tuple allowed), ``"flag"``
#: (True or False), ``"threads"`` (an integer >= 1, or -1 for every core); ``" or None"`` after a
#: kind allows None too. The choices are the library's own (``paths.PATH_MODES``,
#: ``labels.LABEL_POLICIES``, ``attributes.ATTRIBUTE_MODES``, ``transport.SOLVERS``,
#: ``transport.engines.EXACT_ENGINES``, ``transport.SINKHORN_BACKENDS``), written out so that this
#: module imports none of them (a test checks that they are equal).
PARAMETERS: dict[str, tuple[str, object]] = {
    "d": ("integer", 0),
    "k": ("integer", 0),
    "lam": ("positive", None),
    "paths": ("choice", ("split", "all")),
    "labels": ("choice", ("auto", "degree", "uniform")),
    "edge_labels": ("flag", None),
    "attributes": ("choice or None", ("node", "multiscale")),
    "beta": ("positive", None),
    "num_node_attributes": ("integer or None", 0),
    "solver": ("choice", ("exact", "sinkhorn")),
    "engine": ("choice", ("auto", "compiled", "thread")),
    "blur": ("positive", None),
    "scaling": ("fraction", None),
    "backend": ("choice", ("auto", "fused", "triton", "tensorized", "online")),
    "check_pairs": ("integer", 0),
    "n_jobs": ("threads", None),
}


class ParameterError(ValueError):
    """A parameter that the table (or a rule between parameters) refuses. The message is
    ``f"{name} {problem}"``; the command line prints it with the option's flag for ``name``."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name} {problem}")
        self.name, self.problem = name, problem


def is_real(value) -> bool:
    """A real number (not a bool, which Python counts as one, a string or None; numpy's bool is
    no ``numbers.Real``)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer(value) -> bool:
    """An integer, Python's or numpy's (not a bool, which Python counts as one)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_positive_number(value) -> bool:
    """A real number (see :func:`is_real`), finite and > 0."""
    return is_real(value) and math.isfinite(value) and value > 0


def _is_numpy_bool(value) -> bool:
    """A numpy bool (which exists only once numpy is imported: this module does not import it)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.bool_)


def _problem(kind: str, allowed, value) -> str | None:
    """What is wrong with ``value`` for a parameter of this kind, as the end of a sentence
    that starts with the parameter's name; None when nothing is."""
    if kind.endswith(" or None"):
        if value is None:
            return None
        problem = _problem(kind.removesuffix(" or None"), allowed, value)
        return None if problem is None else problem.replace("must be ", "must be None or ", 1)
    if kind == "integer":
        ok, text = is_integer(value) and value >= allowed, f"an integer >= {allowed}"
    elif kind == "positive":
        ok, text = is_positive_number(value), "> 0 and finite"
    elif kind == "fraction":
        ok, text = is_real(value) and 0 < value < 1, "in (0, 1)"
    elif kind == "choice":
        ok, text = isinstance(value, str) and value in allowed, f"one of {allowed}"
    elif kind == "flag":
        ok, text = isinstance(value, bool) or _is_numpy_bool(value), "True or False"
    elif kind == "threads":
        ok, text = is_integer(value) and (value >= 1 or value == -1), "an integer >= 1, or -1 for every core"
    else:
        raise KeyError(f"no check for parameters of kind {kind!r}")
    return None if ok else f"must be {text}, got {value!r}"


def check_parameter(name: str, value) -> None:
    """Refuse ``value`` for the parameter ``name`` unless :data:`PARAMETERS` allows it.

    Raises:
        ParameterError: a ValueError naming the parameter, what it takes and what it got.

    Examples:
        >>> check_parameter("d", 2)
        >>> check_parameter("paths", "some")
        Traceback (most recent call last):
        ...
        mwsp_torch._checks.ParameterError: paths must be one of ('split', 'all'), got 'some'
    """
    kind, allowed = PARAMETERS[name]
    problem = _problem(kind, allowed, value)
    if problem is not None:
        raise ParameterError(name, problem)
