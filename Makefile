# kvtiers: two set-up commands, `make synth` and `make test`, work on a fresh clone (PyPI and npm registries; `make test`
# also Debian's archive, for promtool).
SHELL := /bin/bash
.SHELLFLAGS := -e -o pipefail -c
# The Python versions kvtiers supports and tests: pyproject.toml's classifiers name the same, its requires-python
# the oldest and no cap (tests/test_python_versions.py).
SUPPORTED_PYTHONS := 3.11 3.12 3.13
# The first of the interpreters $(1) that runs and is one of the versions $(2). Each is run, not only looked up: a
# pyenv shim exists for every installed version but runs only those pyenv selects.
first_python = $(shell for p in $(1); do v=$$($$p -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) && case " $(2) " in (*" $$v "*) command -v $$p; break;; esac; done)
ifndef PYTHON
PYTHON := $(call first_python,python3.11 python3.12 python3.13 python3,$(SUPPORTED_PYTHONS))
endif
# checkov's own classifiers stop at 3.12.
CHECKOV_PYTHON := $(call first_python,$(PYTHON) python3.11 python3.12,3.11 3.12)
# The pinned requirements of dependency groups of pyproject.toml (the one place of every pin), for pip -r /dev/stdin.
PINS = $(PYTHON) tools/pins.py
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk
CONFIG ?= config/dev.yaml
HYPERPOD_CLI_REPO ?= https://github.com/aws/sagemaker-hyperpod-cli
# The revision the environment file pins (read through the schema, so its default applies and a model's own
# `revision:` can never be taken for it).
HYPERPOD_CLI_REV ?= $(shell $(PY) -c 'import sys; from kvtiers.config import load_environment; print(load_environment(sys.argv[1]).hyperpod.dependency_chart.revision)' $(CONFIG))
# Node.js 22 from the npm registry (package.json's `node`, installed by npm ci), first on PATH for the CDK CLI and
# for jsii, which runs aws-cdk-lib under `node` and warns that Node 20 is unsupported since 2026-10-30.
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: synth test test-under-load upstream-mirrors install lint python-versions check-python bench-synth hyperpod-chart hyperpod-chart-checkout clean

install: $(VENV)/.installed node_modules/.installed

check-python:
	@test -n "$(PYTHON)" || { echo "error: kvtiers needs Python $(SUPPORTED_PYTHONS), but none of python3.11, python3.12, python3.13, python3 on PATH runs as one of them; install one, or set PYTHON=/path/to/python3.x" >&2; exit 1; }
	@test -n "$(call first_python,$(PYTHON),$(SUPPORTED_PYTHONS))" || { echo "error: PYTHON=$(PYTHON) does not run as Python $(SUPPORTED_PYTHONS)" >&2; exit 1; }

# LMCache at exactly the versions the version matrix names (kvtiers/catalog/versions.py, read by path), one venv per
# version, without dependencies: the contract tests run LMCache's config loader and controller message classes, which
# need only these few packages (and a stand-in torch from tests/stubs). They must not disturb the project's pins.
# LMCache publishes wheels for every Python kvtiers supports, so these venvs use $(PYTHON).
LMCACHE_VERSIONS := $(if $(PYTHON),$(shell $(PYTHON) kvtiers/catalog/versions.py))
LMCACHE_VENVS := $(foreach v,$(LMCACHE_VERSIONS),.venv-lmcache-$(v)/.installed)
.venv-lmcache-%/.installed: kvtiers/catalog/versions.py pyproject.toml | check-python
	$(PYTHON) -m venv .venv-lmcache-$*
	.venv-lmcache-$*/bin/pip install --quiet --disable-pip-version-check --no-deps lmcache==$*
	$(PINS) lmcache-contract | .venv-lmcache-$*/bin/pip install --quiet --disable-pip-version-check -r /dev/stdin
	touch $@

# The engine image's LMCache with a CPU torch and the packages its cache engine imports, for the L2 fault drill
# (tests/test_l2_faults.py runs LMCache's own store, lookup and retrieve over a fault-injecting file system layer).
ENGINE_LMCACHE := $(if $(PYTHON),$(shell $(PYTHON) kvtiers/catalog/versions.py --engine-lmcache))
.venv-engine/.installed: kvtiers/catalog/versions.py pyproject.toml | check-python
	$(PYTHON) -m venv .venv-engine
	$(PINS) lmcache-engine | .venv-engine/bin/pip install --quiet --disable-pip-version-check -r /dev/stdin
	.venv-engine/bin/pip install --quiet --disable-pip-version-check --no-deps lmcache==$(ENGINE_LMCACHE)
	touch $@

# The router image's Python and LMCache, for the kvaware rollout drill (tests/test_router_rollout.py, which runs the
# router from its source and skips without a Python 3.12 venv or a mirror of the router's repository).
ROUTER_PYTHON := $(if $(PYTHON),$(shell $(PYTHON) tools/python_versions.py which 3.12))
ROUTER_LMCACHE := $(if $(PYTHON),$(shell $(PYTHON) kvtiers/catalog/versions.py --router-lmcache))
.venv-router/.installed: kvtiers/catalog/versions.py pyproject.toml | check-python
	@if [ -z "$(ROUTER_PYTHON)" ]; then echo "note: no python3.12: tests/test_router_rollout.py will skip"; exit 0; fi; \
	$(ROUTER_PYTHON) -m venv .venv-router && \
	$(PINS) router-drill | .venv-router/bin/pip install --quiet --disable-pip-version-check -r /dev/stdin && \
	.venv-router/bin/pip install --quiet --disable-pip-version-check --no-deps lmcache==$(ROUTER_LMCACHE) && \
	touch $@

# The engine image's vLLM wheel, unpacked by no one: the contract tests read its source files (tests/upstream.py).
ENGINE_VLLM := $(if $(PYTHON),$(shell $(PYTHON) kvtiers/catalog/versions.py --engine-vllm))
VLLM_WHEEL_DIR := .upstream/vllm-$(ENGINE_VLLM)
$(VLLM_WHEEL_DIR)/.downloaded: kvtiers/catalog/versions.py | check-python
	rm -rf $(VLLM_WHEEL_DIR)
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: vllm==$(ENGINE_VLLM) -d $(VLLM_WHEEL_DIR)
	touch $@

# Prometheus's rule engine for the rule tests: promtool from Debian's prometheus package at the version
# tools/promtool.py pins, downloaded with apt-get and unpacked (never installed); fails with a clear message when that
# version is no longer in the archive.
PROMTOOL := $(if $(PYTHON),$(shell $(PYTHON) tools/promtool.py --path))
$(PROMTOOL): tools/promtool.py | check-python
	$(PYTHON) tools/promtool.py install

# kvtiers with its app, cli and plot extras, editable, at the app's exact pins (the `app` group, as constraints:
# the library itself declares ranges), and the test and lint tools.
$(VENV)/.installed: pyproject.toml | check-python
	$(PYTHON) -m venv $(VENV)
	$(PINS) test lint | $(PY) -m pip install --quiet --disable-pip-version-check -e '.[app,cli,plot]' -r /dev/stdin -c <($(PINS) app)
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

## Synthesize one environment (CONFIG=config/<env>.yaml) into cdk.out and print its stacks and resources.
# Without a vendored HyperPod chart, `make synth` is an offline review synth: it says so, and the platform template
# carries a rule that refuses deployment. `cdk deploy` itself never takes this mode implicitly.
REVIEW ?= $(if $(wildcard $(HYPERPOD_CLI_DIR)/helm_chart/HyperPodHelmChart/Chart.yaml),false,true)
synth: install
	$(CDK) synth --lookups=false --no-notices -q -c config=$(CONFIG) -c kvtiers:review=$(REVIEW) -o cdk.out
	$(PY) tools/synth_summary.py cdk.out

## The whole offline test suite (config, templates, cfn-lint, cdk-nag, Kubernetes schemas, CLI).
# The HyperPod Inference Operator's spec models (pydantic) from the sagemaker-hyperpod SDK, to validate the
# InferenceEndpointConfig objects. Installed without dependencies into its own folder: the SDK pins many packages.
HYPERPOD_SDK := .venv-hyperpod-sdk
$(HYPERPOD_SDK)/.installed: $(VENV)/.installed
	$(PINS) hyperpod-sdk | $(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(HYPERPOD_SDK) -r /dev/stdin
	touch $@

# checkov (the independent scanner of tests/test_checkov.py) in its own venv: it pins older boto3/botocore than
# the app, so pip cannot install both into one environment.
.venv-checkov/.installed: pyproject.toml | check-python
	@test -n "$(CHECKOV_PYTHON)" || { echo "error: checkov needs Python 3.11 or 3.12 (python3.11 or python3.12 on PATH)" >&2; exit 1; }
	$(CHECKOV_PYTHON) -m venv .venv-checkov
	$(PINS) checkov | .venv-checkov/bin/pip install --quiet --disable-pip-version-check -r /dev/stdin
	touch $@

## ruff (lint and format) and mypy (strict for the construct library and the config, per pyproject.toml).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check kvtiers tests tools app.py
	$(VENV)/bin/ruff format --check kvtiers tests tools app.py
	$(VENV)/bin/mypy

## A venv (.venv-py<version>) for every other supported Python the machine has, from the project's pins, in which
## tests/test_python_versions.py synthesizes both environments; prints which versions it found and skipped.
python-versions: $(VENV)/.installed
	$(PY) tools/python_versions.py install

TEST_PREREQUISITES := install $(LMCACHE_VENVS) .venv-engine/.installed .venv-router/.installed $(VLLM_WHEEL_DIR)/.downloaded $(HYPERPOD_SDK)/.installed .venv-checkov/.installed $(PROMTOOL) python-versions lint
test: $(TEST_PREREQUISITES)
	$(PY) -m pytest -n 2 --dist loadfile

## The same suite beside one busy process per core (tools/under_load.py): a test must wait for its event, not for a
## deadline a loaded machine misses.
test-under-load: $(TEST_PREREQUISITES)
	$(PY) tools/under_load.py -- $(PY) -m pytest -n 2 --dist loadfile

## Bare git mirrors of the components on no package registry (Curvine, production-stack's router) at their pinned
## tags, for the tests that read them (tests/upstream.py); needs github.com. Without them `make test` skips those
## checks and says how many it skipped.
upstream-mirrors: $(VENV)/.installed
	$(PY) -m tests.upstream fetch

## Median time of `python app.py` for the default environment against a bare one-stack CDK app, alternating;
## BASELINE=<git revision> also times that revision in the same runs (for example BASELINE=main).
bench-synth: install
	$(PY) tools/bench_synth.py --runs 5 --endpoints $(if $(BASELINE),--baseline-rev $(BASELINE))

## Fetch the HyperPod dependency Helm chart at the pinned revision into vendor/ and resolve its subcharts with
## the kubectl layer's Helm (needs git and the internet). Synth checks the checkout is at the pinned revision.
HYPERPOD_CLI_DIR ?= vendor/sagemaker-hyperpod-cli
HELM := $(VENV)/bin/helm
$(HELM): $(VENV)/.installed
	$(PY) tools/layer_helm.py $@

hyperpod-chart: $(HELM) hyperpod-chart-checkout
	$(HELM) dependency update $(HYPERPOD_CLI_DIR)/helm_chart/HyperPodHelmChart

hyperpod-chart-checkout: $(VENV)/.installed
	rm -rf $(HYPERPOD_CLI_DIR)
	git clone --quiet --filter=blob:none $(HYPERPOD_CLI_REPO) $(HYPERPOD_CLI_DIR)
	@git -C $(HYPERPOD_CLI_DIR) cat-file -e "$(HYPERPOD_CLI_REV)^{commit}" 2>/dev/null || { \
	  echo "error: commit $(HYPERPOD_CLI_REV) does not exist in $(HYPERPOD_CLI_REPO); set hyperpod.dependency_chart.revision in $(CONFIG) to a full commit id of that repository" >&2; \
	  rm -rf $(HYPERPOD_CLI_DIR); exit 1; }
	git -C $(HYPERPOD_CLI_DIR) checkout --quiet --detach $(HYPERPOD_CLI_REV)

clean:
	rm -rf cdk.out $(VENV) node_modules .pytest_cache .mypy_cache
