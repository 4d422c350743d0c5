# Setup and the two entry points (see README). Everything installs into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup browser demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	# torch is pinned to the CPU build first so nothing pulls a CUDA build (silero-vad needs torch).
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/mpe demo

# The browser tests drive Debian's chromium through Playwright (never a downloaded browser).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "chromium missing: run 'apt-get install chromium' as root (the browser tests are skipped)"; fi; \
	fi

test: setup browser
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) .mpe
