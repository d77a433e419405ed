"""The seam race tests hold threads at: every write calls `pauses.pause_point(name)` where it
holds its locks (or has read what it is about to lock)."""


def pause_point(name: str) -> None:
    """Does nothing. Each write calls it by name where it holds its locks (or has read what
    it is about to lock), so a race test can hold a thread exactly there while another
    write runs (tests/trails/test_races.py)."""
