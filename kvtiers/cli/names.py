"""Names of the deployed objects ``kvtiers verify`` looks for: the contract with the charts, in one place."""

from __future__ import annotations

from kvtiers.k8s_charts.curvine_l2.props import CSI_NODE, MASTER, WORKER

# Curvine (namespace: ``env.curvine.namespace``): the names the Curvine charts give their workloads.
CURVINE_MASTER_STATEFULSET = MASTER
CURVINE_WORKER_DAEMONSET = WORKER
CURVINE_CSI_NODE_DAEMONSET = CSI_NODE
CURVINE_MASTER_OVERVIEW_PATH = "api/overview"
"""Curvine master web route (curvine-master/src/master/router_handler.rs); ``master_state`` is ``Active`` on the
Raft leader, ``Standby`` on followers (master_monitor.rs ``journal_state``)."""
CURVINE_MASTER_BROWSE_PATH = "api/browse"
"""``?path=``: the FileStatus list of a directory (same file; ``path``, ``is_dir``, ``mtime`` in milliseconds)."""
CURVINE_MASTER_BLOCKS_PATH = "api/block_locations"
"""``?path=``: FileBlocks of a file; ``block_locs[].locs[].hostname`` is the worker's advertised hostname."""
CURVINE_LEADER_STATE = "Active"
