"""A brute-force reference: final rows computed with sorted() and nothing clever."""

from __future__ import annotations

from engine.core.model import Policy, ScoreEvent


def final_rows(policy: Policy, events: list[ScoreEvent], invalid: set[str] = frozenset(), max_time: int = 86_400_000):
    """player -> (value, achieved_at, submitted_at) after every distinct event id
    (first content wins) minus ``invalid`` ids; players with nothing valid are absent."""
    seen: dict[str, ScoreEvent] = {}
    for ev in events:
        seen.setdefault(ev.event_id, ev)
    by_player: dict[str, list[ScoreEvent]] = {}
    for ev in seen.values():
        if ev.event_id in invalid:
            continue
        if policy is Policy.FASTEST_TIME and not 0 < ev.value <= max_time:
            continue
        by_player.setdefault(ev.player_id, []).append(ev)
    rows = {}
    for pid, evs in by_player.items():
        if policy is Policy.CUMULATIVE:
            rows[pid] = (sum(e.value for e in evs), max(e.achieved_at for e in evs), None)
        elif policy is Policy.BEST_SCORE:
            best = sorted(evs, key=lambda e: (-e.value, e.achieved_at))[0]
            rows[pid] = (best.value, best.achieved_at, best.submitted_at)
        elif policy is Policy.LATEST:
            last = latest_event(evs)
            rows[pid] = (last.value, last.achieved_at, last.submitted_at)
        else:
            best = sorted(evs, key=lambda e: (e.value, e.submitted_at))[0]
            rows[pid] = (best.value, best.achieved_at, best.submitted_at)
    return rows


def latest_event(evs: list[ScoreEvent]) -> ScoreEvent:
    """A latest board's row (docs/api.md §14): the event with the latest
    achieved_at, then the later submitted_at, then the greater event id (code
    points: Python compares str so), found with sorted()."""
    return sorted(evs, key=lambda e: (e.achieved_at, e.submitted_at, e.event_id))[-1]


def ranking(policy: Policy, rows: dict) -> list[str]:
    """Player ids in rank order by the docs/api.md §6 comparator, via sorted()."""
    def key(pid):
        value, achieved, submitted = rows[pid]
        if policy is Policy.FASTEST_TIME:
            return (value, submitted, pid)
        return (-value, achieved, pid)

    return sorted(rows, key=key)


def final_metadata(policy: Policy, events: list[ScoreEvent], invalid: set[str] = frozenset(),
                   max_time: int = 86_400_000) -> dict[str, bytes]:
    """player -> metadata of the event that gives the row its value (docs/api.md
    §13), for the players :func:`final_rows` has: best_score / fastest_time:
    the best event (the first to arrive among equal keys); cumulative: the
    latest applied event (in arrival order); latest: the latest event. b"" when
    that event has none."""
    seen: dict[str, ScoreEvent] = {}
    for ev in events:
        seen.setdefault(ev.event_id, ev)
    by_player: dict[str, list[ScoreEvent]] = {}
    for ev in seen.values():
        if ev.event_id in invalid or (policy is Policy.FASTEST_TIME and not 0 < ev.value <= max_time):
            continue
        by_player.setdefault(ev.player_id, []).append(ev)
    out = {}
    for pid, evs in by_player.items():
        if policy is Policy.CUMULATIVE:
            out[pid] = evs[-1].metadata
        elif policy is Policy.BEST_SCORE:
            out[pid] = sorted(evs, key=lambda e: (-e.value, e.achieved_at))[0].metadata
        elif policy is Policy.LATEST:
            out[pid] = latest_event(evs).metadata
        else:
            out[pid] = sorted(evs, key=lambda e: (e.value, e.submitted_at))[0].metadata
    return out
