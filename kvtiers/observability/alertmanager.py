"""The workspace's alert manager definition: every alert to the environment's SNS topic (AMP's alert manager sends
to SNS only, signing with SigV4 in the workspace's region)."""

from __future__ import annotations

import yaml

from kvtiers.observability.rules import INHIBITED_WHILE_COLLECTOR_DOWN, WATCHDOG
from kvtiers.observability.scrape import ENDPOINT

UNFOLDED = 1_000_000
"""A YAML line width no line reaches."""
WATCHDOG_REPEAT = "5m"
"""How often the watchdog reaches SNS: the external dead-man's switch alerts when it has not for a few of these."""


def alertmanager_definition(topic_arn: str, region: str, environment: str) -> str:
    """Every alert to the topic; the watchdog on its own route, every :data:`WATCHDOG_REPEAT`, with the SNS message
    attribute ``watchdog=true`` (subscribe the dead-man's switch with a filter policy on it, and filter it out of
    the people's subscriptions); the per-target down alerts inhibited while the collector sends nothing."""

    def sns(**attributes: str) -> list[dict]:
        return [
            {
                "topic_arn": topic_arn,
                "sigv4": {"region": region},
                "attributes": {"environment": environment, **attributes},
            }
        ]

    config = {
        "route": {
            "receiver": "sns",
            "group_by": ["alertname", ENDPOINT],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                {
                    "matchers": [f'alertname="{WATCHDOG}"'],
                    "receiver": "sns-watchdog",
                    "group_wait": "0s",
                    "group_interval": "1m",
                    "repeat_interval": WATCHDOG_REPEAT,
                }
            ],
        },
        "receivers": [
            {"name": "sns", "sns_configs": sns()},
            {"name": "sns-watchdog", "sns_configs": sns(watchdog="true")},
        ],
        "inhibit_rules": [
            {
                "source_matchers": ['alertname="KvtiersMetricsCollectorDown"'],
                "target_matchers": [f'alertname=~"{"|".join(INHIBITED_WHILE_COLLECTOR_DOWN)}"'],
            }
        ],
    }
    # No line folding: the topic ARN is a token at synth, and folding would follow its text's length.
    inner = yaml.safe_dump(config, sort_keys=False, width=UNFOLDED)
    return yaml.safe_dump({"alertmanager_config": inner}, sort_keys=False, width=UNFOLDED)
