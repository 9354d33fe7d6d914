"""Type predicates for parameter checks, shared by every module (so none imports one
further down the ``graphs -> labels -> trees -> paths -> transport -> kernel`` flow for them)."""

from __future__ import annotations

import numbers

import numpy as np


def is_real(value) -> bool:
    """A real number (not a bool, which Python counts as one, a string or None)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def is_integer(value) -> bool:
    """An integer (not a bool, which Python counts as one)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_positive_number(value) -> bool:
    """A real number (see :func:`is_real`), finite and > 0."""
    return is_real(value) and bool(np.isfinite(value)) and value > 0
