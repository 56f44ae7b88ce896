# txjoin: `make demo` runs the pizzeria scenario end to end; `make test` runs
# lint, type checks and the whole suite against a real PostgreSQL, Spark and
# Delta. Both install what is missing first.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.txjoin-installed
PYTEST_ARGS ?=
# Two workers, each with its own server and Spark session: both cores stay busy throughout
# the tests (sampled every 15 s on 2026-11-29; a Spark start alone costs about
# 9 s of CPU), and three were slower (22:08 against 20:07; 22:04 against 21:42).
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
# make test's Spark JVMs compile with C1 only: its JVMs live seconds to minutes over small
# data, and C2's compiler threads took the cores the tests wait on (test_load_crash and
# test_kill_run side by side: 307 and 275 s -> 175 and 148 s). Pipelines keep the default
# (C2 made a full recompute of 1M rows 2.3x faster, bench/NOTES.md); make test-thorough too.
# TEST_JAVA_OPTIONS= runs the suite with the JVM's defaults (txjoin scenario run and txjoin check,
# which the suite also starts, compile with C1 only by themselves: txjoin/session.py).
# C1 alone gets a 48 MB code cache, which the suite's sessions filled (one JVM died of it); 240m
# is the default with both tiers (txjoin.session.SHORT_LIVED_JIT).
TEST_JAVA_OPTIONS ?= -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

.PHONY: all setup system venv archive checks lint typecheck test test-unit test-thorough demo bench clean

all: test

system:
	@sh scripts/setup-system.sh

$(STAMP): pyproject.toml | system
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# Spark's driver starts 7-8 s sooner from a class archive of the classes it loads (written
# once into ~/.cache/txjoin, about a minute; txjoin/session.py).
archive: venv
	@$(BIN)/python -m txjoin.session

setup: system venv archive

# Lint and mypy (one core) run beside the class archive's first write (a Spark session, about a
# minute): on an empty ~/.cache that write and a cold mypy took 63 and 28 s one after the other.
checks: system venv
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck archive

lint: venv
	$(BIN)/ruff check src tests bench scenarios

# mypy's cache lives in the user's cache, shared by checkouts: it checks each file's hash, so a
# fresh clone rechecks what differs (1 s against 28 s for all 194 files).
MYPY_CACHE_DIR ?= $${XDG_CACHE_HOME:-$$HOME/.cache}/txjoin/mypy

typecheck: venv
	MYPY_CACHE_DIR="$(MYPY_CACHE_DIR)" $(BIN)/mypy

test: checks
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} TXJOIN_SPARK_JAVA_OPTIONS="$(TEST_JAVA_OPTIONS)" \
		$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

test-unit: setup
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-thorough: checks
	HYPOTHESIS_PROFILE=thorough TXJOIN_THOROUGH=1 $(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

demo: setup
	$(BIN)/txjoin scenario run pizzeria

bench: setup
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench

clean:
	rm -rf .txjoin .pytest_cache .mypy_cache .ruff_cache
