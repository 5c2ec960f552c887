"""The columnar write path (Router.submit_columns) against the per-event semantics.

Oracle: the same events submitted one per submission, through ``submit``.
Outcomes, versions, the change ring, the deltas live listeners get and the
outcome counters must agree, for any mix of boards (one unknown), partition
counts, duplicates, held events and metadata."""

from __future__ import annotations

import asyncio

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import records as R
from engine.core.columns import BatchResult, ScoreBatch
from engine.core.model import BoardSpec, Outcome, Policy, ScoreEvent
from engine.router.router import results_of
from engine.runtime.local import LocalService

BOARDS = ("g:m:s:a", "g:m:s:b")
UNKNOWN = "g:m:s:nope"


@st.composite
def submissions(draw):
    shards = draw(st.sampled_from([(1, 1), (2, 3), (3, 4)]))
    policies = [draw(st.sampled_from(list(Policy))) for _ in BOARDS]
    review = draw(st.sampled_from([None, 2]))
    n = draw(st.integers(1, 40))
    board = st.sampled_from(BOARDS + (UNKNOWN,))
    player = st.sampled_from([f"p{i}" for i in range(6)])
    meta = st.sampled_from([b"", b"", b'{"k":1}', b'{"k":"x"}'])
    events = [ScoreEvent(draw(board), f"e{i}", draw(player), draw(st.integers(-2, 4)), draw(st.integers(0, 3)),
                         draw(st.integers(0, 3)), draw(meta)) for i in range(n)]
    events += draw(st.lists(st.sampled_from(events), max_size=6))  # duplicates, maybe across batches
    cuts = sorted(draw(st.lists(st.integers(1, len(events)), max_size=3)))
    return shards, policies, review, events, cuts


async def _run(shards, policies, review, events, cuts, columnar: bool):
    n_shards, board_shards = shards
    svc = await LocalService.open(data_dir=None, n_shards=n_shards)
    heard: dict = {b: [] for b in BOARDS}  # per board: the deltas live listeners got, in order
    svc.subscribe(lambda board_id, deltas: heard[board_id].extend(
        (d.version, [tuple(c) for c in d.changes]) for d in deltas))
    try:
        for b, policy in zip(BOARDS, policies):
            await svc.create_board(BoardSpec(b, policy, shards=board_shards, max_plausible_time_ms=3,
                                             review_above=review if b == BOARDS[1] else None))
        answers = []
        if columnar:
            for lo, hi in zip([0] + cuts, cuts + [len(events)]):
                if lo < hi:
                    res = await svc.submit_columns(ScoreBatch.from_events(events[lo:hi]))
                    assert isinstance(res, BatchResult) and len(res.codes) == hi - lo
                    answers += [(r.outcome.value, r.version) for r in results_of(events[lo:hi], res)]
        else:
            for ev in events:
                answers += [(r.outcome.value, r.version) for r in await svc.submit([ev])]
        rings = {b: [(d.version, [tuple(c) for c in d.changes]) for d in svc.router.boards[b].ring.since(0) or []]
                 for b in BOARDS}
        versions = {b: (await svc.board(b)).version for b in BOARDS}
        top = {b: [(e.player_id, e.value, e.metadata) for e in (await svc.top(b, 0, 100)).entries] for b in BOARDS}
        outcomes = {k: v for k, v in svc.router.metrics["outcomes"].items() if v}
        return {"answers": answers, "rings": rings, "heard": heard, "versions": versions, "top": top,
                "outcomes": outcomes}
    finally:
        await svc.close()


@settings(max_examples=60, deadline=None)
@given(submissions())
def test_columnar_batches_answer_as_one_event_per_submission(sub):
    loop = asyncio.new_event_loop()
    try:
        columnar = loop.run_until_complete(_run(*sub, columnar=True))
        single = loop.run_until_complete(_run(*sub, columnar=False))
    finally:
        loop.close()
    assert columnar == single
    events = sub[3]
    for ev, (outcome, version) in zip(events, columnar["answers"]):
        if ev.board_id == UNKNOWN:
            assert (outcome, version) == (Outcome.REJECTED_UNKNOWN_SEASON.value, 0)


def test_an_empty_batch_is_answered_empty():
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=1)
        try:
            res = await svc.submit_columns(ScoreBatch.from_events([]))
            assert len(res.codes) == 0 and len(res.versions) == 0
        finally:
            await svc.close()

    asyncio.run(go())


def test_versions_step_once_per_change_in_submission_order_across_partitions():
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await svc.create_board(BoardSpec(BOARDS[0], Policy.BEST_SCORE, shards=4))
            evs = [ScoreEvent(BOARDS[0], f"e{i}", f"p{i % 5}", v, 1, 1) for i, v in enumerate([3, 1, 4, 1, 5, 9, 2, 6])]
            res = await svc.submit_columns(ScoreBatch.from_events(evs))
            codes = res.codes.tolist()
            changed = [c in (R.CODE[Outcome.APPLIED_FIRST_SCORE], R.CODE[Outcome.APPLIED_NEW_BEST]) for c in codes]
            assert res.versions.tolist() == np.cumsum(changed).tolist()
        finally:
            await svc.close()

    asyncio.run(go())
