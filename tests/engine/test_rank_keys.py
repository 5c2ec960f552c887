"""engine.rank_keys: a guess is either nothing or the key last put for that
player on that board (never another player's, never an older one), and the
table's memory is fixed at creation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.rank_keys import RankKeyCache

players = st.sampled_from(["ann", "ben", "cy", "dee", "é", "e\ud800", "x" * 40])
boards = st.sampled_from(["g:m:s1:global", "g:m:s2:global"])
ops = st.lists(st.tuples(st.sampled_from(["put", "forget", "get"]), boards, players,
                         st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)), max_size=200)


@given(ops, st.sampled_from([1, 2, 8, 1024]))
def test_a_guess_is_the_last_key_put_or_nothing(steps, slots):
    keys, oracle = RankKeyCache(slots), {}
    size = keys.nbytes
    for op, board, player, a, b in steps:
        if op == "put":
            keys.put(board, player, [a, b, player])
            oracle[board, player] = [a, b, player]
        elif op == "forget":
            keys.forget(board, player)
            oracle.pop((board, player), None)
        got = keys.get(board, player)
        assert got is None or got == oracle.get((board, player))
    assert keys.nbytes == size


def test_a_table_with_room_keeps_every_player():
    keys = RankKeyCache(1 << 16)
    for k in range(100):
        keys.put("b", f"p{k}", [k, -k, f"p{k}"])
    hits = sum(keys.get("b", f"p{k}") == [k, -k, f"p{k}"] for k in range(100))
    assert hits >= 99  # a collision of two slots among 100 in 65,536 is possible, not likely


def test_keys_it_cannot_hold_are_not_kept():
    keys = RankKeyCache(16)
    keys.put("b", "ann", [1, 2, "ann"])
    keys.put("b", "ann", [2**63, 0, "ann"])  # past int64: the old guess goes too
    assert keys.get("b", "ann") is None
    keys.put("b", "ann", [1, 2, "someone else"])
    assert keys.get("b", "ann") is None
    keys.put("b", "ann", None)
    assert keys.get("b", "ann") is None
