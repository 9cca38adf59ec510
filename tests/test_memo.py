"""meshplan.memo.IdentityMemo: the identity-keyed memo the hot paths of a plan search share."""

from __future__ import annotations

from meshplan.memo import MISS, IdentityMemo


class Thing:
    """An object compared by identity only."""


def test_a_value_is_found_for_the_very_objects_it_was_kept_with():
    memo, a, b = IdentityMemo(8), Thing(), Thing()
    assert memo.find((id(a), 1), a) is MISS
    assert memo.keep((id(a), 1), (a,), None) is None
    assert memo.find((id(a), 1), a) is None  # None is a value, not a miss
    assert memo.find((id(a), 2), a) is MISS
    assert memo.find((id(a), 1), b) is MISS  # another object under the same key is a miss


def test_entries_keep_their_objects_alive_and_the_memo_empties_past_its_limit():
    memo = IdentityMemo(2)
    for i in range(3):
        thing = Thing()
        memo.keep(id(thing), (thing,), i)
    assert len(memo) == 3 and all(entry[0][0] is not None for entry in memo.values())
    thing = Thing()
    memo.keep(id(thing), (thing,), "last")
    assert list(memo.values()) == [((thing,), "last")]
    memo.clear()
    assert memo.find(id(thing), thing) is MISS
