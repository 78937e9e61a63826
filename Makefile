# snapllm: `make demo` runs the main job, `make test` the test suite; both set everything up first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
TOOLS := .tools
SAM := $(TOOLS)/bin/sam
export SAM_CLI_TELEMETRY := 0
# mkdocs-material prints an end-of-life banner on every build.
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup tools demo test test-fast lint format validate bench clean build preflight checkov test-arm64 serve bench-router \
	sam-local replay deploy-check deploy-rehearsal docs llama-server

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/dev.txt scripts/setup.sh layers/llama-cpp/cpu-flags.sh \
		layers/llama-cpp/patch-sources.sh $(wildcard layers/llama-cpp/patches/*.patch)
	scripts/setup.sh

# AWS SAM CLI pins its own boto3 range, so it lives in a venv of its own.
tools: $(TOOLS)/.installed

$(TOOLS)/.installed: requirements/tools.txt layers/llama-cpp/toolchain.txt
	scripts/setup-tools.sh

demo: setup
	$(VENV)/bin/snapllm local invoke InferenceFunction -e events/inference/chat.json
	$(VENV)/bin/snapllm local invoke AgentFunction -e events/agent/review.json --approve

# The suite's parallel workers (pytest-xdist), each given whole test files (or a group of files that share a
# server: tests/conftest.py), whose module fixtures (a loaded model, a restored function, a server) are made
# once; 1 runs it in one process. The tests marked `alone` load the whole machine and run after the others,
# by themselves. PYTEST_ARGS: more of pytest's options
# (CI lists every test's duration).
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
# The modules that hold tests marked `alone`: that run collects only these (tests/unit/test_test_layout.py
# checks the list).
ALONE_TESTS := tests/integration/test_real_weights.py
# The suites start some 300 Python processes. With bytecode cached (__pycache__: ignored by git, pruned from
# the layers), each imports the project's modules without compiling them again: collecting the tests takes
# 7 s of CPU instead of 12 in each worker. An environment that turns the cache off is overridden here.
test test-fast: export PYTHONDONTWRITEBYTECODE :=
test: setup tools
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mkdocs build --strict --quiet
	$(VENV)/bin/pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) -m "not alone" $(PYTEST_ARGS)
	$(VENV)/bin/pytest -m alone $(PYTEST_ARGS) $(ALONE_TESTS)

# Before each commit: the lint, the import contracts and the unit tests (no server, no full lifecycle; the
# tests marked slow are left to `make test`). The preflight's unit tests compile with the tools venv's zig.
test-fast: setup tools
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) -m "not slow" tests/unit

# The documentation site (mkdocs.yml) into site/; --strict fails on a broken link, anchor or unlisted page.
docs: setup
	$(VENV)/bin/mkdocs build --strict

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

validate: tools
	$(SAM) validate --lint

# Lambda architecture to build for: arm64 (Graviton2) or x86_64. `make build ARCH=x86_64 preflight ARCH=x86_64`.
ARCH ?= arm64
# Where `sam build` writes (and its cache); `make sam-local` builds x86_64 beside the default arm64 build.
BUILD_DIR ?= .aws-sam/build
# A shortcut for `sam build --parameter-overrides Architecture=$(ARCH)` that skips the other architecture's
# layers: with SNAPLLM_ARCH set, their Makefile targets (layers/*/Makefile) write placeholders. The SAM cache
# is per architecture, or a cached placeholder would stand in for a real layer after a change of ARCH. The
# tools venv goes first on PATH: its python3.13 serves SAM's Python builder where none is on PATH.
#
# SAM keeps one build graph beside the build dir (build.toml, with each source's hash) whatever the cache dir, so
# a build with another cache would mark this cache's stale entries as current: each cache keeps its own graph,
# put in place for the build and moved back after it (plain `sam build` then finds none and rebuilds).
BUILD_CACHE = $(BUILD_DIR)-cache-$(ARCH)
BUILD_GRAPH = $(dir $(BUILD_DIR))build.toml
build: tools
	mkdir -p $(BUILD_CACHE)
	if [ -f $(BUILD_CACHE)/build.toml ]; then cp $(BUILD_CACHE)/build.toml $(BUILD_GRAPH); else rm -f $(BUILD_GRAPH); fi
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" SNAPLLM_ARCH=$(ARCH) $(SAM) build --parameter-overrides Architecture=$(ARCH) \
		--build-dir $(BUILD_DIR) --cache-dir $(BUILD_CACHE)
	mv $(BUILD_GRAPH) $(BUILD_CACHE)/build.toml

preflight: setup
	$(VENV)/bin/snapllm preflight $(BUILD_DIR) --parameter-overrides Architecture=$(ARCH)

checkov: tools
	$(TOOLS)/bin/checkov --quiet --compact --skip-download --framework cloudformation -f template.yaml

# The deploy rehearsal: everything before the first AWS call. The build and its preflight, SAM's linter,
# checkov, then the template as CloudFormation would receive it (SAM's translator, offline): every SnapStart
# version waits for the model, every role allows exactly what its function's code calls, every variable the
# code needs is set.
deploy-check: build preflight validate checkov
	$(VENV)/bin/snapllm deploy-check --parameter-overrides Architecture=$(ARCH)

# The real `sam deploy` against moto's server on 127.0.0.1 (CloudFormation, S3, Lambda): the managed artifact
# bucket, packaging, change sets, a first deploy and an update after a one-line change to snapllm's code.
# What moto cannot play, and what stands in for it, is printed (scripts/deploy_rehearsal.py).
deploy-rehearsal: build
	$(PY) -W ignore scripts/deploy_rehearsal.py $(BUILD_DIR)

# Builds for arm64, then loads the aarch64 layer in an arm64 Debian userland under qemu-user (Neoverse N1)
# and checks that the tokens it generates match the host's, free and constrained by a JSON schema (the snapllm
# layer's llguidance aarch64 wheel).
test-arm64: setup
	$(MAKE) build ARCH=arm64
	scripts/test-arm64.sh .aws-sam/build

# The functions through the real `sam local invoke` in Lambda containers: starts a private Docker engine as root
# (installing Debian's docker.io if needed), builds x86_64, prints each response with its times and checks
# each running container; then arm64 under qemu where binfmt_misc allows. Stops the engine on the way out.
sam-local: setup tools
	scripts/sam-local.sh

bench: setup
	$(VENV)/bin/snapllm bench coldstart

# The OpenAI-compatible API on http://127.0.0.1:$(PORT)/v1 (router + streaming), no Docker; Ctrl-C stops.
PORT ?= 3000
serve: setup
	$(VENV)/bin/snapllm local serve --port $(PORT)

# Every event in events/ through its function on the local stack, against the answer recorded beside it
# (NAME.expected.json); `snapllm replay --update` re-records after a deliberate change. `make test` runs it too.
replay: setup
	$(VENV)/bin/snapllm replay

# Router overhead per request (everything but inference): p50/p95/p99, fails above a 10 ms p99.
bench-router: setup
	$(VENV)/bin/snapllm bench router

clean:
	rm -rf .aws-sam .pytest_cache .ruff_cache site

# llama.cpp's own server, compiled once from the llama.cpp that llama-cpp-python vendors (cached under
# ~/.cache/snapllm): the peer of `snapllm bench grammar --peer llama-server`.
llama-server:
	scripts/build-llama-server.sh
