"""Two tenants in a real browser: each tenant's operator, logged in through the login page,
walks every operator page, export and admin list of the other tenant and sees nothing of it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from scopes.models import Scope
from tests.conftest import grant
from tests.test_access import ADMIN_LISTS, tenants, urls_of  # noqa: F401 -- tenants is a fixture

pytestmark = pytest.mark.slow


def operator_of(slug: str) -> str:
    """A staff user granted one scope, with every Django admin permission of both apps: only
    the grant stands between them and the other tenant."""
    user = User.objects.create_user(f"op-{slug}", password="correct horse", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["trails", "scopes"]))
    grant(user, Scope.objects.get(slug=slug))
    return user.username


@pytest.mark.parametrize("mine, theirs", [("python-faq", "acme-support"), ("acme-support", "python-faq")])
def test_each_tenants_operator_walks_the_other_tenant_in_a_browser_and_sees_nothing(
    page, live_server, transactional_db, tenants, mine, theirs
):
    username = operator_of(mine)
    page.goto(f"{live_server.url}/ops/")
    page.fill("#id_username", username)
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.wait_for_url(f"**/ops/{mine}/**")
    assert theirs not in page.content()  # the scope switcher lists only the granted scope
    secret_words = ("ACME", "jane.roe") if theirs == "acme-support" else ("How do I copy a list",)
    for name, url in urls_of(tenants[theirs]).items():
        if "csv" in url:
            answer = page.request.get(f"{live_server.url}{url}")
            status, body = answer.status, answer.text()
        else:
            answer = page.goto(f"{live_server.url}{url}")
            status, body = answer.status, page.content()
        assert status == 404, (name, url, status)
        assert not any(word in body for word in secret_words) and theirs not in body, (name, url)
    for url in ADMIN_LISTS:
        answer = page.goto(f"{live_server.url}{url}")
        assert answer.status == 200, url
        assert not any(word in page.content() for word in secret_words), url
    # Their own tenant's pages open (the walk above was refused for the right reason).
    assert page.goto(f"{live_server.url}{urls_of(tenants[mine])['trail']}").status == 200
