# Everything a fresh clone needs: `make demo` and `make test` create .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet -c constraints.txt
DEMO_DB := $(or $(RECALLD_DEMO_DB),/tmp/recalld-demo.db)
# Stamps: what is installed in .venv, redone when pyproject.toml or the pins change.
RUNTIME := $(VENV)/.runtime-installed
DEV := $(VENV)/.dev-installed

.PHONY: install browser native-tools demo test lint fix bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==24.3.1

# recalld and its runtime dependencies only, MCP included (what `make demo` needs).
$(RUNTIME): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[mcp]'
	touch $@

# ... plus the extras and the dev tools (tests, lint, benchmarks).
$(DEV): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[dev]'
	touch $(RUNTIME) $@

install: $(DEV)

demo: $(RUNTIME)
	rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
	$(BIN)/recalld --db $(DEMO_DB) import examples/sample_conversation.jsonl
	@while IFS= read -r q; do \
		$(BIN)/recalld --db $(DEMO_DB) search "$$q" --limit 3 --as-of 2026-04-20 || exit 1; \
	done < examples/questions.txt
	$(BIN)/recalld --db $(DEMO_DB) search "when does my sister arrive?" --limit 1 --explain --as-of 2026-04-20
	@echo
	@echo "recalld is installed in $(CURDIR)/$(BIN); put it on your PATH with:"
	@echo '  export PATH="$(CURDIR)/$(BIN):$$PATH"'
	@echo "then try: recalld --db $(DEMO_DB) search 'where do I live now?'"

# The browser tests drive Debian's Chromium (Playwright cannot download its own here):
# installed with apt-get when missing and this user may (root, or sudo without a password).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ SUDO=$$( [ "$$(id -u)" = 0 ] && echo "" || echo "sudo -n" ); \
	  if command -v apt-get >/dev/null 2>&1 && $$SUDO true 2>/dev/null; then \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "no Chromium and no apt-get to install it: the browser tests will skip (CI fails them)"; fi; }

# The portability tests read the bundled PostgreSQL with objdump (binutils) and run it on an
# emulated CPU without AVX-512 (qemu-user): installed with apt-get when missing and this user
# may (CI fails those tests without them; elsewhere they skip).
native-tools:
	@command -v objdump >/dev/null 2>&1 && command -v qemu-x86_64 >/dev/null 2>&1 || \
	{ SUDO=$$( [ "$$(id -u)" = 0 ] && echo "" || echo "sudo -n" ); \
	  if command -v apt-get >/dev/null 2>&1 && $$SUDO true 2>/dev/null; then \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binutils qemu-user \
	      >/dev/null; \
	  else echo "no objdump/qemu-x86_64 and no apt-get: the portability tests skip (CI fails them)"; fi; }

# What CI runs (.ci/run): the lint checks, then the whole suite (browser tests included).
test: lint browser native-tools
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

fix: install
	$(BIN)/ruff check --fix src tests scripts
	$(BIN)/ruff format src tests scripts

# Full benchmark runs (need ../shared/benchmarks; not part of the tests).
BENCH := ../shared/benchmarks
bench: install
	$(BIN)/recalld bench workloads $(BENCH)/workloads/dev.json --report out/workloads
	$(BIN)/recalld bench longmemeval $(BENCH)/longmemeval/longmemeval_s.json.gz --report out/lme_s
	$(BIN)/recalld bench locomo $(BENCH)/locomo/locomo.json --report out/locomo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
