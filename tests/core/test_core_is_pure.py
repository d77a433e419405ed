import subprocess
import sys


def test_core_imports_without_django():
    code = (
        "import sys\n"
        "import trails.core.banding, trails.core.budget, trails.core.calibration, trails.core.guard, trails.core.hint, "
        "trails.core.minhash, trails.core.normalise, trails.core.refusal, trails.core.sections, trails.core.validation\n"
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
