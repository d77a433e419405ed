"""The test databases' teardown: their DROP is no request, and has no request's timeouts."""

from tests.conftest import no_timeouts


def test_the_test_databases_drop_runs_without_the_services_timeouts():
    service = "-c statement_timeout=5000 -c lock_timeout=2000 -c jit=off"
    assert no_timeouts(service) == "-c statement_timeout=0 -c lock_timeout=0 -c jit=off"
