"""The overview's figures and totals, from plain rows of hourly counts (no database here).

Figures are plain plotly figure dicts (data and layout), rendered by the bundled
plotly.js; building them as dicts keeps the page fast and the functions testable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable, Sequence

from trails.core.validation import Outcome

OUTCOMES = tuple(o.value for o in Outcome)
HIT_OUTCOMES = (Outcome.PREFETCH.value, Outcome.HINT.value)
COLOURS = {"prefetch": "#2f855a", "hint": "#b7791f", "miss": "#a0aec0"}
SECOND_CHANCE_COLOUR = "#805ad5"


@dataclass(frozen=True)
class HourCounts:
    """One scope's recalls of one outcome in one hour: those a second chance served
    (`second_chance`) apart from the rest, which are summed over matchers."""

    hour: datetime
    outcome: str
    count: int
    stale_marked: int = 0
    calls_saved: int = 0
    tokens_saved: int = 0
    second_chance: bool = False


@dataclass
class Totals:
    """Recalls, hits and savings of a window; the `second_chance_*` figures are the part of
    each that second chances served (already inside `hits`, `calls_saved` and `tokens_saved`)."""

    recalls: int = 0
    by_outcome: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    stale_found: int = 0
    calls_saved: int = 0
    tokens_saved: int = 0
    second_chance_hits: int = 0
    second_chance_calls_saved: int = 0
    second_chance_tokens_saved: int = 0

    @property
    def hits(self) -> int:
        return self.by_outcome["prefetch"] + self.by_outcome["hint"]

    @property
    def first_chance_hits(self) -> int:
        return self.hits - self.second_chance_hits

    def share(self, outcome: str) -> float | None:
        """The share of recalls with this outcome, or None with no recalls."""
        return self.by_outcome[outcome] / self.recalls if self.recalls else None

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.recalls if self.recalls else None


def totals(rows: Iterable[HourCounts]) -> Totals:
    result = Totals()
    for row in rows:
        result.recalls += row.count
        result.by_outcome[row.outcome] = result.by_outcome.get(row.outcome, 0) + row.count
        result.stale_found += row.stale_marked
        result.calls_saved += row.calls_saved
        result.tokens_saved += row.tokens_saved
        if row.second_chance and row.outcome in HIT_OUTCOMES:
            result.second_chance_hits += row.count
            result.second_chance_calls_saved += row.calls_saved
            result.second_chance_tokens_saved += row.tokens_saved
    return result


@dataclass
class Series:
    """Counts per time bucket, every bucket of the window present (zero where nothing happened);
    `second_chance` holds the hits (of `counts`) that second chances served."""

    starts: list[datetime]
    counts: dict[str, list[int]]
    second_chance: list[int] = field(default_factory=list)

    def volumes(self) -> list[int]:
        return [sum(self.counts[o][i] for o in OUTCOMES) for i in range(len(self.starts))]

    def hits(self) -> list[int]:
        return [sum(self.counts[o][i] for o in HIT_OUTCOMES) for i in range(len(self.starts))]

    def second_chance_hits(self) -> list[int]:
        return self.second_chance or [0] * len(self.starts)

    def first_chance_hits(self) -> list[int]:
        return [h - s for h, s in zip(self.hits(), self.second_chance_hits())]

    def hit_rate(self) -> list[float | None]:
        """All hits (first and second chance) over all recalls, per bucket; None where none."""
        return _rates(self.hits(), self.volumes())

    def first_chance_rate(self) -> list[float | None]:
        return _rates(self.first_chance_hits(), self.volumes())

    def second_chance_rate(self) -> list[float | None]:
        return _rates(self.second_chance_hits(), self.volumes())


def _rates(parts: list[int], wholes: list[int]) -> list[float | None]:
    return [part / whole if whole else None for part, whole in zip(parts, wholes)]


def series(rows: Iterable[HourCounts], start: datetime, end: datetime, bucket: timedelta) -> Series:
    """Sums hourly rows into buckets of `bucket` from `start` up to `end`."""
    size = int((end - start) / bucket) + (1 if (end - start) % bucket else 0)
    starts = [start + i * bucket for i in range(size)]
    counts = {o: [0] * size for o in OUTCOMES}
    second_chance = [0] * size
    for row in rows:
        i = int((row.hour - start) / bucket)
        if 0 <= i < size and row.outcome in counts:
            counts[row.outcome][i] += row.count
            if row.second_chance and row.outcome in HIT_OUTCOMES:
                second_chance[i] += row.count
    return Series(starts, counts, second_chance)


def _layout(title: str, **extra) -> dict:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "margin": {"l": 48, "r": 16, "t": 40, "b": 40},
        "height": 280,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "legend": {"orientation": "h", "y": -0.2},
        **extra,
    }


def outcomes_figure(data: Series, log_url: str | None = None, bucket: timedelta = timedelta(hours=1)) -> dict:
    """Stacked recalls per bucket. With `log_url`, a click on a bar opens the recall log
    filtered to that bucket and outcome (charts.js follows layout.meta.click)."""
    x = [s.isoformat() for s in data.starts]
    figure = {
        "data": [
            {
                "type": "bar",
                "name": o,
                "x": x,
                "y": data.counts[o],
                "marker": {"color": COLOURS[o]},
                "customdata": [f"outcome={o}&since={_url_time(s)}&until={_url_time(s + bucket)}" for s in data.starts],
                "hovertemplate": "%{y} " + o + " recalls<br>%{x}<extra></extra>",
            }
            for o in OUTCOMES
        ],
        "layout": _layout(
            "Recall outcomes (click a bar for its recalls)",
            barmode="stack",
            yaxis={"title": {"text": "recalls"}, "rangemode": "tozero"},
        ),
    }
    if log_url:
        figure["layout"]["meta"] = {"click": log_url + "?{customdata}"}
    return figure


def _url_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d+%H:%M")


# A bucket with fewer recalls than this is drawn faint: its rate is noise, not a trend.
LOW_VOLUME = 20


def hit_rate_figure(data: Series, second_chance_apart: bool = False) -> dict:
    """The hit rate per bucket with the volume behind it: the marker's size grows with the
    recalls, low-volume buckets are faint, and the tooltip gives the counts. With
    `second_chance_apart`, the hits a second chance served are a series of their own
    ("second chance") beside the first chance's, each a share of all recalls."""
    volumes = data.volumes()
    first = data.first_chance_hits() if second_chance_apart else data.hits()
    rates = [None if r is None else round(100 * r, 1) for r in _rates(first, volumes)]
    biggest = max(volumes, default=0) or 1
    x = [s.isoformat() for s in data.starts]
    traces = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "first chance" if second_chance_apart else "hit rate",
            "connectgaps": False,
            "x": x,
            "y": rates,
            "line": {"color": "#2b6cb0"},
            "customdata": [[h, v] for h, v in zip(first, volumes)],
            "hovertemplate": "%{y:.1f} % "
            + ("first-chance hits" if second_chance_apart else "hits")
            + ": %{customdata[0]} of %{customdata[1]} recalls<br>%{x}<extra></extra>",
            "marker": {
                "size": [6 + 10 * (v / biggest) for v in volumes],
                "color": ["#a0aec0" if v < LOW_VOLUME else "#2b6cb0" for v in volumes],
            },
        }
    ]
    if second_chance_apart:
        second = data.second_chance_hits()
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "second chance",
                "connectgaps": False,
                "x": x,
                "y": [None if r is None else round(100 * r, 1) for r in data.second_chance_rate()],
                "line": {"color": SECOND_CHANCE_COLOUR, "dash": "dot"},
                "marker": {"color": SECOND_CHANCE_COLOUR, "symbol": "diamond"},
                "customdata": [[s, v] for s, v in zip(second, volumes)],
                "hovertemplate": "%{y:.1f} % second-chance hits: %{customdata[0]} of %{customdata[1]} recalls"
                "<br>%{x}<extra></extra>",
            }
        )
    title = "Hit rate (prefetch + hint)"
    if second_chance_apart:
        title = "Hit rate, first and second chance (prefetch + hint)"
    return {
        "data": traces,
        "layout": _layout(
            f"{title}; grey: under {LOW_VOLUME} recalls",
            yaxis={"title": {"text": "% of recalls"}, "range": [0, 100]},
        ),
    }


def similarity_figure(
    bins: Sequence[tuple[int, int]], bin_count: int, thresholds: dict[str, float] | None = None
) -> dict:
    """A histogram of hit similarities from (bin, count) pairs; bin i covers [i, i+1) / bin_count.
    Each matcher's threshold in use is drawn as a dashed line."""
    width = 1.0 / bin_count
    lines = dict(thresholds or {})
    low = min([b * width for b, _ in bins] + list(lines.values()) or [0.5])
    shapes = [
        {
            "type": "line",
            "x0": t,
            "x1": t,
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "line": {"color": "#9b2c2c", "dash": "dash", "width": 2},
        }
        for t in lines.values()
    ]
    notes = [
        {
            "x": t,
            "yref": "paper",
            "y": 1,
            "text": f"{name} threshold {t}",
            "showarrow": False,
            "xanchor": "right",
            "font": {"size": 11},
        }
        for name, t in lines.items()
    ]
    return {
        "data": [
            {
                "type": "bar",
                "name": "hits",
                "x": [round((b + 0.5) * width, 4) for b, _ in bins],
                "y": [c for _, c in bins],
                "width": width * 0.9,
                "marker": {"color": "#2b6cb0"},
                "hovertemplate": "%{y} hits at similarity %{x:.3f} (±" + f"{width / 2:.3f}" + ")<extra></extra>",
            }
        ],
        "layout": _layout(
            "Similarity of hits, against the threshold",
            xaxis={"title": {"text": "similarity"}, "range": [max(0.0, low - 0.05), 1.0]},
            yaxis={"title": {"text": "hits"}},
            shapes=shapes,
            annotations=notes,
        ),
    }
