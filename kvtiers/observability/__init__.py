"""Observability: the metric names kvtiers reads (metrics.py), how the managed collector scrapes them (scrape.py),
the recording and alert rules (rules.py), the alert manager definition (alertmanager.py) and the dashboard
(dashboard.py). Everything is generated from the environment; the AWS resources are in
``kvtiers.constructs.observability``."""
