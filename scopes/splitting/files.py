"""Reading a docs project's files: regular files only, and the repository they belong to."""

from __future__ import annotations

import os
import stat
from pathlib import Path

REPOSITORY_MARKERS = (".git", ".hg", ".svn")
# Version control's own folders (remotes' credentials in .git/config, CI secrets' names): never
# read, whatever a project's configuration names.
VCS_FOLDERS = frozenset({*REPOSITORY_MARKERS, ".bzr", ".github", ".gitlab"})
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "package.json", "tox.ini")


class NotRegularFile(OSError):
    """A path that is no regular file (a FIFO, a device, a socket): never opened for reading."""


FILE_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
FILE_KINDS[stat.S_IFSOCK] = "a socket"


def read_regular(path: Path) -> str:
    """A regular file's UTF-8 text, CRLF as LF.

    Raises:
        NotRegularFile: a FIFO, device or socket, at once (opened without blocking, never read).
        OSError, UnicodeDecodeError: as reading does.
    """
    handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(handle, "rb") as file:
        kind = stat.S_IFMT(os.fstat(file.fileno()).st_mode)
        if kind != stat.S_IFREG:
            raise NotRegularFile(f"is {FILE_KINDS.get(kind, 'not a regular file')}, not a regular file")
        return file.read().decode("utf-8").replace("\r\n", "\n")


def repository_boundary(folder: Path) -> tuple[Path, str]:
    """The folder includes may read from, and why: the repository `folder` is in (the nearest
    folder at or above it holding a VCS root: a sub-package's pyproject.toml in a monorepo does
    not fence off the repository's CHANGELOG), else the nearest holding a project file (a
    source tarball), else `folder` itself."""
    folder = Path(os.path.realpath(folder))
    for markers, present in ((REPOSITORY_MARKERS, Path.exists), (PROJECT_FILES, Path.is_file)):
        for candidate in (folder, *folder.parents):
            marker = next((m for m in markers if present(candidate / m)), None)
            if marker:
                return candidate, marker
    return folder, ""
