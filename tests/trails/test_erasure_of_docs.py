"""Erasure in what docs syncs leave beside the section texts: the built site's anchors, and the
background sync jobs queued, running or finished."""

from __future__ import annotations

from trails.models import PurgeRun
from trails.upkeep import purge

SUBJECT = "Zoë Ångström"


def sync(api, sections: list[dict], **body):
    return api.call("post", "/scopes/hospital/section-syncs", {"sections": sections, **body})


def erase(scope, subject: str = SUBJECT) -> tuple[dict[str, int], PurgeRun]:
    """What the preview counts, then the run, done."""
    run = PurgeRun.request(scope, subject, delete=False, requested_by="op")
    run.state = PurgeRun.State.PREVIEWED
    purge.preview(run)
    run.save()
    counted = purge.preview_records(run)
    return counted, purge.run_purge(run.id)


def test_an_anchor_holding_the_name_is_counted_blanked_and_the_link_falls_back_to_the_ids_fragment(api, scope):
    sections = [
        {"id": "sync-sec", "text": "Fire warden: Zoe Angstrom.", "anchor": "fire-warden-zoe-angstrom"},
        {"id": "safety#exits", "text": "Exits are marked.", "anchor": "id3_zoe_angstrom_exits"},
        {"id": "safety#night", "text": "Night porter: Mary Major.", "anchor": "night-porter-mary-major"},
    ]
    assert sync(api, sections).status_code == 200
    counted, done = erase(scope)
    assert counted["section anchors"] == 2
    assert done.counts["section anchors"] == [3, 2] and done.left == {}
    warden = api.call("get", "/scopes/hospital/sections/sync-sec").json()
    assert (warden["text"], warden["anchor"]) == ("Fire warden: [redacted].", "")
    assert api.call("get", "/scopes/hospital/sections/safety%23exits").json()["anchor"] == "exits"
    assert api.call("get", "/scopes/hospital/sections/safety%23night").json()["anchor"] == "night-porter-mary-major"
