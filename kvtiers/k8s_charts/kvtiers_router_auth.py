"""The router key check's name before kvtiers_api_auth: for router pods started by the previous release.

This file runs inside the router image, shipped in the router's ConfigMap beside ``kvtiers_api_auth.py``. The
ConfigMap is replaced in place by a deploy, and a router pod of the previous release that restarts (a crash, a node
drain, ``kubectl rollout undo``) still names ``--callbacks kvtiers_router_auth.callbacks``: it gets
``kvtiers_api_auth``'s ``callbacks`` through this module, so it starts, with the check in front of every route.
Remove it one release after kvtiers_api_auth (CHANGELOG, issue 25).
"""

from __future__ import annotations

from typing import Any

import kvtiers_api_auth  # type: ignore[import-not-found]  # the router's PYTHONPATH, not kvtiers


def __getattr__(name: str) -> Any:
    return getattr(kvtiers_api_auth, name)
