# nsdist — `make demo` trains on the bundled Letter data; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python -m pipelines.demo --out runs/demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

bench: $(BIN)/.installed
	$(BIN)/pip install --quiet -c constraints.txt -e '.[bench]'
	$(BIN)/python bench/losses.py

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
