"""The README's cost table is the cost model's, and the model adds up what the example environments run."""

from __future__ import annotations

import pytest

from kvtiers.config import load_environment
from kvtiers.config.cost import hourly_cost, markdown_table
from tests.synth import ROOT, SUPPORT_DATE


def test_the_readme_cost_table_is_the_models():
    estimates = tuple(
        hourly_cost(load_environment(ROOT / f"config/{name}.yaml"), on=SUPPORT_DATE) for name in ("dev", "prod")
    )
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- cost-table -->\n", 1)[1].split("\n<!-- /cost-table -->", 1)[0]
    assert table == markdown_table(estimates), "regenerate the README's cost table from kvtiers.config.cost"


def test_dev_costs_its_two_g6e_nodes_and_what_runs_beside_them():
    # By hand: 2 x ml.g6e.12xlarge at $13.12, 2 x m7i.xlarge at $0.2016, an EKS control plane in extended support
    # ($0.60), one NAT gateway ($0.045), 2 x 500 GB node volumes + 20 GiB meta + 50 GiB journal at $0.08/GB-month.
    expected = 2 * 13.12 + 2 * 0.2016 + 0.60 + 0.045 + (2 * 500 + 20 + 50) * 0.08 / 730
    assert hourly_cost(load_environment(ROOT / "config/dev.yaml"), on=SUPPORT_DATE).usd_per_hour == pytest.approx(
        expected
    )


def test_an_instance_type_without_a_price_is_named():
    env = load_environment(ROOT / "config/dev.yaml")
    nodegroup = env.eks.system_nodegroup.model_copy(update={"instance_type": "c7i.large"})
    env = env.model_copy(update={"eks": env.eks.model_copy(update={"system_nodegroup": nodegroup})})
    with pytest.raises(ValueError, match="no list price for EC2 instance c7i.large; known: m7i.2xlarge"):
        hourly_cost(env, on=SUPPORT_DATE)
