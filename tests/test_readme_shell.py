"""Every shell block of the README and the production recipe (docs/production.md) run as a
newcomer runs them, and every command line of docs/ checked by the command's own parser and
loaded in a clean environment.

The README runs in a copy of the repository's tracked files (what a fresh clone holds: no
demo credentials, no database, no job queue), each line a process of its own, in a clean
environment (PATH, HOME and LANG only; the exports a block makes carry to its next lines, as
in a terminal). The venv `make` builds from requirements/test.txt is linked in, not rebuilt. Only
what no test can do as written is rewritten, and each rewrite must find its text (a README
edit that drops it fails here): host names and the secret of the production recipe, a free
port where the README's is taken, answers to prompts. `make test` is the command running this.

docs/ holds benchmarks of up to an hour: their lines are parsed by each management command's
own argument parser (a wrong command or flag fails), `make` targets are dry-run, and the
Celery lines are started and stopped.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.test_production import free_port, stop

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ROOT / "docs" / "production.md"
EXPECTED = re.compile(r"#\s*→\s*(.*)$")
pytestmark = pytest.mark.slow


def blocks(page: Path, kind: str = "sh") -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def lines(block: str) -> list[str]:
    """A block's command lines: comments dropped, `\\` continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def wait_for(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {seconds:.0f} s")


def rewrite(text: str, old: str, new: str) -> str:
    assert old in text, f"the README no longer holds {old!r}: update this test's rewrite"
    return text.replace(old, new)


def copy_tracked(target: Path) -> Path:
    """The tracked files as a fresh clone has them (mtimes kept)."""
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    )
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name, follow_symlinks=False)
    return target


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh clone with the venv make test built linked in (make sees it current)."""
    target = copy_tracked(tmp_path_factory.mktemp("clone") / "ragtrail")
    (target / ".venv").symlink_to(ROOT / ".venv")
    # The venv is current (make test builds it first): the clone's make must see it so, and never
    # reinstall into the linked venv (an editable install would then point into this copy).
    stamp = (ROOT / ".venv" / ".installed").stat().st_mtime
    for name in ("requirements.txt", *(f"requirements/{n}.txt" for n in ("model", "export", "bench", "test"))):
        os.utime(target / name, (stamp - 1, stamp - 1))
    os.utime(target / "clients/python/pyproject.toml", (stamp - 1, stamp - 1))
    return target


@pytest.fixture(scope="module")
def clean_env(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("home")
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run(line: str, cwd: Path, env: dict[str, str], timeout: float = 300, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, input=stdin
    )
    assert done.returncode == 0, f"{line}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def run_block(block: str, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """Each line a process of its own; an `export` carries to the lines after it."""
    env = dict(env)
    for line in lines(block):
        if line.startswith("export "):
            for name, value in re.findall(r"(\w+)=(\$\(.*?\)|\S+)", line.removeprefix("export ")):
                env[name] = run(f"echo {value}", cwd, env).strip() if value.startswith("$(") else value
        else:
            run(line, cwd, env)
    return env


@pytest.fixture(scope="module")
def demo(clone, clean_env):
    """`make run`, the README's first command, in the fresh clone."""
    port = free_port()  # never the README's 8000: another copy of the suite, or a real server, may hold it
    log = open(clone / "make-run.log", "w")
    server = subprocess.Popen(
        ["make", "run", f"HOST=127.0.0.1:{port}"],
        cwd=clone,
        env=clean_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: "API key for scope" in (clone / "make-run.log").read_text() or server.poll() is not None,
            240,
            "make run printing its key",
        )
        output = (clone / "make-run.log").read_text()
        assert server.poll() is None, output[-3000:]
        key = re.search(r"API key for scope python-faq: (rt_\S+)", output).group(1)
        yield port, key, output
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def test_make_run_serves_the_demo_on_a_fresh_clone_and_prints_what_the_readme_says(demo, clone, clean_env):
    port, key, output = demo
    assert "Operator pages at /ops/ and admin at /admin/: admin / " in output
    try_line = re.search(r"Try: (curl .*?recall)\n", output.replace("\\\n", ""), flags=re.S).group(1)
    answer = run(try_line, clone, clean_env)
    assert '"outcome": "prefetch"' in answer
    # A second `make run` stops before it touches the running demo, and the key stays the same.
    second = subprocess.run(
        ["make", "run", f"HOST=127.0.0.1:{port}"], cwd=clone, env=clean_env, capture_output=True, text=True, timeout=120
    )
    assert second.returncode != 0 and "is in use" in second.stdout + second.stderr
    assert (clone / ".demo-credentials.json").exists() and key in (clone / ".demo-credentials.json").read_text()


def test_the_readme_scripts_block_runs_on_the_demo_database(demo, clone, clean_env):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(
        b for b in blocks(ROOT / "README.md") if "create_api_key" in b and "export" not in b and "migrate" not in b
    )
    assert block in readme
    run_block(block, clone, clean_env)


def test_the_agent_quickstart_runs_in_a_second_terminal_and_prints_every_arrow(demo, clone, clean_env):
    port, *_ = demo
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("<!-- quickstart:start -->", 1)[1].split("<!-- quickstart:end -->", 1)[0]
    found = re.findall(r"```(sh|python)\n(.*?)```", section, flags=re.S)
    shell = [b for kind, b in found if kind == "sh"]
    python = [b for kind, b in found if kind == "python"]
    assert len(shell) == 1 and len(python) >= 6
    script = rewrite(shell[0], "127.0.0.1:8000", f"127.0.0.1:{port}")
    env = run_block(script, clone, clean_env)
    assert env["RAGTRAIL_API_KEY"].startswith("rt_")
    # The Python blocks, pasted in order into one interpreter; a marker between blocks.
    program = "\n".join(f"{b}\nprint('--- block {n} ---')" for n, b in enumerate(python))
    out = run(f".venv/bin/python -W error -c {shlex.quote(program)}", clone, env, timeout=180)
    printed = out.split("\n")
    for n, b in enumerate(python):
        expected = [m.group(1).strip() for m in map(EXPECTED.search, b.splitlines()) if m]
        end = printed.index(f"--- block {n} ---")
        assert printed[:end] == expected, f"block {n} printed {printed[:end]}, the README says {expected}:\n{b}"
        printed = printed[end + 1 :]


def test_the_readme_mcp_lines_start_both_transports(demo, clone, clean_env):
    port, key, _ = demo
    block = next(b for b in blocks(ROOT / "README.md") if "ragtrail-mcp" in b)
    stdio, http = (line.split("#")[0].rstrip() for line in lines(block))  # the comments are for readers
    stdio = rewrite(stdio, "rt_...", key)
    stdio += f" --base-url http://127.0.0.1:{port}"
    # stdio: the server reads requests from its stdin; an MCP initialize is answered.
    request = (
        '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", '
        '"capabilities": {}, "clientInfo": {"name": "readme-test", "version": "1"}}}\n'
    )
    answered = subprocess.run(
        ["bash", "-c", stdio], cwd=clone, env=clean_env, input=request, capture_output=True, text=True, timeout=60
    )
    assert '"result"' in answered.stdout and "ragtrail" in answered.stdout, answered.stderr[-2000:]
    mcp_port = free_port()
    http = rewrite(http, "--port 8765", f"--port {mcp_port}")
    http += f" --base-url http://127.0.0.1:{port}"
    server = subprocess.Popen(
        ["bash", "-c", f"exec {http}"],
        cwd=clone,
        env={**clean_env, "RAGTRAIL_API_KEY": key},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: not port_is_free(mcp_port) or server.poll() is not None, 60, "the MCP HTTP server listening")
        assert server.poll() is None, server.stderr.read()[-2000:]
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def production_clone(tmp_path_factory) -> Path:
    """A fresh clone with no venv: the recipe makes its own."""
    return copy_tracked(tmp_path_factory.mktemp("production") / "ragtrail")


def exported(line: str, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment after an `export` line, as bash leaves it (its $(...) and $VAR expanded)."""
    done = subprocess.run(["bash", "-c", f"{line} && env -0"], cwd=cwd, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, f"{line}\n{done.stderr.decode()[-2000:]}"
    return dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)


def test_the_production_recipe_runs_as_written_on_postgresql_without_torch(production_clone, clean_env, tmp_path):
    from evaluation import deployment

    if not shutil.which("createuser") or not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("the production recipe runs on PostgreSQL (as CI does)")
    if not deployment.nginx_available():
        pytest.skip("nginx is not installed (.ci/run installs Debian's package)")
    clone = production_clone
    setup = next(b for b in blocks(PRODUCTION) if "createsuperuser" in b)
    processes = next(b for b in blocks(PRODUCTION) if "gunicorn -c" in b)
    units = next(b for b in blocks(PRODUCTION) if "systemctl" in b)
    name = f"ragtrail_readme_{secrets.token_hex(3)}"
    run_dir, state = Path(tempfile.mkdtemp(prefix="rt-run-")), tmp_path / "state"  # a socket's path is short
    for old, new in (
        ("CREATE ROLE ragtrail LOGIN", f"CREATE ROLE {name} LOGIN"),
        ("-O ragtrail ragtrail", f"-O {name} {name}"),
        (
            "postgres://ragtrail:$RAGTRAIL_DB_PASSWORD@db:5432/ragtrail",
            f"postgres://{name}:$RAGTRAIL_DB_PASSWORD@127.0.0.1:5432/{name}",
        ),
        ("-h db", "-h 127.0.0.1"),
        ("RAGTRAIL_ALLOWED_HOSTS=ragtrail.example.org", "RAGTRAIL_ALLOWED_HOSTS=127.0.0.1"),
        ("cache:6379", urlsplit(os.environ.get("RAGTRAIL_CACHE_URL") or "redis://127.0.0.1:6379").netloc),
        ("unix:/run/ragtrail/web.sock", f"unix:{run_dir}/web.sock"),
        ("RAGTRAIL_STATE_DIR=/var/lib/ragtrail", f"RAGTRAIL_STATE_DIR={state}"),
        # The export's venv is the test venv (torch and all), linked rather than installed again.
        (
            "python3 -m venv .venv-export && .venv-export/bin/pip install -r requirements/export.txt",
            f"ln -s {ROOT / '.venv'} .venv-export",
        ),
    ):
        setup = rewrite(setup, old, new)
    # This run's own job queue and cache prefix: its worker takes no job of another run's.
    env = {
        **clean_env,
        "RAGTRAIL_JOB_QUEUE": os.environ["RAGTRAIL_JOB_QUEUE"],
        "RAGTRAIL_CACHE_PREFIX": os.environ["RAGTRAIL_CACHE_PREFIX"],
    }
    started: list[subprocess.Popen] = []
    try:
        for line in lines(setup):
            if line.startswith("export "):
                env = exported(line.split("   #")[0], clone, env)
            else:
                run(line.split("   #")[0], clone, env, timeout=900)
        # The secret key, the database password and the admin's came from the one-liners, not from this test.
        assert len(env["RAGTRAIL_SECRET_KEY"]) >= 50 and len(env["RAGTRAIL_DB_PASSWORD"]) >= 24
        assert env["DATABASE_URL"] == f"postgres://{name}:{env['RAGTRAIL_DB_PASSWORD']}@127.0.0.1:5432/{name}"
        written = (clone / "ragtrail.env").read_text()
        assert (
            clone / "ragtrail.env"
        ).stat().st_mode & 0o077 == 0 and f"RAGTRAIL_SECRET_KEY={env['RAGTRAIL_SECRET_KEY']}" in written
        # The production install: no torch, no test or benchmark packages, and small.
        installed = run(".venv/bin/pip list --format freeze", clone, env).lower()
        for lab in ("torch==", "transformers==", "sentence-transformers==", "pytest==", "plotly==", "playwright=="):
            assert lab not in installed, lab
        megabytes = int(run("du -sm .venv", clone, env).split()[0])
        assert megabytes <= 600, megabytes
        assert "evaluate" not in run(".venv/bin/python manage.py help --commands", clone, env).split()
        for line in lines(processes):
            started.append(
                subprocess.Popen(
                    ["bash", "-c", f"exec {line.split('#')[0]}"],
                    cwd=clone,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        # nginx with the repo's site file (its ports, socket and certificate this machine's).
        cert, key = deployment.self_signed(tmp_path)
        http_port, https_port = deployment.free_port(), deployment.free_port()
        site = tmp_path / "ragtrail.conf"
        site.write_text(deployment.site_config(run_dir / "web.sock", http_port, https_port, cert, key))
        (tmp_path / "nginx.conf").write_text(deployment.main_config(tmp_path, site))
        started.append(
            subprocess.Popen(
                ["nginx", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        # The recipe's readiness line, through nginx: it waits until a worker has its model warm.
        ready = next(line for line in lines(units) if line.startswith("curl "))
        ready = rewrite(ready, "http://ragtrail.example.org/", f"http://127.0.0.1:{http_port}/").split("   #")[0]
        assert '"ready": true' in run(ready, clone, env, timeout=120)
        request = urllib.request.Request(f"https://127.0.0.1:{https_port}/api/v1/docs")
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            assert answer.status == 200
        time.sleep(3)
        for process in started:
            assert process.poll() is None, process.stderr.read()[-2000:]
        # What the service keeps between runs is in its state folder, nothing in the checkout.
        assert (state / "gunicorn.ctl").exists() and any(state.glob("beat-schedule*"))
        assert not list(clone.glob("celerybeat-schedule*"))
    finally:
        stop(*started)
        shutil.rmtree(run_dir, ignore_errors=True)
        subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", name], capture_output=True)
        subprocess.run(["dropuser", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", name], capture_output=True)


def test_the_service_units_pass_systemd_analyze_and_run_the_recipes_lines(tmp_path):
    """Each unit is what systemd accepts (`systemd-analyze verify`, with the checkout where the
    units expect it), and starts the very line the recipe runs without systemd."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (Debian's systemd package has it)")
    processes = [
        line.split("#")[0].strip() for line in lines(next(b for b in blocks(PRODUCTION) if "gunicorn -c" in b))
    ]
    units = sorted((ROOT / "deploy" / "systemd").glob("ragtrail-*.service"))
    assert [u.name for u in units] == ["ragtrail-beat.service", "ragtrail-web.service", "ragtrail-worker.service"]
    commands = []
    for unit in units:
        text = unit.read_text()
        commands.append(re.search(r"^ExecStart=/srv/ragtrail/(.*)$", text, flags=re.M).group(1))
        (tmp_path / unit.name).write_text(text.replace("/srv/ragtrail", str(ROOT)))
    assert sorted(commands) == sorted(processes)
    checked = subprocess.run(
        ["systemd-analyze", "verify", *[str(tmp_path / u.name) for u in units]], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A unit naming a program that is not there fails the same check.
    broken = tmp_path / "ragtrail-web.service"
    broken.write_text(broken.read_text().replace(".venv/bin/gunicorn", ".venv/bin/gunicorn-missing"))
    assert subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True).returncode != 0


# The production recipe is run as written by its own test; every other page's lines are checked here.
DOC_PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if p != PRODUCTION) + [
    ROOT / "clients" / "python" / "README.md"
]


def test_every_command_line_in_docs_names_a_real_command_with_real_flags(clean_env, clone):
    from django.core.management import get_commands, load_command_class

    commands = get_commands()
    seen, loaded = 0, set()
    for page in DOC_PAGES:
        for block in blocks(page):
            exported: dict[str, str] = {}
            for line in lines(block):
                if line.startswith("export "):
                    exported.update(re.findall(r"(\w+)=(\S+)", line.split("#")[0].removeprefix("export ")))
                    continue
                for part in (p.strip() for p in line.split("#")[0].split("&&")):
                    words = shlex.split(part)
                    own = {}
                    while words and re.fullmatch(r"\w+=.*", words[0]):
                        own.update([words[0].split("=", 1)])
                        words = words[1:]
                    if not words or words[0] == "export":
                        continue
                    seen += 1
                    if words[0] == "make":
                        run(f"make -n {shlex.join(words[1:])} >/dev/null", clone, clean_env)
                    elif words[:2] == [".venv/bin/python", "manage.py"]:
                        name = words[2]
                        assert name in commands, f"{page.name}: no command {name!r}: {line}"
                        command = load_command_class(commands[name], name)
                        command.create_parser("manage.py", name).parse_args(words[3:])
                        # As written on a laptop: the block's exports and the line's own settings are
                        # all it has (no RAGTRAIL_DEBUG or secret key from elsewhere), so the command
                        # loads its settings and finds itself; --help stops before it does any work.
                        environment = (page.name, name, tuple(sorted({**exported, **own}.items())))
                        if environment not in loaded:
                            loaded.add(environment)
                            env = {**clean_env, **exported, **own}
                            run(f".venv/bin/python manage.py {name} --help >/dev/null", clone, env)
                    elif words[0].endswith("celery"):
                        assert words[1:3] == ["-A", "ragtrail_site"] and words[3] in ("worker", "beat"), line
                    elif words[0].endswith("ragtrail-mcp"):
                        from ragtrail_client.mcp_server import argument_parser

                        argument_parser().parse_args(words[1:])
                    else:
                        raise AssertionError(
                            f"{page.name}: a command line this test does not know how to check: {line}"
                        )
    assert seen >= 25
