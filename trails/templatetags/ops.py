"""Small filters of the operator pages."""

from __future__ import annotations

import re
from datetime import datetime
from datetime import timezone as dt_timezone

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()


@register.filter
def percent(value: float | None) -> str:
    """0.4567 -> "45.7 %"; no value (nothing to divide) -> "–"."""
    return "–" if value is None else f"{100 * value:.1f} %"


@register.filter
def thousands(value: int) -> str:
    """12345 -> "12,345"."""
    return f"{value:,}"


@register.filter
def short_hash(value: str | None) -> str:
    return value[:12] if value else "–"


@register.filter
def age(value: datetime | None) -> str:
    """How long ago (or, for a future time, how long until), in the largest whole unit,
    in a <time> element whose title gives the moment in UTC."""
    if value is None:
        return "never"
    moment = value.astimezone(dt_timezone.utc)
    return format_html(
        '<time datetime="{}" title="{} UTC">{}</time>',
        moment.isoformat(),
        moment.strftime("%Y-%m-%d %H:%M:%S"),
        age_text(value),
    )


def age_text(value: datetime | None) -> str:
    """The text of `age`, without markup."""
    if value is None:
        return "never"
    seconds = (timezone.now() - value).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)} {unit}"
            break
    else:
        text = f"{int(seconds)} s"
    return f"in {text}" if future else f"{text} ago"


_KEY = re.compile(r"key:([0-9a-f]{6,16})")


@register.filter
def keys_named(text: str | None, names: dict[str, str] | None) -> str:
    """Every `key:<lookup>` in a text, named as admin names the key ("scraper (key:1a2b…)")."""
    if not text or not names:
        return text or ""
    return _KEY.sub(lambda m: f"{names[m.group(1)]} (key:{m.group(1)})" if m.group(1) in names else m.group(0), text)


_BARE_KEY = re.compile(r"(?<!\()key:([0-9a-f]{6,16})")


@register.filter
def keys_named_as_written(text: str | None, names: dict[str, str] | None) -> str:
    """An audit row's text as it was written: a key it already names ("scraper (key:1a2b…)")
    is left so; a bare `key:<lookup>` (who did it) gets the key's name, never its standing now."""
    if not text or not names:
        return text or ""
    return _BARE_KEY.sub(
        lambda m: f"{names[m.group(1)]} (key:{m.group(1)})" if m.group(1) in names else m.group(0), text
    )
