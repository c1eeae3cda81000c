# Two commands do all the set-up: `make chat` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: chat test install bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The stamp re-runs the install when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --progress-bar on -e ".[test]"
	@echo ">>> Building the embedded demo model runtime (llama-cpp-python compiles llama.cpp:"
	@echo ">>> about 5 minutes on 2 cores the first time; pip prints 'still running...' while it works)."
	$(BIN)/pip install --progress-bar on -e ".[embedded,test]"
	touch $@

install: $(VENV)/.installed

chat: install
	$(BIN)/companion chat

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python -m bench.memory_path
