# Two commands do all set-up themselves on a machine with only Python 3.11+:
#   make demo   - create .venv, install ServeSim, run the quickstart comparison, say where the report is
#   make test   - create .venv, install what the tests need, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
# torch is pinned and installed before the extras: torch==2.13.0 is a local CPU wheel here, while a
# bare `torch` or a range would pull a multi-GB CUDA build.
TORCH  := torch==2.13.0

.PHONY: demo test app clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-core: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[dev]'
	touch $@

demo: $(VENV)/.installed-core
	$(BIN)/servesim catalog gpus
	$(BIN)/servesim workload scenarios/quickstart.yaml
	$(BIN)/servesim compare scenarios/quickstart.yaml --out out/quickstart
	@echo
	@echo "Report: $(CURDIR)/out/quickstart/report.html (per-variant Parquet and summary.json beside it)"

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) out .pytest_cache
