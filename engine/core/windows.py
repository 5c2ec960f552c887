"""Time windows of recurring boards (docs/api.md §15, the recurrence part).

A *series* board carries a :class:`Recurrence`: windows start every day,
every Monday or on the 1st of every month at a local time of day in an IANA
time zone, and each ends where the next one starts. Each window is named by
the calendar date of its *nominal* local start (``YYYYMMDD``); its instance
board id replaces the series' season part with ``<season>.<YYYYMMDD>``.

Resolving a nominal local start to an instant follows one rule: an
ambiguous local time (a clock set back) is its earlier instant, a
nonexistent one (a clock set forward) moves forward by the gap. That is the
``fold=0`` reading of PEP 495: the wall time read with the offset in force
before the transition. So Europe/Berlin ``at: "02:30"`` starts at 03:30 CEST
on the spring-forward day and at 02:30 CEST (the first 02:30) on the
fall-back day.

When a zone skips a whole day (Pacific/Apia skipped 2011-12-30), two
nominal starts resolve to the same instant: the earlier window would be
empty, so there is none, and the window starting there is named by the later
date. Windows therefore tile time: every instant is in exactly one window,
and the end of one is the start of the next.

Pure: no clock, no Ray, no randomness; instants are ints of epoch
milliseconds (UTC). Zone rules come from the ``tzdata`` package (a pinned
dependency), read directly rather than from the system's zoneinfo files, so
every machine running the same install resolves the same windows. All
arithmetic is on integers, so every instant in the API's timestamp range
(years 0001-9999) has a window, even where a window starts before year 1 or
ends after 9999 (local dates outside 1-9999 are looked up 400 years away:
the Gregorian calendar, its weekdays and a zone's rules before its first
transition and after its last repeat with that period).

>>> r = Recurrence.parse({"every": "day", "timezone": "Europe/Berlin", "at": "04:00"})
>>> w = window_of(r, 1_796_600_000_000)  # 2026-12-06T23:33:20Z
>>> w.date, instance_id("arena-clash:solo:daily:global", w)
(20261206, 'arena-clash:solo:daily.20261206:global')
>>> w.end_ms - w.start_ms == 86_400_000 and next_window(r, w).start_ms == w.end_ms
True
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import NamedTuple
from zoneinfo import ZoneInfo

import numpy as np

from engine.core.errors import ValidationFailed

EVERY = ("day", "week", "month")
DEFAULT_TIMEZONE = "UTC"
DEFAULT_AT = "00:00"
DEFAULT_KEEP = 30
MAX_KEEP = 1_000
AT_PATTERN = r"^([01][0-9]|2[0-3]):([0-5][0-9])$"  # ``at``, as /openapi.json states it too
#: A series' season part is at most this long, so an instance's ``<season>.<YYYYMMDD>`` fits an id part (64).
MAX_SERIES_SEASON = 55
_FIELDS = ("every", "timezone", "at", "keep")
_AT = re.compile(AT_PATTERN)
_INSTANCE_SEASON = re.compile(r"(.+)\.([0-9]{8})")

_DAY_MS = 86_400_000
_MINUTE_MS = 60_000
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
#: Days in 400 Gregorian years: the calendar and its weekdays repeat with this period.
_CYCLE_DAYS = 146_097
_SAFE_LOW = date(3, 1, 1).toordinal()  # datetime arithmetic stays within years 1-9999 between these
_SAFE_HIGH = date(9997, 12, 31).toordinal()
_UTC_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


# ------------------------------------------------------------------ zones


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(importlib.resources.files("tzdata").joinpath("zones").read_text().split())


def zone_names() -> list[str]:
    """Every zone and link name tzdata lists, sorted (what ``timezone`` accepts)."""
    return sorted(_zone_names())


def is_zone(name: object) -> bool:
    """Whether ``name`` is an IANA zone (or link) name that tzdata lists (case-sensitive)."""
    return type(name) is str and name in _zone_names()


@functools.cache
def zone(name: str) -> ZoneInfo:
    """The rules of the IANA zone ``name`` from the ``tzdata`` package (cached).
    Raises KeyError for a name tzdata does not list (zones and their links)."""
    if not is_zone(name):
        raise KeyError(name)
    area, _, rest = name.rpartition("/")
    package = "tzdata.zoneinfo" + ("." + area.replace("/", ".") if area else "")
    with importlib.resources.files(package).joinpath(rest).open("rb") as f:
        return ZoneInfo.from_file(f, key=name)


def _safe_ordinal(ordinal: int) -> int:
    """``ordinal`` moved by whole 400-year cycles into years 3-9997 (same month, day and weekday)."""
    if ordinal < _SAFE_LOW:
        return ordinal + -(-(_SAFE_LOW - ordinal) // _CYCLE_DAYS) * _CYCLE_DAYS
    if ordinal > _SAFE_HIGH:
        return ordinal - -(-(ordinal - _SAFE_HIGH) // _CYCLE_DAYS) * _CYCLE_DAYS
    return ordinal


def _offset_at(tz: ZoneInfo, t_ms: int) -> int:
    """The zone's UTC offset (ms) in force at the instant ``t_ms``."""
    days, rem = divmod(t_ms, _DAY_MS)
    days = _safe_ordinal(days + _EPOCH_ORDINAL) - _EPOCH_ORDINAL
    utc = _UTC_EPOCH + timedelta(days=days, milliseconds=rem)
    return utc.astimezone(tz).utcoffset() // _MS


def _resolve(tz: ZoneInfo, ordinal: int, at_minutes: int) -> int:
    """The instant (epoch ms) of local wall time ``at_minutes`` on the day
    ``ordinal``: ambiguous → the earlier instant, nonexistent → moved forward
    by the gap (both are the pre-transition offset, ``fold=0``)."""
    d = date.fromordinal(_safe_ordinal(ordinal))
    offset = datetime(d.year, d.month, d.day, at_minutes // 60, at_minutes % 60, tzinfo=tz).utcoffset() // _MS
    return (ordinal - _EPOCH_ORDINAL) * _DAY_MS + at_minutes * _MINUTE_MS - offset


def _yyyymmdd(ordinal: int) -> int:
    safe = _safe_ordinal(ordinal)
    d = date.fromordinal(safe)
    year = d.year + (ordinal - safe) // _CYCLE_DAYS * 400
    return year * 10_000 + d.month * 100 + d.day


def _ordinal_of(yyyymmdd: int) -> int | None:
    """The day ordinal of a ``YYYYMMDD`` int, or None when it is no calendar date (years 0-9999)."""
    year, md = divmod(yyyymmdd, 10_000)
    if not 0 <= year <= 9999:
        return None
    shift = 400 if year < 1 else 0
    try:
        return date(year + shift, md // 100, md % 100).toordinal() - shift // 400 * _CYCLE_DAYS
    except ValueError:
        return None


# ------------------------------------------------------------------ recurrence


@dataclass(frozen=True, slots=True)
class Recurrence:
    """How a series' windows recur (docs/api.md §15). Build with :meth:`parse`.

    ``every``: ``"day"``, ``"week"`` (Mondays) or ``"month"`` (the 1st);
    ``timezone``: an IANA name; ``at_minutes``: local start time as minutes
    after midnight (0-1439); ``keep``: how many instances stay unarchived.
    """

    every: str
    timezone: str = DEFAULT_TIMEZONE
    at_minutes: int = 0
    keep: int = DEFAULT_KEEP

    @classmethod
    def parse(cls, obj: object, field: str = "recurrence") -> "Recurrence":
        """A recurrence from its JSON form (the API's, or :meth:`to_json`'s).

        Raises :class:`ValidationFailed` naming the bad input (``field`` for a
        non-object, ``<field>.<key>`` for a bad or unknown key).

        >>> Recurrence.parse({"every": "week", "at": "04:30"})
        Recurrence(every='week', timezone='UTC', at_minutes=270, keep=30)
        >>> Recurrence.parse({"every": "day", "timezone": "Mars/Olympus"})
        Traceback (most recent call last):
        engine.core.errors.ValidationFailed: timezone must be an IANA time zone name such as "Europe/Berlin"; \
'Mars/Olympus' is not one.
        """
        if type(obj) is not dict:
            raise ValidationFailed(f"{field} must be a JSON object with every, timezone, at and keep.", field)
        for key in obj:
            if key not in _FIELDS:
                raise ValidationFailed(f"{field} has no key {key!r}; its keys are every, timezone, at and keep.",
                                       f"{field}.{key}")
        if "every" not in obj:
            raise ValidationFailed('every is required: "day", "week" or "month".', f"{field}.every")
        every = obj["every"]
        if type(every) is not str or every not in EVERY:
            raise ValidationFailed('every must be "day", "week" or "month".', f"{field}.every")
        tz = obj.get("timezone", DEFAULT_TIMEZONE)
        if not is_zone(tz):
            shown = repr(tz) if type(tz) is str else "that"
            raise ValidationFailed(f'timezone must be an IANA time zone name such as "Europe/Berlin"; {shown[:80]} '
                                   "is not one.", f"{field}.timezone")
        at = obj.get("at", DEFAULT_AT)
        m = _AT.fullmatch(at) if type(at) is str else None
        if m is None:
            raise ValidationFailed('at must be a local time "HH:MM" (00:00 to 23:59).', f"{field}.at")
        keep = obj.get("keep", DEFAULT_KEEP)
        if type(keep) is not int or not 1 <= keep <= MAX_KEEP:
            raise ValidationFailed(f"keep must be an integer in 1..{MAX_KEEP:,}.", f"{field}.keep")
        return cls(every, tz, int(m.group(1)) * 60 + int(m.group(2)), keep)

    @property
    def at(self) -> str:
        return f"{self.at_minutes // 60:02d}:{self.at_minutes % 60:02d}"

    def to_json(self) -> dict:
        """The API form with every key, in a fixed order (what the board record
        logs): ``Recurrence.parse(r.to_json()) == r``."""
        return {"every": self.every, "timezone": self.timezone, "at": self.at, "keep": self.keep}


class Window(NamedTuple):
    """One window of a series: ``[start_ms, end_ms)``, named by ``date``, the
    ``YYYYMMDD`` int of its nominal local start."""

    start_ms: int
    end_ms: int
    date: int


# ------------------------------------------------------------------ nominal starts


def _nominal_on_or_before(every: str, ordinal: int) -> int:
    if every == "day":
        return ordinal
    if every == "week":
        return ordinal - (ordinal - 1) % 7  # ordinal 1 (0001-01-01) is a Monday
    safe = _safe_ordinal(ordinal)
    return ordinal - date.fromordinal(safe).day + 1


def _step(every: str, ordinal: int, n: int) -> int:
    """The nominal start ``n`` (±1) periods after the nominal start ``ordinal``."""
    if every == "day":
        return ordinal + n
    if every == "week":
        return ordinal + 7 * n
    safe = _safe_ordinal(ordinal)
    d = date.fromordinal(safe)
    months = d.year * 12 + d.month - 1 + n
    return date(months // 12, months % 12 + 1, 1).toordinal() + (ordinal - safe)


def _is_nominal(every: str, ordinal: int) -> bool:
    return _nominal_on_or_before(every, ordinal) == ordinal


def _window_from(rec: Recurrence, tz: ZoneInfo, nominal: int, t_ms: int) -> Window:
    """The window containing ``t_ms``, searching from the nominal start ``nominal``
    (at or near the right one; a step or two either way at most)."""
    start = _resolve(tz, nominal, rec.at_minutes)
    while start > t_ms:
        nominal = _step(rec.every, nominal, -1)
        start = _resolve(tz, nominal, rec.at_minutes)
    nxt = _step(rec.every, nominal, 1)
    end = _resolve(tz, nxt, rec.at_minutes)
    while end <= t_ms:  # also passes a nominal start that resolved to this same instant (a skipped day)
        nominal, start = nxt, end
        nxt = _step(rec.every, nominal, 1)
        end = _resolve(tz, nxt, rec.at_minutes)
    return Window(start, end, _yyyymmdd(nominal))


def window_of(rec: Recurrence, t_ms: int) -> Window:
    """The window containing the instant ``t_ms`` (start inclusive, end
    exclusive). A few zone look-ups, O(1)."""
    tz = zone(rec.timezone)
    local_day = (t_ms + _offset_at(tz, t_ms)) // _DAY_MS + _EPOCH_ORDINAL
    return _window_from(rec, tz, _nominal_on_or_before(rec.every, local_day), t_ms)


def next_window(rec: Recurrence, w: Window) -> Window:
    """The window that starts where ``w`` ends."""
    return window_of(rec, w.end_ms)


def window_at_date(rec: Recurrence, yyyymmdd: int | str) -> Window | None:
    """The window named ``yyyymmdd`` (int or 8-digit str), or None when no
    window has that name: not a calendar date, not a nominal start of this
    recurrence (a Monday, a 1st), or a start whose day the zone skipped."""
    if isinstance(yyyymmdd, str):
        if not (len(yyyymmdd) == 8 and yyyymmdd.isascii() and yyyymmdd.isdigit()):
            return None
        yyyymmdd = int(yyyymmdd)
    ordinal = _ordinal_of(yyyymmdd)
    if ordinal is None or not _is_nominal(rec.every, ordinal):
        return None
    tz = zone(rec.timezone)
    w = _window_from(rec, tz, ordinal, _resolve(tz, ordinal, rec.at_minutes))
    return w if w.date == yyyymmdd else None


def horizon(rec: Recurrence, now_ms: int) -> int:
    """The first instant too far ahead for an ``achieved_at`` (docs/api.md
    §15): the start of the window after the next one, counted from the window
    containing ``now_ms``. A batch compares its column against it once."""
    return next_window(rec, window_of(rec, now_ms)).end_ms


def too_far_ahead(rec: Recurrence, achieved_ms: int, now_ms: int) -> bool:
    """Whether an event achieved at ``achieved_ms`` is more than one window
    ahead of the current window (422 for the event's ``achieved_at``)."""
    return achieved_ms >= horizon(rec, now_ms)


def windows_of(rec: Recurrence, t_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window of every instant of ``t_ms`` as three int64 columns
    ``(starts, ends, dates)``, equal to :func:`window_of` row by row.

    One scalar look-up per distinct window the batch touches (however far
    apart its instants are), then one ``np.searchsorted`` over the batch:
    O(n log n + w) for n instants in w windows; O(n) when they share one.
    """
    t = np.asarray(t_ms, dtype=np.int64)
    if t.size == 0:
        empty = np.empty(0, np.int64)
        return empty, empty.copy(), empty.copy()
    first = window_of(rec, int(t.min()))
    if int(t.max()) < first.end_ms:  # the usual batch: every event in one window
        return (np.full(t.shape, first.start_ms, np.int64), np.full(t.shape, first.end_ms, np.int64),
                np.full(t.shape, first.date, np.int64))
    order = np.sort(t)
    found: list[Window] = []
    i, n = 0, order.size
    while i < n:
        w = window_of(rec, int(order[i]))
        found.append(w)
        i = int(np.searchsorted(order, w.end_ms, side="left"))
    starts = np.fromiter((w.start_ms for w in found), np.int64, len(found))
    ends = np.fromiter((w.end_ms for w in found), np.int64, len(found))
    dates = np.fromiter((w.date for w in found), np.int64, len(found))
    idx = np.searchsorted(starts, t, side="right") - 1
    return starts[idx], ends[idx], dates[idx]


# ------------------------------------------------------------------ ids


def _parts(board_id: str) -> list[str]:
    parts = board_id.split(":")
    if len(parts) != 4:
        raise ValidationFailed(f"Board {board_id!r} is not game:mode:season:scope.", "board_id")
    return parts


def series_check(board_id: str, field: str = "board_id") -> str:
    """``board_id`` if it can name a series: its season part is at most
    :data:`MAX_SERIES_SEASON` characters (so ``<season>.<YYYYMMDD>`` is a
    valid id part); else :class:`ValidationFailed` on ``field``."""
    season = _parts(board_id)[2]
    if len(season) > MAX_SERIES_SEASON:
        raise ValidationFailed(f"A recurring board's season part must be at most {MAX_SERIES_SEASON} characters "
                               f"(its instances add .YYYYMMDD); {season[:20]!r}... has {len(season)}.", field)
    return board_id


def instance_id(series_board_id: str, window: Window) -> str:
    """The id of ``window``'s instance of the series ``series_board_id``.

    >>> instance_id("arena-clash:solo:daily:global", Window(0, 1, 20261207))
    'arena-clash:solo:daily.20261207:global'
    """
    parts = _parts(series_board_id)
    if not 0 <= window.date <= 99_991_231:
        raise ValueError(f"window date {window.date} is not an 8-digit YYYYMMDD")
    parts[2] = f"{parts[2]}.{window.date:08d}"
    return ":".join(parts)


def parse_instance_id(board_id: str) -> tuple[str, int] | None:
    """``(series id, YYYYMMDD)`` if ``board_id`` has an instance's form
    (season part ``<season>.<8 digits>``), else None. Syntax only: whether
    that series exists, and has a window of that date, is the caller's
    question (:func:`window_at_date`).

    >>> parse_instance_id("arena-clash:solo:daily.20261207:global")
    ('arena-clash:solo:daily:global', 20261207)
    >>> parse_instance_id("arena-clash:solo:S7:global") is None
    True
    """
    parts = board_id.split(":")
    if len(parts) != 4:
        return None
    m = _INSTANCE_SEASON.fullmatch(parts[2])
    if m is None:
        return None
    parts[2] = m.group(1)
    return ":".join(parts), int(m.group(2))
