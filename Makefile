# Everything a fresh machine with Python 3.11 and make needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,fast]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/parbpe train --sample-corpus --vocab-size 4096 --out demo-tokenizer
	@echo
	@echo "Wrote:" && ls -l demo-tokenizer

# The package's bytecode first: where PYTHONDONTWRITEBYTECODE is set, every process the tests start
# (CLI runs, spawned workers, Ray workers) would otherwise compile parbpe again, 0.3-0.4 s each.
# Two test processes (pytest-xdist), a test file each at a time: the suite's tests mostly use one
# core. A file stays in one process, so tests/conftest.py's order (Ray's tests last) holds in each.
test: $(STAMP)
	$(BIN)/python -m compileall -q parbpe bench
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# Two interleaved repetitions keep it under 15 minutes on 2 cores; docs/BENCHMARKS.md used --repeat 3.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,fast,bench]'
	$(BIN)/python bench/compare.py --vocab-size 32768 --repeat 2

clean:
	rm -rf $(VENV) demo-tokenizer .pytest_cache
