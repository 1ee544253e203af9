# Two commands do all the set-up on a fresh machine:
#   make demo   install everything into .venv and run the main job on the built-in default model
#   make test   install everything into .venv and run the checks: format, lint, types, tests
# Every install goes through constraints.txt, which pins torch (a CPU machine never pulls CUDA).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed

.PHONY: install browser demo test check benchmarks clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e '.[dev,onnx,transformers,openvino,torchao]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/accelscope env
	$(BIN)/accelscope bench resnet50 --batch 8 --backend eager,compile --precision fp32,bf16,int8 \
	  --option channels_last=true --measure-budget 5s

check: $(STAMP)
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

# The HTML report is tested in a real headless browser (Debian's chromium).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "the report tests need chromium: sudo apt-get install chromium" >&2; exit 1; fi; }

test: check browser
	$(BIN)/pytest -q

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/timer_overhead.py
	$(BIN)/python benchmarks/run_to_run_spread.py

clean:
	rm -rf $(VENV) .accelscope .pytest_cache .mypy_cache .ruff_cache
