"""The tests' one door around the one writer: setting up a state no path of the service makes
(a reason older versions wrote, a clock moved), named so that each use is seen."""

from trails.models.gate import writing


def around_the_writer():
    """Lets a test's own statements write a trail's rows (its setup only, never what it tests)."""
    return writing("a test's setup")
