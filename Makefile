# queue-drain — every target builds what it needs from nothing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY_OK  := $(VENV)/.installed
NODE_OK := node_modules/.installed

.PHONY: chromium setup package run test test-fast lint format mypy check clean bench bench-platform bench-quick reliability simulate \
	conformance-servicebus bench-chunked bench-curves bench-tenants bench-fairness-parts bench-rounds

$(PY_OK): requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

$(NODE_OK): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

local.settings.json:
	cp local.settings.json.sample $@

# The browser tests drive Debian's Chromium through Playwright (which never downloads a browser of its own).
# Installed when missing: as root (CI) with apt-get, else with sudo if it needs no password; otherwise say how.
# Without it the browser tests skip, and under CI=true they fail.
chromium:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif ! command -v apt-get >/dev/null; then \
		echo "setup: no apt-get here; install Chromium (on PATH as chromium) for the browser tests" >&2; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "setup: the browser tests need Debian's chromium: sudo apt-get install chromium" >&2; \
	fi

setup: $(PY_OK) $(NODE_OK) local.settings.json chromium

## make run: Azurite + the Service Bus stand-in + the local function host on :7071 (Ctrl-C stops all three)
run: setup
	$(BIN)/python -m devstack run

## make test: the whole suite against a real Azurite and the real broker started by the fixtures, on
## TEST_WORKERS pytest-xdist workers (each starts its own services on free ports; how tests are grouped: tests/scheduling.py).
## Four on two cores: the suite mostly waits (visibility timeouts, leases, kill -9 and outage drills), about 1.2 cores
## busy on average; 5.5 minutes against 9.7 with two. make test-fast is CPU-bound and keeps FAST_WORKERS (2).
TEST_WORKERS ?= 4
FAST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

## make simulate SEEDS=N [START=S] [JOBS=J] [FAMILY=all|random|submit|limits|volume|priority|storage|lifecycle|idle|platform|replay|history|schedule|flood|stale-cancel|copies|straddle]: the engine in the
## deterministic simulation, N seeds with faults per family (all: every family, volume N/50, history and flood N/5), and the feature reach per family (sim/);
## a failing seed prints its scenario and schedule; replay one with: python -m sim --seed K. The seeds run in JOBS
## processes (default 2; python -m sim --jobs), and print what one process prints, in seed order
SEEDS ?= 1000
JOBS ?= 2
FAMILY ?= all
START ?= 0
simulate: $(PY_OK)
	PYTHONHASHSEED=0 $(BIN)/python -m sim --seeds $(SEEDS) --start $(START) --family $(FAMILY) --jobs $(JOBS)

## make package: the deployment zip as `func azure functionapp publish` builds it, installed and indexed in a clean venv
package: setup
	$(BIN)/python -m devstack.package dist/queue-drain.zip

## make test-fast: the pure and single-service tests (the app on a real Azurite, the benches' pure parts, the
## templates, the simulation) without the ones marked slow, in under a minute; make test runs them all
test-fast: setup
	$(BIN)/python -m pytest -n $(FAST_WORKERS) --dist loadscope -m "not faults and not slow and not hostile and not browser" \
		tests/app tests/bench tests/infra tests/sim

## make reliability: the fault scenarios against the whole local stack -> RELIABILITY.md (written even if one fails)
reliability: setup
	rm -f .devstack/reliability.json
	status=0; RELIABILITY_JSON=.devstack/reliability.json $(BIN)/python -m pytest -m faults || status=$$?; \
	$(BIN)/python -m tests.faults.report .devstack/reliability.json RELIABILITY.md && exit $$status

## make conformance-servicebus: Microsoft's own queue tests from the pinned azure-servicebus sdist against a fresh
## Service Bus stand-in, one line per test (downloads the sdist once; not part of `make test`)
conformance-servicebus: $(PY_OK)
	$(BIN)/python -m emulators.servicebus.conformance

## make lint: ruff, and the import contracts of pyproject.toml (layers, no circles, the tools apart from the app)
lint: $(PY_OK)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: $(PY_OK)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

mypy: $(PY_OK)
	$(BIN)/mypy

check: lint mypy test

clean:
	rm -rf $(VENV) node_modules .devstack .pytest_cache .mypy_cache .ruff_cache .hypothesis

## make bench: every benchmark figure side by side in one run -> bench/results/latest.json, BENCHMARKS.md
bench: setup
	$(BIN)/python -m bench.platform
	$(BIN)/python -m bench.idle_sources
	$(BIN)/python -m bench.tracing_cost
	$(BIN)/python -m bench.fairness
	$(BIN)/python -m bench.fairness --items 300000 --no-rates --json bench/results/fairness-300k.json
	$(BIN)/python -m bench.scale_out
	$(BIN)/python -m bench.chunked
	$(BIN)/python -m bench.rounds --profile
	$(BIN)/python -m bench.curves
	$(BIN)/python -m bench.tenants
	$(FAIRNESS_PARTS)
	$(BIN)/python -m bench

FAIRNESS_PARTS = $(BIN)/python -m bench.fairness --items 1000000 --waits 200 --rounds 1 --no-rates --azurite-parts \
	--json bench/results/fairness-parts.json && \
	$(BIN)/python -m bench.fairness --items 1000000 --waits 200 --rounds 1 --no-rates --azurite-parts --spin 2 \
	--json bench/results/fairness-parts-spin.json

## make bench-chunked: peer (a'), the built-in trigger fed the app's chunks, beside (a) and the app (about 9 min)
bench-chunked: setup
	$(BIN)/python -m bench.chunked
	$(BIN)/python -m bench --report-only

## make bench-curves: cost and time of one batch of 10^3..10^6 items, extended to 10^7 (about 2 min)
bench-curves: setup
	$(BIN)/python -m bench.curves
	$(BIN)/python -m bench --report-only

## make bench-tenants: what 1, 100 and 1,000 tenant lanes cost, idle and draining (about 15-20 min)
bench-tenants: setup
	$(BIN)/python -m bench.tenants
	$(BIN)/python -m bench --report-only

## make bench-rounds: the app beside (a') and the raw loop in 5 interleaved rounds, CPU per message, a profile (about 4 min)
bench-rounds: setup
	$(BIN)/python -m bench.rounds --profile
	$(BIN)/python -m bench --report-only

## make bench-fairness-parts: a newcomer behind 1,000,000 items, Azurite's part and the app's, then the same with
## two CPU-bound processes beside it (about 8 min)
bench-fairness-parts: setup
	$(FAIRNESS_PARTS)
	$(BIN)/python -m bench --report-only

## make bench-platform: the platform model and 1 vs 2 local hosts -> bench/results/, BENCHMARKS.md (about 8 min)
bench-platform: setup
	$(BIN)/python -m bench.platform
	$(BIN)/python -m bench.idle_sources
	$(BIN)/python -m bench.scale_out
	$(BIN)/python -m bench --report-only

## make bench-quick: the same run at small sizes (under 5 minutes) -> bench/results/quick.json
bench-quick: setup
	$(BIN)/python -m bench --quick
