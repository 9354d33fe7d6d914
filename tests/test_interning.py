"""The pair tables behind every canonical ID: sizes, offsets and pickling."""

import pickle

import numpy as np

from mwsp_torch._interning import Vocabulary, intern_pair, table_len


def test_vocabulary_counts_pairs_from_its_offset_and_survives_pickling():
    vocab = Vocabulary(offset=5)
    frozen = Vocabulary().table
    assert len(vocab) == 0 and vocab.size == 5
    ids = [intern_pair(frozen, vocab.table, vocab.offset, a, b) for a, b in [(1, 2), (3, 4), (1, 2), (-1, 7)]]
    assert ids == [5, 6, 5, 7]
    assert len(vocab) == table_len(vocab.table) == 3 and vocab.size == 8
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.size == 8
    again = [intern_pair(frozen, copy.table, copy.offset, a, b) for a, b in [(-1, 7), (3, 4), (9, 9)]]
    assert again == [7, 6, 8]
    assert vocab.size == 8  # the copy grew, not the original


def test_frozen_table_is_read_first_and_never_grows():
    fitted = Vocabulary()
    for a in range(4):
        intern_pair(Vocabulary().table, fitted.table, 0, a, a + 1)
    fresh = Vocabulary(offset=fitted.size)
    got = np.array([intern_pair(fitted.table, fresh.table, fresh.offset, a, a + 1) for a in range(6)])
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4, 5])
    assert len(fitted) == 4 and len(fresh) == 2
