"""The workspace's alert manager definition: every alert to the environment's SNS topic (AMP's alert manager sends
to SNS only, signing with SigV4 in the workspace's region)."""

from __future__ import annotations

import yaml

from kvtiers.observability.scrape import ENDPOINT


def alertmanager_definition(topic_arn: str, region: str, environment: str) -> str:
    config = {
        "route": {
            "receiver": "sns",
            "group_by": ["alertname", ENDPOINT],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
        "receivers": [
            {
                "name": "sns",
                "sns_configs": [
                    {
                        "topic_arn": topic_arn,
                        "sigv4": {"region": region},
                        "attributes": {"environment": environment},
                    }
                ],
            }
        ],
    }
    return yaml.safe_dump({"alertmanager_config": yaml.safe_dump(config, sort_keys=False)}, sort_keys=False)
