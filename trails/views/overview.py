"""The overview of a scope (charts, KPIs) and its threshold control."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from infra import metrics, refusals
from infra.errors import Refused
from scopes.access import Access
from scopes.models import KEY_PREFIX, Scope, SectionSync, SectionSyncJob
from scopes.second_chance import switch_second_chance
from trails import tool_results
from trails.core import charts
from trails.core.calibration import false_hit_verdict
from trails.core.health import WaitingJob, causes_in_words, due_in, in_words, service_refusals
from trails.core.health import judge as judge_health
from trails.learning import shipped as calibration
from trails.learning import thresholds
from trails.learning.embedder_calibration import matcher_fit
from trails.models import (
    SIMILARITY_BINS,
    PurgeRun,
    RecallEvent,
    RecallStat,
    Signal,
    SimilarityStat,
    ThresholdChange,
    Trail,
    TrailStatus,
)
from trails.models.recalls import (
    FALSE_HIT_WINDOW,
    judged_counts,
    latency_percentiles,
    latest_recalls_since,
    similarity_evidence,
)
from trails.serving.matching import matching_settings, second_chance_cut
from trails.upkeep.reindex import resigning
from trails.upkeep.sync import JOB_DEADLINE_SECONDS
from trails.views.common import confirmed_or_ask, key_names, last_scope, scope_or_404, scope_page, staff_required

WHAT_IF_RECALLS = 100_000
# The jobs whose heartbeat the overview shows, and how often beat runs each (settings).
JOB_PERIODS = {
    entry["task"]: float(entry["schedule"])
    for entry in settings.CELERY_BEAT_SCHEDULE.values()
    if entry["task"] in ("trails.tasks.roll_up_task", "trails.tasks.sweep_expired_task", metrics.HEARTBEAT_TASK)
}
# What the page calls each: the heartbeat's success is the worker's pulse; its sending, beat's.
JOB_NAMES = {metrics.HEARTBEAT_TASK: "worker"}


def refusals_by_key(scope: Scope) -> list[dict] | None:
    """The last minutes' requests and refusals of each of the scope's keys, by name and public
    prefix (two keys may share a name), busiest first (keys with none left out); None when the shared cache cannot be read."""
    names = key_names(scope)
    counted = refusals.by_key(scope.slug, list(names))
    if counted is None:
        return None
    rows = [
        {"key": names[key], "prefix": f"{KEY_PREFIX}{key}_…", **tally, "refused_total": sum(tally["refused"].values())}
        for key, tally in counted.items()
        if tally["requests"]
    ]
    for row in rows:
        row["causes"] = causes_in_words(row["refused"])
    return sorted(rows, key=lambda row: (-row["refused_total"], -row["requests"], row["key"]))


def job_name(task: str) -> str:
    return JOB_NAMES.get(task, task.rsplit(".", 1)[-1])


def rolled_up_to(last_hour, ran: float | None):
    """Until when the charts' counts go: the latest hour's end, or the roll-up's last run `ran`
    inside it; None where no roll-up has run (the page says never)."""
    if not ran:
        return None
    until = datetime.fromtimestamp(ran, tz=dt_timezone.utc)
    return until if last_hour is None else min(last_hour + timedelta(hours=1), until)


def waiting_jobs(scope, now) -> list[WaitingJob]:
    """The scope's docs syncs and purges queued or running, oldest first, with their age."""
    found = []
    syncs = SectionSyncJob.objects.filter(
        scope=scope, state__in=[SectionSyncJob.State.QUEUED, SectionSyncJob.State.RUNNING]
    ).only("state", "created_at", "claimed_at")
    for job in syncs[:50]:
        since = job.claimed_at if job.state == SectionSyncJob.State.RUNNING and job.claimed_at else job.created_at
        found.append(WaitingJob("docs sync", job.state, (now - since).total_seconds(), JOB_DEADLINE_SECONDS))
    purges = PurgeRun.objects.filter(scope=scope, state__in=[PurgeRun.State.QUEUED, PurgeRun.State.RUNNING]).only(
        "state", "created_at"
    )
    for run in purges[:50]:
        # A purge has no claim time: its age is since it was asked for; it runs in batches, resumable.
        found.append(WaitingJob("purge", run.state, (now - run.created_at).total_seconds(), 3600.0))
    noted = resigning(scope.pk)
    if noted:
        found.append(WaitingJob("re-signing", noted["state"], now.timestamp() - noted["since"], 3600.0))
    return sorted(found, key=lambda job: -job.age_s)


WINDOWS = {
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(hours=6)),
    "30d": (timedelta(days=30), timedelta(days=1)),
}


@staff_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    scope = last_scope(request)
    if scope is None:
        return render(request, "trails/no_scopes.html")
    return redirect("ops:overview", scope_slug=scope.slug)


@staff_required
@require_GET
def overview(request: HttpRequest, scope_slug: str) -> HttpResponse:
    scope = scope_or_404(request, scope_slug)
    window = request.GET.get("window", "24h")
    if window not in WINDOWS:
        window = "24h"
    span, bucket = WINDOWS[window]
    now = timezone.now()
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - span
    if bucket >= timedelta(days=1):
        # Daily buckets start at midnight so a day's bar is that calendar day.
        start = start.replace(hour=0)
    rows = RecallStat.hourly(scope, start - span)
    current_rows = [r for r in rows if r.hour >= start]
    data = charts.series(current_rows, start, end, bucket)
    matching = matching_settings(scope)
    drawn_thresholds = {
        name: value
        for name, value, used in (
            ("embedding", matching.embedding_threshold, scope.uses_embedding),
            ("lexical", matching.lexical_threshold, scope.uses_lexical),
        )
        if used
    }
    totals = charts.totals(current_rows)
    second_chance = second_chance_context(scope, totals)
    figures = {
        "outcomes": charts.outcomes_figure(data, reverse("ops:recalls", args=[scope.slug]), bucket),
        "hit-rate": charts.hit_rate_figure(data, second_chance["apart"]),
        "similarity": charts.similarity_figure(
            SimilarityStat.histogram(scope, start), SIMILARITY_BINS, drawn_thresholds
        ),
    }
    # The window before, for comparison (the same roll-up rows, read once).
    previous = charts.totals(r for r in rows if start - span <= r.hour < start)
    judged = RecallEvent.objects.filter(scope=scope, feedback_at__gte=start).aggregate(
        judged=Count("id"), reported=Count("id", filter=Q(helpful=False))
    )
    # Counted as the trails table the numbers link to counts them (TrailQuerySet.since).
    in_scope, cut = Trail.objects.filter(scope=scope), start.replace(microsecond=0)  # the link's `since`, to the second
    voted_down = {
        "down": in_scope.filter(status=TrailStatus.REJECTED).since(TrailStatus.REJECTED, "", cut).count(),
        "reported": in_scope.filter(status=TrailStatus.PENDING, signals__signal=Signal.REPORTED)
        .since("", "reported", cut)
        .count(),
        "stale": in_scope.filter(status=TrailStatus.STALE).since(TrailStatus.STALE, "", cut).count(),
    }
    try:
        tool_counts, tool_error = tool_results.lookup_counts(scope), ""
    except Refused as refused:
        tool_counts, tool_error = {}, refused.message
    false_hits = false_hit_verdict(*judged_counts([scope.pk], now).get(scope.pk, (0, 0)), scope.max_false_hit_rate)
    last_hour = RecallStat.last_hour(scope)
    # The heartbeats read once: the jobs' ages and how far the roll-up has counted.
    successes = metrics.last_successes(list(JOB_PERIODS))
    rolled_until = metrics.rolled_up_until() or successes.get("trails.tasks.roll_up_task")
    beat_started = metrics.beat_started()
    beat_started_age = now.timestamp() - beat_started if beat_started else None
    health = {
        "false_hits": false_hits,
        "false_hit_window_hours": int(FALSE_HIT_WINDOW.total_seconds() // 3600),
        "latency": latency_percentiles(scope, start),
        "budget_ms": settings.RAGTRAIL_RECALL_BUDGET_MS,
        # The roll-up runs every 10 minutes: an hour behind means the worker is not running.
        "waiting": waiting_jobs(scope, now),
        # Recalls no roll-up has counted, where none has run yet (the charts show none of them).
        "never_rolled_up": None
        if rolled_until
        else RecallEvent.objects.filter(scope=scope, created_at__gte=start).count(),
        "rollup_behind": RecallEvent.objects.filter(
            scope=scope,
            created_at__gte=last_hour + timedelta(hours=1) if last_hour else start,
            created_at__lt=now - timedelta(minutes=30),
        ).exists(),
        "flags": [thresholds.describe_flag(flag) for flag in scope.threshold_flags.split(",") if flag],
        "refusals": refusals.window(scope.slug),
        "jobs": {
            **{job_name(name): (now.timestamp() - at if at else None) for name, at in successes.items()},
            "beat": (now.timestamp() - sent) if (sent := metrics.beat_last_sent()) else None,
        },
    }
    job_periods = {
        **{job_name(name): period for name, period in JOB_PERIODS.items()},
        "beat": JOB_PERIODS.get(metrics.HEARTBEAT_TASK, 60.0),
    }
    # ok / watch / broken, and which signal made it so: red only when something needs a person.
    judged_health = judge_health(
        false_hits_verdict=false_hits.verdict,
        latency_p95_ms=(health["latency"] or {}).get("p95"),
        budget_ms=settings.RAGTRAIL_RECALL_BUDGET_MS,
        refusals=health["refusals"],
        job_ages=health["jobs"],
        waiting=health["waiting"],
        job_periods=job_periods,
        rollup_behind=health["rollup_behind"],
        flags=health["flags"],
        beat_started_age=beat_started_age,
        beat_embedded=metrics.beat_embedded(),
    )
    health["verdict"], health["because"] = judged_health.verdict, judged_health.because
    health["job_ages"] = {name: in_words(age) for name, age in health["jobs"].items()}
    health["job_due"] = {
        name: in_words(left)
        for name, age in health["jobs"].items()
        if (left := due_in(age, job_periods.get(name, 0.0), beat_started_age)) is not None
    }
    for part in ("scope", "service") if health["refusals"] else ():
        counted = health["refusals"][part]
        counted.update(refused_total=sum(counted["refused"].values()), causes=causes_in_words(counted["refused"]))
    health["service"] = service_refusals(health["refusals"])
    health["keys"] = refusals_by_key(scope)
    return scope_page(
        request,
        "trails/overview/overview.html",
        scope,
        {
            "health": health,
            "window_start": start,
            "judged": judged["judged"],
            "false_hit_reports": judged["reported"],
            "voted_down": voted_down["down"],
            "reported_to_pending": voted_down["reported"],
            "stale_now": voted_down["stale"],
            "since_cut": cut,
            # The latest hour's row is filled as the hour goes: counted up to the roll-up's last run, not the hour's end.
            "rolled_up_to": rolled_up_to(last_hour, rolled_until),
            "previous": previous,
            "tool_counts": {tool: counts for tool, counts in tool_counts.items() if any(counts.values())},
            "tool_error": tool_error,
            "window": window,
            "windows": list(WINDOWS),
            "totals": totals,
            **{f"{outcome}_share": totals.share(outcome) for outcome in charts.OUTCOMES},
            "pending": Trail.objects.filter(scope=scope, status=TrailStatus.PENDING, expires_at__gt=now).count(),
            "last_hour": RecallStat.last_hour(scope),
            "figures": figures,
            "tab": "overview",
            "syncs": list(SectionSync.objects.filter(scope=scope)[:5]),
            "second_chance": second_chance,
            **threshold_context(scope),
        },
    )


def second_chance_context(scope: Scope, totals: charts.Totals) -> dict:
    """The scope's second-chance switch and rule, the similarity a near candidate needs now, and
    whether the page shows second chances apart (the switch on, or hits of theirs in the window)."""
    return {
        "apart": scope.second_chance or totals.second_chance_hits > 0,
        "on": scope.second_chance,
        "margin": scope.second_chance_margin,
        "top": scope.second_chance_top,
        "applies": scope.uses_embedding,
        "cut": second_chance_cut(scope) if scope.uses_embedding else None,
    }


@staff_required
@require_POST
def second_chance_switch(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """Turns the scope's second chance on or off: recorded in its audit log with who."""
    scope = scope_or_404(request, scope_slug, Access.CONFIGURE)
    asked = request.POST.get("second_chance")
    if asked not in ("on", "off"):
        return HttpResponse("second_chance must be on or off", status=400)
    on = asked == "on"
    changed = switch_second_chance(scope, on, by=request.user.get_username())
    if changed:
        messages.info(
            request,
            "Second chance on: after a miss, a near candidate the agent's own search backs is served."
            if on
            else "Second chance off: a second-chance call now answers a miss that says so.",
        )
    else:
        messages.info(request, f"Second chance was already {asked}; nothing changed.")
    return redirect(reverse("ops:overview", args=[scope_slug]) + "#second-chance")


def threshold_context(scope: Scope) -> dict:
    """The thresholds configured and in use, why the scope waits for an operator (if it
    does), and the latest moves with their evidence."""
    return {
        "thresholds_in_use": [
            {
                "matcher": matcher,
                "configured": getattr(scope, f"{matcher}_threshold"),
                "in_use": thresholds.in_use(scope, matcher),
                "ceiling": calibration.limits_for(
                    matcher, getattr(scope, f"{matcher}_threshold"), matcher_fit(scope, matcher)
                ).ceiling,
            }
            for matcher in thresholds.used_matchers(scope)
        ],
        "threshold_flags": [thresholds.describe_flag(flag) for flag in scope.threshold_flags.split(",") if flag],
        "threshold_changes": list(ThresholdChange.objects.filter(scope=scope)[:5]),
    }


@staff_required
@require_POST
def threshold_action(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """Set the threshold (from the what-if), reset the learned one, or pin / unpin the
    configured one: recorded with who."""
    scope = scope_or_404(request, scope_slug, Access.CONFIGURE)
    action, by = request.POST.get("action"), request.user.get_username()
    if action == "reset":
        asked = confirmed_or_ask(
            request,
            scope,
            "Reset the learned thresholds?",
            "The labels so far are set aside and the configured thresholds are used; this cannot be undone.",
            reverse("ops:overview", args=[scope_slug]) + "#thresholds",
        )
        if asked:
            return asked
        thresholds.reset_learning(scope, by=by)
        messages.info(
            request, "Learned thresholds reset: the configured ones are in use, and labels so far are set aside."
        )
    elif action == "accept":
        accepted = thresholds.accept_learned(scope, by=by)
        messages.info(
            request,
            f"Learned {', '.join(accepted)} threshold made the configured one."
            if accepted
            else "Nothing learned to accept: the configured thresholds are in use.",
        )
    elif action == "set":
        matcher = request.POST.get("matcher", "")
        try:
            value = float(request.POST.get("threshold", ""))
        except ValueError:
            value = -1.0
        if matcher not in thresholds.used_matchers(scope) or not 0.0 < value <= 1.0:
            messages.error(
                request,
                "The threshold must be a number above 0 and at most 1, for a matcher the scope uses; nothing changed.",
            )
            return redirect(reverse("ops:tuning", args=[scope_slug]))
        setattr(scope, f"{matcher}_threshold", round(value, 4))
        scope._changed_by = by
        scope.save()  # recorded, learning restarted against it, trails re-signed (thresholds.py)
        if request.POST.get("pin") and not scope.threshold_pinned:
            thresholds.pin_thresholds(scope, by=by, pinned=True)
        messages.info(
            request,
            f"The {matcher} threshold is now {round(value, 4)}" + (", pinned." if request.POST.get("pin") else "."),
        )
    elif action in ("pin", "unpin"):
        thresholds.pin_thresholds(scope, by=by, pinned=action == "pin")
        messages.info(
            request,
            "Configured thresholds pinned: labels no longer move them."
            if action == "pin"
            else "Learning on again, from labels given from now on.",
        )
    else:
        return HttpResponse("action must be set, reset, accept, pin or unpin", status=400)
    return redirect(reverse("ops:overview", args=[scope_slug]) + "#thresholds")


@staff_required
@require_GET
def tuning(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """Before changing a threshold: what this scope's recent recalls and feedback say at the
    threshold in use and at one the operator picks, beside the shipped calibration's figures."""
    scope = scope_or_404(request, scope_slug)
    window = request.GET.get("window") if request.GET.get("window") in WINDOWS else "7d"
    since = timezone.now() - WINDOWS[window][0]
    matcher = "embedding" if scope.uses_embedding else "lexical"
    current = thresholds.in_use(scope, matcher)
    try:
        picked = min(1.0, max(0.0, float(request.GET.get("threshold", "")))) if request.GET.get("threshold") else None
    except ValueError:
        picked = None
    # At most the window's latest 100,000 recalls: 30 days of a million took 512 ms (benchmark_overview).
    window_start, since = since, latest_recalls_since(scope, since, WHAT_IF_RECALLS)
    by_bin, counts = similarity_evidence(scope, since, current, picked)
    what_if = (
        None
        if picked is None
        else {
            "threshold": picked,
            **counts,
            "calibration": calibration.at_threshold(matcher, picked, matcher_fit(scope, matcher)),
        }
    )
    return scope_page(
        request,
        "trails/overview/tuning.html",
        scope,
        {
            "window": window,
            "windows": list(WINDOWS),
            "matcher": matcher,
            "cut_since": since if since > window_start else None,
            "what_if_recalls": WHAT_IF_RECALLS,
            "current": current,
            "picked": picked,
            "what_if": what_if,
            "at_current": calibration.at_threshold(matcher, current, matcher_fit(scope, matcher)),
            "bins": sorted(by_bin.items(), reverse=True),
            "false_hits": false_hit_verdict(
                *judged_counts([scope.pk], timezone.now()).get(scope.pk, (0, 0)), scope.max_false_hit_rate
            ),
            "false_hit_window_hours": int(FALSE_HIT_WINDOW.total_seconds() // 3600),
            "near_misses": list(
                RecallEvent.objects.filter(
                    scope=scope, created_at__gte=since, outcome="miss", nearest_similarity__isnull=False
                )
                .order_by("-nearest_similarity")
                .values_list("nearest_similarity", flat=True)[:50]
            ),
            "tab": "overview",
        },
    )
