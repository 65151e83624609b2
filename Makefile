# Two commands for a fresh machine; each creates (or reuses) the virtual environment in .venv.
#   make run    install the app's requirements and start it (streamlit run app.py, warmed: lib/ui/serve.py)
#   make test   install the test requirements and run the whole test suite
#   make lint   install the test requirements, run ruff (ruff.toml) and type-check lib/ with mypy (pyproject.toml's [tool.mypy])
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench

run: $(VENV)/.app-installed
	$(BIN)/python -m gradient_lab.ui.serve $(ARGS)

# The tests that need no browser on every core (pytest-xdist), then the browser tests alone: they
# time a server and a browser that share the machine, so nothing else runs beside them. pytest's
# exit status 5 (no test selected, say by PYTEST_ARGS="-k cosine") is not a failure.
test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -n $(or $(WORKERS),2) -m "not e2e" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -m e2e $(PYTEST_ARGS) || [ $$? -eq 5 ]

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/mypy --config-file pyproject.toml

bench: $(VENV)/.dev-installed
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.app-installed: requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.app-installed
