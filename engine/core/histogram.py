"""Cumulative latency histograms: what the engine keeps so /metrics can export
Prometheus histograms that sum across gateway processes (quantiles over
windows of samples do not).

A :class:`Histogram` counts every observation since the process started into
fixed buckets (Prometheus ``le`` semantics: a value equal to a bound falls in
that bound's bucket) and keeps their sum: a fixed number of integers whatever
the traffic, O(log buckets) per observation (one per ingest cycle on the hot
path, never one per event). :meth:`Histogram.snapshot` is the exportable,
immutable record.

>>> h = Histogram((0.1, 1.0))
>>> for x in (0.05, 0.1, 0.5, 3.0):
...     h.observe(x)
>>> h.snapshot()
HistogramSnapshot(bounds=(0.1, 1.0), cumulative=(2, 3, 4), sum=3.65, count=4)
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple, Sequence

# Seconds; the same bounds as the gateway's request histogram, so panels line up.
LATENCY_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                                      5.0, 10.0)


class HistogramSnapshot(NamedTuple):
    """``cumulative[i]`` = observations ≤ ``bounds[i]``; the last entry (one more than ``bounds``) is
    every observation (``le="+Inf"``, equal to ``count``)."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int


class Histogram:
    __slots__ = ("bounds", "_counts", "_sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS):
        b = tuple(float(x) for x in bounds)
        if not b or any(x >= y for x, y in zip(b, b[1:])):
            raise ValueError("histogram bounds must be non-empty and strictly increasing")
        self.bounds = b
        self._counts = [0] * (len(b) + 1)  # per bucket, not cumulative; the last is (bounds[-1], +Inf)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self.bounds, value)] += 1
        self._sum += value

    def snapshot(self) -> HistogramSnapshot:
        running, cumulative = 0, []
        for n in self._counts:
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self._sum, running)
