# The README's two commands are `make run` and `make test`; everything else is a helper.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# An MCP client this repo did not write (langchain-mcp-adapters on mcp 1.x), for tests/client/test_outside_mcp_client.py.
OUTSIDE ?= .venv-mcp-outside
HOST ?= 127.0.0.1:8000
# load_demo prints a curl line for this address.
export HOST

.PHONY: run test test-properties demo-new bench clean

# The laptop's and CI's venv: the service, the model export, the benchmarks and the tests
# (requirements/test.txt). Production installs requirements.txt alone (README: Running it in production).
$(VENV)/.installed: requirements.txt requirements/model.txt requirements/export.txt requirements/bench.txt requirements/test.txt clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/test.txt
	touch $@

$(OUTSIDE)/.installed: clients/mcp-outside/requirements.txt
	test -x $(OUTSIDE)/bin/python || $(PYTHON) -m venv $(OUTSIDE)
	$(OUTSIDE)/bin/python -m pip install --quiet -r clients/mcp-outside/requirements.txt
	touch $@

# Sphinx and MkDocs, which build the fixture projects whose anchors section ids are checked against.
DOC_TOOLS ?= .venv-doc-tools
$(DOC_TOOLS)/.installed: requirements/doc-tools.txt
	test -x $(DOC_TOOLS)/bin/python || $(PYTHON) -m venv $(DOC_TOOLS)
	$(DOC_TOOLS)/bin/python -m pip install --quiet -r requirements/doc-tools.txt
	touch $@

# GPTCache, the peer benchmark_peer measures recall against, in its own venv (its pins are not ours).
PEER ?= .venv-peer
$(PEER)/.installed: evaluation/peer/requirements.txt
	test -x $(PEER)/bin/python || $(PYTHON) -m venv $(PEER)
	$(PEER)/bin/python -m pip install --quiet -r evaluation/peer/requirements.txt
	touch $@

# The TypeScript client's pinned compiler and Node types (its package-lock.json), for
# tests/client/test_typescript_client.py; without npm here that test is skipped (CI installs Node).
TS_CLIENT ?= clients/typescript
$(TS_CLIENT)/node_modules/.installed: $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  cd $(TS_CLIENT) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm not found: the TypeScript client's tests will be skipped"; fi

# The worker (with beat) runs beside the web server on the filesystem broker and stops with it.
# The laptop demo runs with DEBUG on (and the development secret key); production does not.
run: export RAGTRAIL_DEBUG ?= 1
run: $(VENV)/.installed
	@# A second `make run` stops here, before it touches the running demo's database.
	@$(PY) -c "import socket, sys; h, p = '$(HOST)'.rsplit(':', 1); s = socket.socket(); sys.exit(f'$(HOST) is in use (is make run already running?)') if s.connect_ex((h, int(p))) == 0 else None"
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py load_demo --no-print
	@# The key and the Try: line come last, once the server answers, after every banner.
	$(PY) -m celery -A ragtrail_site --quiet worker --beat --pool solo --loglevel warning --schedule .celery/beat-schedule & \
	worker=$$!; \
	( $(PY) -c "import socket, time; h, p = '$(HOST)'.rsplit(':', 1); next((up for _ in range(300) if (up := socket.socket().connect_ex((h, int(p))) == 0) or time.sleep(0.2)), None)" \
	  && $(PY) manage.py load_demo --credentials-only ) & \
	printer=$$!; trap 'kill $$worker $$printer 2>/dev/null' EXIT INT TERM; \
	$(PY) manage.py runserver $(HOST)

# Tests run as production does (DEBUG off), with a throwaway key.
test: export RAGTRAIL_SECRET_KEY ?= test-only-key-not-for-production-0123456789-abcdefghijklmnop
test: $(VENV)/.installed $(OUTSIDE)/.installed $(DOC_TOOLS)/.installed $(TS_CLIENT)/node_modules/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	@# The model's ONNX export, made once before the tests (a deploy step), not inside the first request that needs it.
	$(PY) manage.py export_model
	@# -rs: every skipped test is listed with its reason (what this machine lacks: PostgreSQL, Redis, Chromium...).
	$(PY) -m pytest -rs
	@# Each guard of docs/consistency.md switched off in turn: its test must then fail.
	$(PY) manage.py check_guards

# The long run of the stateful property test (CI runs 300 examples on PostgreSQL).
test-properties: export RAGTRAIL_SECRET_KEY ?= test-only-key-not-for-production-0123456789-abcdefghijklmnop
test-properties: $(VENV)/.installed
	RAGTRAIL_PROPERTY_EXAMPLES=$${RAGTRAIL_PROPERTY_EXAMPLES:-5000} $(PY) -m pytest -q tests/test_promises_stateful.py

# Moves the demo sections to the FAQ at v3.11.0, so recalls show hints and misses.
demo-new: export RAGTRAIL_DEBUG ?= 1
demo-new: $(VENV)/.installed
	$(PY) manage.py load_demo --revision new --no-credentials

# The benchmarks in one run (PostgreSQL; production settings, a throwaway key):
# embedding recall as a scope grows, HTTP throughput, overload and memory, and a comparison
# with the previous run. BENCH_ARGS="--sizes 10000 100000 1000000" for the million.
bench: export RAGTRAIL_SECRET_KEY ?= bench-only-key-not-for-production-0123456789-abcdefghijklmnop
bench: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
bench: export DJANGO_SETTINGS_MODULE = evaluation.settings
bench: $(VENV)/.installed $(PEER)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(OUTSIDE) $(DOC_TOOLS) db.sqlite3
