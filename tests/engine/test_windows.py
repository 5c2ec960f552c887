"""engine.core.windows: recurring boards' time windows (docs/api.md §15), tested
directly against a brute-force reference (no clock, no Ray).

The reference shares nothing with the module but the zone rules (the same
tzdata files, via :func:`engine.core.windows.zone`): it only ever converts UTC
instants to local wall times (never local to UTC, never ``fold``), finds the
instants whose wall time is a nominal start by trying every offset the zone
uses nearby, takes the earliest (ambiguous), and when there is none (a gap)
bisects for the transition and moves the start forward by the gap. It walks
local calendar days to list nominal starts (every day, Mondays, 1sts).
"""

from __future__ import annotations

import bisect
import doctest
import functools
from datetime import date, datetime, timedelta, timezone

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.core import windows as W
from engine.core.errors import ValidationFailed
from engine.core.timefmt import MAX_MS, MIN_MS
from engine.core.windows import EVERY, Recurrence, Window

DAY, HOUR, MINUTE = 86_400_000, 3_600_000, 60_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: DST of an hour (Berlin, New York), of 30 minutes (Lord_Howe), a +5:45 zone (Kathmandu), transitions on
#: the 1st of a month and on Mondays at midnight (Cairo 1970-1981), on April 1 (Moscow 1981-1984), a
#: skipped day (Apia 2011-12-30), and none (UTC).
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "Africa/Cairo",
         "Europe/Moscow", "Pacific/Apia", "UTC"]
#: Local times of day (minutes) where those zones change their clocks, and both ends of the day.
AT_NEAR_TRANSITIONS = [0, 1, 30, 59, 60, 90, 119, 120, 135, 150, 179, 180, 181, 1380, 1410, 1439]
SPAN_DAYS = {"day": 3, "week": 22, "month": 95}  # reference nominal starts either side: 3 windows at least


# ------------------------------------------------------------------ the reference


def _local(tz, u: int) -> int:
    """Wall time at instant ``u`` as ms since 1970-01-01 00:00 local (UTC → local only)."""
    loc = (EPOCH + timedelta(milliseconds=u)).astimezone(tz)
    return (loc.replace(tzinfo=timezone.utc) - EPOCH) // timedelta(milliseconds=1)


def ref_resolve(tz, wall: int) -> int:
    """The instant of the local wall time ``wall`` (ms since local epoch)."""
    offsets = {_local(tz, u) - u for u in range(wall - 16 * HOUR, wall + 16 * HOUR + 1, 15 * MINUTE)}
    hits = [wall - o for o in offsets if _local(tz, wall - o) == wall]
    if hits:
        return min(hits)  # ambiguous: the earlier instant
    lo, hi = wall - 40 * HOUR, wall + 40 * HOUR  # local(lo) < wall < local(hi); no instant shows wall itself
    assert _local(tz, lo) < wall < _local(tz, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _local(tz, mid) < wall:
            lo = mid
        else:
            hi = mid
    clock_at_jump = _local(tz, hi - 1) + 1  # what the old clock would have shown at the transition
    return hi + (wall - clock_at_jump)  # forward by the gap: as far past the jump as wall is into the gap


def is_nominal(every: str, d: date) -> bool:
    return every == "day" or (every == "week" and d.weekday() == 0) or (every == "month" and d.day == 1)


@functools.lru_cache(maxsize=4096)
def ref_starts(rec: Recurrence, around: date) -> tuple[tuple[int, int], ...]:
    """(start, YYYYMMDD) of the windows whose nominal dates are near ``around``, in order;
    nominal starts resolving to one instant are one window, named by the later date."""
    tz = W.zone(rec.timezone)
    out: list[tuple[int, int]] = []
    span = SPAN_DAYS[rec.every]
    for k in range(-span, span + 1):
        d = around + timedelta(days=k)
        if not is_nominal(rec.every, d):
            continue
        wall = (d.toordinal() - date(1970, 1, 1).toordinal()) * DAY + rec.at_minutes * MINUTE
        start = ref_resolve(tz, wall)
        name = d.year * 10_000 + d.month * 100 + d.day
        if out and out[-1][0] == start:
            out[-1] = (start, name)
        else:
            assert not out or out[-1][0] < start, "nominal starts resolve in order"
            out.append((start, name))
    return tuple(out)


def ref_window(rec: Recurrence, t: int) -> Window:
    tz = W.zone(rec.timezone)
    around = date(1970, 1, 1) + timedelta(days=_local(tz, t) // DAY)
    starts = ref_starts(rec, around)
    i = bisect.bisect_right([s for s, _ in starts], t) - 1
    assert 0 <= i < len(starts) - 1, "the reference span covers t's window and the next"
    return Window(starts[i][0], starts[i + 1][0], starts[i][1])


# ------------------------------------------------------------------ strategies


@functools.lru_cache(maxsize=None)
def transitions(name: str) -> tuple[int, ...]:
    """Instants (to the hour) where the zone's offset changes, 1970-2040: where the cases are."""
    tz = W.zone(name)
    out = []
    t, prev = 0, None
    while t < 70 * 365 * DAY:
        off = _local(tz, t) - t
        if prev is not None and off != prev:
            h = t - DAY
            while _local(tz, h) - h == prev:
                h += HOUR
            out.append(h)
        prev, t = off, t + DAY
    return tuple(out) or (0,)


recurrences = st.builds(
    Recurrence,
    every=st.sampled_from(EVERY),
    timezone=st.sampled_from(ZONES),
    at_minutes=st.one_of(st.sampled_from(AT_NEAR_TRANSITIONS), st.integers(0, 1439)),
    keep=st.integers(1, 1000),
)


@st.composite
def instants(draw, rec: Recurrence) -> int:
    """Near one of the zone's transitions (within a month), or anywhere in 1971-2039."""
    if draw(st.booleans()):
        base = draw(st.sampled_from(transitions(rec.timezone)))
        return base + draw(st.integers(-31 * DAY, 31 * DAY))
    return draw(st.integers(365 * DAY, 69 * 365 * DAY))


@st.composite
def rec_and_instant(draw):
    rec = draw(recurrences)
    return rec, draw(instants(rec))


PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BERLIN_SPRING = 1_774_746_000_000  # 2026-03-29T01:00Z: Berlin 02:00 CET -> 03:00 CEST
BERLIN_FALL = 1_792_890_000_000  # 2026-10-25T01:00Z: Berlin 03:00 CEST -> 02:00 CET


# ------------------------------------------------------------------ properties


@PROPS
@given(rec_and_instant())
@example((Recurrence("day", "Europe/Berlin", 150), BERLIN_SPRING))
@example((Recurrence("day", "Pacific/Apia", 720), 1_325_239_200_000))  # 2011-12-30T10:00Z, the skipped day
@example((Recurrence("month", "Africa/Cairo", 30), 136_598_400_000))  # 1974-05-01T00:00Z
def test_window_of_is_the_reference_window(case):
    rec, t = case
    w = W.window_of(rec, t)
    assert w.start_ms <= t < w.end_ms
    assert w == ref_window(rec, t)


@PROPS
@given(rec_and_instant())
def test_windows_tile_time(case):
    """The end of a window is the start of the next, the start of one is the end of the
    one before: no gaps, no overlaps, and no empty window."""
    rec, t = case
    w = W.window_of(rec, t)
    nxt = W.next_window(rec, w)
    assert w.start_ms < w.end_ms == nxt.start_ms < nxt.end_ms
    assert nxt.date > w.date
    assert W.window_of(rec, w.end_ms - 1) == w
    before = W.window_of(rec, w.start_ms - 1)
    assert before.end_ms == w.start_ms and before.date < w.date
    assert W.next_window(rec, before) == w


@PROPS
@given(rec_and_instant())
def test_window_at_date_finds_each_window_by_its_name(case):
    rec, t = case
    w = W.window_of(rec, t)
    assert W.window_at_date(rec, w.date) == w
    assert W.window_at_date(rec, f"{w.date:08d}") == w
    d = date(w.date // 10_000, w.date // 100 % 100, w.date % 100)
    # the days up to the next window's date name no window (not nominal, or skipped)
    nxt = W.next_window(rec, w)
    for k in range(1, 4):
        other = d + timedelta(days=k)
        name = other.year * 10_000 + other.month * 100 + other.day
        if name < nxt.date:
            assert W.window_at_date(rec, name) is None


@PROPS
@given(rec_and_instant(), st.sampled_from(["arena-clash:solo:daily:global", "g:m:S.7_x-y:eu", "a:b:" + "s" * 55 + ":c"]))
def test_instance_ids_match_the_reference(case, series):
    rec, t = case
    w = W.window_of(rec, t)
    ref = ref_window(rec, t)
    game, mode, season, scope = series.split(":")
    expected = f"{game}:{mode}:{season}.{ref.date:08d}:{scope}"
    assert W.instance_id(series, w) == expected
    assert W.parse_instance_id(expected) == (series, ref.date)
    assert W.series_check(series) == series
    assert len(expected.split(":")[2]) <= 64


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recurrences, st.data())
def test_the_vectorised_form_equals_the_scalar_one(rec, data):
    ts = data.draw(st.lists(instants(rec), min_size=0, max_size=40))
    if ts and data.draw(st.booleans()):
        ts = ts + [ts[0]] * 3 + [W.window_of(rec, ts[0]).end_ms, W.window_of(rec, ts[0]).start_ms - 1]
    starts, ends, dates = W.windows_of(rec, np.array(ts, dtype=np.int64))
    assert starts.dtype == ends.dtype == dates.dtype == np.int64
    assert [Window(*x) for x in zip(starts.tolist(), ends.tolist(), dates.tolist())] == [W.window_of(rec, t) for t in ts]


def test_the_vectorised_form_looks_up_each_window_once(monkeypatch):
    """A batch of 10,000 events costs a scalar look-up per window it touches (plus one), not one per event."""
    rec = Recurrence("day", "Europe/Berlin", 240)
    calls = []
    real = W.window_of
    monkeypatch.setattr(W, "window_of", lambda r, t: calls.append(t) or real(r, t))
    rng = np.random.default_rng(7)
    t = rng.integers(BERLIN_FALL - DAY, BERLIN_FALL + DAY, 10_000)  # 3 windows: the 23rd's to the 25th's
    starts, ends, _ = W.windows_of(rec, t)
    assert len(set(starts.tolist())) == 3 and len(calls) == 4
    assert bool(np.all((starts <= t) & (t < ends)))
    calls.clear()
    one = real(rec, BERLIN_FALL)
    t = rng.integers(one.start_ms, one.end_ms, 10_000)
    starts, ends, dates = W.windows_of(rec, t)
    assert len(calls) == 1 and set(zip(starts.tolist(), ends.tolist(), dates.tolist())) == {tuple(one)}


@PROPS
@given(rec_and_instant(), st.integers(-40 * DAY, 100 * DAY))
def test_too_far_ahead_is_from_the_start_of_the_window_after_next(case, ahead):
    rec, now = case
    cur = ref_window(rec, now)
    after_next = ref_window(rec, ref_window(rec, cur.end_ms).end_ms)
    achieved = now + ahead
    assert W.too_far_ahead(rec, achieved, now) == (achieved >= after_next.start_ms)
    assert W.horizon(rec, now) == after_next.start_ms


def test_every_instant_of_the_api_range_has_a_window():
    """Windows starting before year 1 or ending after 9999 are computed, not overflowed."""
    for name in ("America/New_York", "Pacific/Kiritimati", "Asia/Kathmandu", "Europe/Berlin"):
        for every in EVERY:
            rec = Recurrence(every, name, 1439)
            for t in (MIN_MS, MIN_MS + 1, MAX_MS - 1, MAX_MS):
                w = W.window_of(rec, t)
                assert w.start_ms <= t < w.end_ms and W.next_window(rec, w).start_ms == w.end_ms
            starts, _, _ = W.windows_of(rec, np.array([MIN_MS, MAX_MS]))
            assert starts.tolist() == [W.window_of(rec, MIN_MS).start_ms, W.window_of(rec, MAX_MS).start_ms]
    first = W.window_of(Recurrence("day", "America/New_York"), MIN_MS)  # 0001-01-01T00:00Z is Dec 31 in New York
    assert first.date == 1231 and W.window_at_date(Recurrence("day", "America/New_York"), 1231) == first


# ------------------------------------------------------------------ the documented cases


def _utc(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%MZ")


def test_berlin_spring_forward_moves_a_missing_start_forward_by_the_gap():
    rec = W.Recurrence.parse({"every": "day", "timezone": "Europe/Berlin", "at": "02:30"})
    w = W.window_at_date(rec, 20260329)
    assert (_utc(w.start_ms), _utc(w.end_ms)) == ("2026-03-29T01:30Z", "2026-03-30T00:30Z")  # 03:30 CEST, 23 h
    assert W.window_of(rec, BERLIN_SPRING) == W.window_at_date(rec, 20260328)  # 02:00 CET is still the 28th's


def test_berlin_fall_back_takes_the_earlier_of_two_starts():
    rec = W.Recurrence.parse({"every": "day", "timezone": "Europe/Berlin", "at": "02:30"})
    w = W.window_at_date(rec, 20261025)
    assert (_utc(w.start_ms), _utc(w.end_ms)) == ("2026-10-25T00:30Z", "2026-10-26T01:30Z")  # 02:30 CEST, 25 h


def test_lord_howe_half_hour_dst_and_kathmandu_quarter_hour_offset():
    spring = W.Recurrence.parse({"every": "day", "timezone": "Australia/Lord_Howe", "at": "02:15"})
    # 2026-10-04 02:00 +10:30 -> 02:30 +11: 02:15 does not exist, it is 02:45 +11 (15:45Z the day before)
    assert _utc(W.window_at_date(spring, 20261004).start_ms) == "2026-10-03T15:45Z"
    fall = W.Recurrence.parse({"every": "day", "timezone": "Australia/Lord_Howe", "at": "01:45"})
    # 2026-04-05 02:00 +11 -> 01:30 +10:30: 01:45 happens twice, the first is 14:45Z
    assert _utc(W.window_at_date(fall, 20260405).start_ms) == "2026-04-04T14:45Z"
    ktm = W.Recurrence.parse({"every": "week", "timezone": "Asia/Kathmandu"})
    w = W.window_of(ktm, 1_796_600_000_000)  # 2026-12-06T23:33Z: Monday 05:18 in Kathmandu
    assert (w.date, _utc(w.start_ms), w.end_ms - w.start_ms) == (20261207, "2026-12-06T18:15Z", 7 * DAY)


def test_weeks_start_on_mondays_and_months_on_the_first():
    week = W.Recurrence.parse({"every": "week", "timezone": "America/New_York", "at": "04:00"})
    month = W.Recurrence.parse({"every": "month", "timezone": "America/New_York", "at": "04:00"})
    t = 1_796_600_000_000  # 2026-12-06T23:33Z: Sunday 18:33 in New York
    assert W.window_of(week, t).date == 20261130 and W.window_of(month, t).date == 20261201
    assert W.window_at_date(week, 20261207) is not None and W.window_at_date(week, 20261208) is None
    assert W.window_at_date(month, 20270101) is not None and W.window_at_date(month, 20270102) is None
    assert W.window_at_date(month, 20260230) is None and W.window_at_date(month, "2026-12-1") is None
    feb, mar = W.window_at_date(month, 20260201), W.window_at_date(month, 20260301)
    assert feb.end_ms - feb.start_ms == 28 * DAY and feb.end_ms == mar.start_ms
    assert mar.end_ms - mar.start_ms == 31 * DAY - HOUR  # clocks go forward on 2026-03-08


def test_a_skipped_day_names_no_window():
    """Apia skipped 2011-12-30: its nominal start is the 31st's, so the 29th's window
    ends where the 31st's starts and no window is named 20111230."""
    rec = Recurrence("day", "Pacific/Apia", 720)
    assert W.window_at_date(rec, 20111230) is None
    a, b = W.window_at_date(rec, 20111229), W.window_at_date(rec, 20111231)
    assert a.end_ms == b.start_ms and a.end_ms - a.start_ms == DAY


# ------------------------------------------------------------------ parsing


def test_parse_fills_the_defaults_and_round_trips_through_json_and_msgpack():
    rec = Recurrence.parse({"every": "day"})
    assert rec == Recurrence("day", "UTC", 0, 30)
    full = Recurrence.parse({"every": "month", "timezone": "Australia/Lord_Howe", "at": "23:59", "keep": 1000})
    for r in (rec, full):
        j = r.to_json()
        assert list(j) == ["every", "timezone", "at", "keep"]
        assert Recurrence.parse(j) == r
        back = msgpack.unpackb(msgpack.packb(j, use_bin_type=True))
        assert back == j and Recurrence.parse(back) == r
    assert full.to_json() == {"every": "month", "timezone": "Australia/Lord_Howe", "at": "23:59", "keep": 1000}


@pytest.mark.parametrize("obj, field", [
    (None, "recurrence"),
    (["day"], "recurrence"),
    ({}, "recurrence.every"),
    ({"every": "hour"}, "recurrence.every"),
    ({"every": ["day"]}, "recurrence.every"),
    ({"every": "day", "timezone": "Mars/Olympus"}, "recurrence.timezone"),
    ({"every": "day", "timezone": "europe/berlin"}, "recurrence.timezone"),
    ({"every": "day", "timezone": "../etc/passwd"}, "recurrence.timezone"),
    ({"every": "day", "timezone": "localtime"}, "recurrence.timezone"),
    ({"every": "day", "timezone": 1}, "recurrence.timezone"),
    ({"every": "day", "timezone": None}, "recurrence.timezone"),
    ({"every": "day", "timezone": ["UTC"]}, "recurrence.timezone"),
    ({"every": "day", "at": "24:00"}, "recurrence.at"),
    ({"every": "day", "at": "4:00"}, "recurrence.at"),
    ({"every": "day", "at": "04:60"}, "recurrence.at"),
    ({"every": "day", "at": "04:00:00"}, "recurrence.at"),
    ({"every": "day", "at": "04:00\n"}, "recurrence.at"),
    ({"every": "day", "at": "０4:00"}, "recurrence.at"),
    ({"every": "day", "at": 240}, "recurrence.at"),
    ({"every": "day", "keep": 0}, "recurrence.keep"),
    ({"every": "day", "keep": 1001}, "recurrence.keep"),
    ({"every": "day", "keep": 30.0}, "recurrence.keep"),
    ({"every": "day", "keep": True}, "recurrence.keep"),
    ({"every": "day", "keep": "30"}, "recurrence.keep"),
    ({"every": "day", "Every": "day"}, "recurrence.Every"),
    ({"every": "day", "at_minutes": 0}, "recurrence.at_minutes"),
])
def test_parse_rejects_with_the_field(obj, field):
    with pytest.raises(ValidationFailed) as err:
        Recurrence.parse(obj)
    assert err.value.field == field and err.value.code == "VALIDATION_FAILED" and err.value.message.endswith(".")


def _ref_valid(obj: dict) -> bool:
    """When a recurrence object is valid, from the rules as docs/api.md §15 states them."""
    def at_ok(v):
        return (type(v) is str and len(v) == 5 and v[2] == ":" and (v[:2] + v[3:]).isascii()
                and (v[:2] + v[3:]).isdigit() and int(v[:2]) < 24 and int(v[3:]) < 60)
    return (set(obj) <= {"every", "timezone", "at", "keep"} and obj.get("every") in ("day", "week", "month")
            and type(obj["every"]) is str
            and ("timezone" not in obj or (type(obj["timezone"]) is str and obj["timezone"] in W.zone_names()))
            and ("at" not in obj or at_ok(obj["at"]))
            and ("keep" not in obj or (type(obj["keep"]) is int and 1 <= obj["keep"] <= 1000)))


_ANY = st.one_of(st.none(), st.booleans(), st.integers(-5, 1005), st.floats(allow_nan=False), st.text(max_size=8),
                 st.sampled_from(["day", "week", "month", "UTC", "Europe/Berlin", "US/Eastern", "04:30", "23:59",
                                  "24:00", "4:30", "૦4:30"]))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["every", "timezone", "at", "keep", "Every", "start"]), _ANY, max_size=5))
def test_parse_accepts_exactly_the_valid_objects(obj):
    if _ref_valid(obj):
        rec = Recurrence.parse(obj)
        assert Recurrence.parse(rec.to_json()) == rec
        assert (rec.every, rec.timezone, rec.at, rec.keep) == (
            obj["every"], obj.get("timezone", "UTC"), obj.get("at", "00:00"), obj.get("keep", 30))
    else:
        with pytest.raises(ValidationFailed) as err:
            Recurrence.parse(obj)
        assert err.value.field.startswith("recurrence.")
        assert err.value.field[len("recurrence."):] in obj or err.value.field == "recurrence.every"


def test_parse_accepts_every_tzdata_name_and_link():
    for name in ("UTC", "Etc/GMT+5", "US/Eastern", "Asia/Katmandu", "EST5EDT", "America/Argentina/Buenos_Aires"):
        assert Recurrence.parse({"every": "week", "timezone": name}).timezone == name
        W.window_of(Recurrence("week", name), 0)


@given(st.integers(0, 1439))
def test_at_is_hh_mm_both_ways(minutes):
    at = f"{minutes // 60:02d}:{minutes % 60:02d}"
    rec = Recurrence.parse({"every": "day", "at": at})
    assert rec.at_minutes == minutes and rec.at == at


# ------------------------------------------------------------------ ids


def test_series_check_bounds_the_season_part():
    assert W.series_check("g:m:" + "s" * 55 + ":x")
    with pytest.raises(ValidationFailed) as err:
        W.series_check("g:m:" + "s" * 56 + ":x")
    assert err.value.field == "board_id"
    with pytest.raises(ValidationFailed):
        W.series_check("g:m:x")


def test_parse_instance_id_wants_a_dot_and_eight_digits():
    assert W.parse_instance_id("g:m:s.x.20261207:x") == ("g:m:s.x:x", 20261207)
    for not_one in ("g:m:s:x", "g:m:s.2026120:x", "g:m:s.202612070:x", "g:m:.20261207:x", "g:m:s_20261207:x",
                    "g:m:s.２0261207:x", "g:m:s.20261207", "g:m:s.20261207:x:y"):
        assert W.parse_instance_id(not_one) is None, not_one


def test_doctests():
    assert doctest.testmod(W).failed == 0
