import pkgutil
import subprocess
import sys
from pathlib import Path

import trails.core

CORE_MODULES = sorted(f"trails.core.{m.name}" for m in pkgutil.iter_modules([str(Path(trails.core.__file__).parent)]))


def test_every_core_module_imports_without_django():
    # A new module in trails/core is covered without editing this test.
    assert {"trails.core.validation", "trails.core.calibration", "trails.core.toolkey"} <= set(CORE_MODULES)
    code = (
        "import importlib, sys\n"
        f"for name in {CORE_MODULES + ['infra.hashing']!r}:\n"
        "    importlib.import_module(name)\n"
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
