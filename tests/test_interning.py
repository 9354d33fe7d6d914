"""The pair tables behind every canonical ID: against a Python dict, growth, offsets, pickling."""

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from mwsp_torch._interning import EMPTY, Vocabulary, intern_pair, lookup, new_table, table_from_arrays


@njit(cache=True)
def _intern_all(frozen, fresh, offset, keys):
    out = np.empty(keys.shape[0], dtype=np.int64)
    for t in range(keys.shape[0]):
        out[t], fresh = intern_pair(frozen, fresh, offset, keys[t, 0], keys[t, 1])
    return out, fresh


def _reference(frozen: dict, keys, offset):
    """IDs by the definition: the frozen ID if known, else the order of first sight after ``offset``."""
    fresh: dict = {}
    out = []
    for key in map(tuple, keys):
        if key in frozen:
            out.append(frozen[key])
        else:
            out.append(fresh.setdefault(key, offset + len(fresh)))
    return np.array(out, dtype=np.int64), fresh


# Keys as the kernels make them: small IDs, negative scale tags, and float64 bit patterns
# (which differ only in their high bits, the case a weak hash would pile into one slot).
FLOATS = np.array([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 1 / 3, 0.1], dtype=np.float64).view(np.int64)
element = st.one_of(st.integers(-3, 40), st.sampled_from(FLOATS.tolist()), st.integers(-(2**62), 2**62))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(element, element), min_size=0, max_size=400),
    st.lists(st.tuples(element, element), min_size=0, max_size=400),
    st.integers(0, 1000),
)
def test_ids_equal_a_dict_of_first_sightings_through_growth(fit_keys, new_keys, offset):
    fit_keys = np.array(fit_keys, dtype=np.int64).reshape(-1, 2)
    new_keys = np.array(new_keys, dtype=np.int64).reshape(-1, 2)
    got, fitted = _intern_all(new_table(), new_table(2), 0, fit_keys)  # 2 slots: grows from the first key
    want, fitted_ref = _reference({}, fit_keys, 0)
    np.testing.assert_array_equal(got, want)
    assert fitted[0] == len(fitted_ref)
    before = fitted.copy()
    got, fresh = _intern_all(fitted, new_table(), offset, new_keys)  # transform: fitted is frozen
    want, fresh_ref = _reference(fitted_ref, new_keys, offset)
    np.testing.assert_array_equal(got, want)
    assert fresh[0] == len(fresh_ref)
    np.testing.assert_array_equal(fitted, before)  # the frozen table is never written
    for key, value in fresh_ref.items():
        assert lookup(fresh, *key) == value
    assert lookup(fresh, 2**62 + 1, 7) == EMPTY


def test_a_table_stays_at_most_three_quarters_full():
    keys = np.stack([np.arange(5000), np.arange(5000) % 7], axis=1).astype(np.int64)
    _, table = _intern_all(new_table(), new_table(2), 0, keys)
    assert table[0] == 5000
    assert 4 * table[0] <= 3 * (table[1] + 1) < 8 * table[0]  # slots = mask + 1, doubled only when needed
    np.testing.assert_array_equal(np.sort(table[2:].reshape(-1, 3)[:, 2])[-5000:], np.arange(5000))


def test_vocabulary_counts_pairs_from_its_offset_and_survives_pickling():
    vocab = Vocabulary(offset=5)
    frozen = Vocabulary().table
    keys = np.array([(1, 2), (3, 4), (1, 2), (-1, 7)], dtype=np.int64)
    ids, vocab.table = _intern_all(frozen, vocab.table, vocab.offset, keys)
    np.testing.assert_array_equal(ids, [5, 6, 5, 7])
    assert len(vocab) == 3 and vocab.size == 8
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.size == 8
    again, copy.table = _intern_all(frozen, copy.table, copy.offset, np.array([(-1, 7), (3, 4), (9, 9)]))
    np.testing.assert_array_equal(again, [7, 6, 8])
    assert vocab.size == 8 and copy.size == 9  # the copy grew, not the original


def test_tables_rebuilt_from_arrays_refuse_a_repeated_key():
    try:
        table_from_arrays(np.array([[1, 2], [1, 2]]), np.array([0, 1]))
    except ValueError as error:
        assert "twice" in str(error)
    else:
        raise AssertionError("a repeated key was accepted")
