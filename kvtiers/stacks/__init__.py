"""Deployable stacks. Each only composes constructs from ``kvtiers.constructs`` and ``kvtiers.k8s_charts``."""
