# kvtiers: two set-up commands, `make synth` and `make test`, work on a fresh clone (PyPI + npm registries only).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk
CONFIG ?= config/dev.yaml
HYPERPOD_CLI_REPO ?= https://github.com/aws/sagemaker-hyperpod-cli
# The revision the environment file pins (read through the schema, so its default applies and a model's own
# `revision:` can never be taken for it).
HYPERPOD_CLI_REV ?= $(shell $(PY) -c 'import sys; from kvtiers.config import load_environment; print(load_environment(sys.argv[1]).hyperpod.dependency_chart.revision)' $(CONFIG))
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: synth test install bench-synth hyperpod-chart hyperpod-chart-checkout clean lint-templates

install: $(VENV)/.installed node_modules/.installed

# LMCache at exactly the versions the version matrix names (kvtiers/config/versions.py, read by path), one venv per
# version, without dependencies: the contract tests run LMCache's config loader and controller message classes, which
# need only these few packages (and a stand-in torch from tests/stubs). They must not disturb the project's pins.
LMCACHE_VERSIONS := $(shell $(PYTHON) kvtiers/config/versions.py)
LMCACHE_VENVS := $(foreach v,$(LMCACHE_VERSIONS),.venv-lmcache-$(v)/.installed)
.venv-lmcache-%/.installed: kvtiers/config/versions.py
	$(PYTHON) -m venv .venv-lmcache-$*
	.venv-lmcache-$*/bin/pip install --quiet --disable-pip-version-check --no-deps lmcache==$*
	.venv-lmcache-$*/bin/pip install --quiet --disable-pip-version-check pyyaml==6.0.2 msgspec==0.19.0 pyzmq==27.1.0
	touch $@

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 needed, found {sys.version.split()[0]}"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
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
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(HYPERPOD_SDK) sagemaker-hyperpod==3.12.0
	touch $@

# checkov (the independent scanner of tests/test_checkov.py) in its own venv: it pins older boto3/botocore than
# requirements.txt, so pip cannot install both into one environment.
.venv-checkov/.installed: requirements-checkov.txt
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

test: install $(LMCACHE_VENVS) $(HYPERPOD_SDK)/.installed .venv-checkov/.installed
	$(PY) -m pytest -n 2 --dist loadfile

## Median time of `python app.py` for the default environment against a bare one-stack CDK app, alternating.
bench-synth: install
	$(PY) tools/bench_synth.py --runs 5 --endpoints

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
	rm -rf cdk.out $(VENV) node_modules .pytest_cache
