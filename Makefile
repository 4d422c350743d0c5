# Setup and the two entry points (see README). Everything installs into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup system demo test lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	# torch is pinned to the CPU build first so nothing pulls a CUDA build (silero-vad needs torch).
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all]'
	# moshi pins an older torch: installed without its pins, next to the CPU torch (pyproject [moshi])
	$(BIN)/pip install -q --no-deps moshi==0.2.13
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/mpe demo

# Debian packages the tests use: chromium (browser tests through Playwright, never a
# downloaded browser) and espeak-ng (the second TTS engine). Installed as root when missing.
system:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v espeak-ng >/dev/null || missing="$$missing espeak-ng"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else echo "missing:$$missing (install them as root; the tests that need them are skipped)"; fi; \
	fi

# The tests: all but the strict-timing ones in three workers on the two cores (the realtime ones
# mostly wait on the wall clock), then those that assert pacing bounds one at a time, with the
# machine to themselves; tests/conftest.py REALTIME_FILES and STRICT_TIMING say which.
test: setup system lint
	$(BIN)/pytest -q -n 3 --dist loadfile -m "not strict_timing"
	$(BIN)/pytest -q -m strict_timing

# Lint and the import contracts (the layers of docs/DESIGN.md's map); both fail on a violation.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: setup
	$(BIN)/python bench/engine.py
	# the soak, short here (a minute): bench/soak.py without options runs 16 episodes for 10 minutes
	$(BIN)/python bench/soak.py --seconds 60
	$(BIN)/python bench/capacity.py --quick
	# several server processes on PostgreSQL: lockstep throughput and realtime pacing (one round
	# each here; docs/benchmarks.md's figures are from more rounds and 64 bridges)
	$(BIN)/python bench/workers.py --repeat 1
	$(BIN)/python bench/workers.py --clock realtime --bridges 16 --seconds 15 --repeat 1 --bare
	$(BIN)/python bench/scoring.py --parts workers --db postgres
	$(BIN)/python bench/storage.py

clean:
	rm -rf $(VENV) .mpe client-dist/build
