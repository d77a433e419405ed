"""The one writer: rows a trail owns are written only through trails.models.writes (a write
from anywhere else fails in the tests), and saves that would undo another write do not."""

from __future__ import annotations

import pytest

from scopes.models import Scope
from trails.models import bump_tool_policy_version


def test_a_scopes_full_save_keeps_a_tool_policy_change_committed_since_it_was_loaded(scope):
    loaded = Scope.objects.get(pk=scope.pk)  # the ops page's threshold form loads the scope
    bump_tool_policy_version([scope.pk])  # an agent replaces the tool policies meanwhile
    changed = Scope.objects.get(pk=scope.pk).tool_policy_version
    assert changed != loaded.tool_policy_version
    loaded.lexical_threshold = 0.8
    loaded.save()
    stored = Scope.objects.get(pk=scope.pk)
    assert stored.lexical_threshold == 0.8
    assert stored.tool_policy_version == changed, "the save put back the version the policies replaced"
    assert stored.cache_token == scope.cache_token


@pytest.mark.django_db
def test_a_new_scope_saves_every_field():
    made = Scope(slug="fresh", name="Fresh")
    made.save()
    assert Scope.objects.get(slug="fresh").tool_policy_version == made.tool_policy_version
