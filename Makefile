# mocoplug: two commands on a fresh machine (see README.md).
#   make test   set up (if needed), then run the test suite
VENV ?= .venv
PYTHON := $(VENV)/bin/python
export MOCOPLUG_VENV := $(abspath $(VENV))

.PHONY: setup test clean

setup:
	bash tools/setup_env.sh

test: setup
	$(PYTHON) -m pytest tests

clean:
	rm -rf work_dirs .pytest_cache
