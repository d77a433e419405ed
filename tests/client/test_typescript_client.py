"""The TypeScript client (clients/typescript), built with its pinned tsc, run by Node's own
test runner (`node --test`) against a live ragtrail: its calls, deadlines and errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from scopes.models import ApiKey, Scope, Section
from trails.models import Trail, TrailStatus

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
TSC = CLIENT / "node_modules" / ".bin" / "tsc"
EXAMPLE = CLIENT / "examples" / "quickstart.ts"

# Skipped only off CI: CI (.ci/run) installs Node and the packages, and there a missing one fails.
pytestmark = pytest.mark.skipif(
    (shutil.which("node") is None or not TSC.exists()) and not os.environ.get("CI"),
    reason="needs Node and the TypeScript client's packages: `npm ci` in clients/typescript (make test and .ci/run do)",
)


def node(argv: list[str], live_server, slug: str, **env: str) -> tuple[subprocess.CompletedProcess, Scope]:
    """Runs node in the client's folder with RAGTRAIL_URL and a key for a new scope `slug`."""
    scope = Scope.objects.create(slug=slug, matcher="lexical")
    _, key = ApiKey.issue([scope], name="typescript client")
    env = {**os.environ, **env, "RAGTRAIL_URL": live_server.url, "RAGTRAIL_API_KEY": key}
    return subprocess.run(["node", *argv], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=300), scope


def helpdesk() -> str:
    """A key for a scope that gives second chances, holding a path a paraphrase nearly matches
    (cosine 0.88 with the bundled model, over the 0.1 margin's cut)."""
    from trails.embedders import get_embedder
    from trails.serving.record import RecordInput, record

    get_embedder().embed("warm up")
    scope = Scope.objects.create(slug="helpdesk", second_chance=True, second_chance_margin=0.1)
    Section.upsert(
        scope,
        {
            "billing/cancel": "Cancel from Settings, Billing, Cancel plan; access lasts to the period's end.",
            "billing/refunds": "Refunds are given within 14 days of a charge.",
        },
    )
    _, key = ApiKey.issue([scope], name="typescript client, second chances")
    record(scope, RecordInput("How do I cancel my subscription?", ["billing/cancel"], signal="accepted"))
    return key


def test_the_typescript_client_and_its_readme_example_pass_against_a_live_server(live_server, transactional_db):
    built = subprocess.run([str(TSC), "-p", str(CLIENT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr

    ran, scope = node(["--test", "dist/test/"], live_server, "hospital", RAGTRAIL_SECOND_CHANCE_API_KEY=helpdesk())
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0 and "# fail 0" in said, said
    assert "# SKIP" not in said, said  # the live tests ran, not only the stand-ins
    assert Trail.objects.get(scope=scope).status == TrailStatus.ACTIVE

    # The README's example is the example file, and prints what its `// →` comments say.
    example = EXAMPLE.read_text(encoding="utf-8")
    assert example in (CLIENT / "README.md").read_text(encoding="utf-8")
    ran, scope = node(["dist/examples/quickstart.js"], live_server, "example")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == re.findall(r"// → (.*)$", example, flags=re.M)
    assert Trail.objects.get(scope=scope).status == TrailStatus.ACTIVE
