#!/usr/bin/env python
"""Django's command-line utility for ragtrail."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragtrail_site.settings")
    from django.core.management import execute_from_command_line

    from infra.env import SettingError

    try:
        execute_from_command_line(sys.argv)
    except SettingError as problem:  # a setting missing or malformed: its one-line message, not a traceback
        sys.exit(f"manage.py: {problem}")


if __name__ == "__main__":
    main()
