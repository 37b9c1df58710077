"""The adapter from the environment config (:mod:`kvtiers.config`) to the constructs' and charts' inputs: the only
code that reads an :class:`~kvtiers.config.schema.Environment` to build props. ``kvtiers.constructs`` and
``kvtiers.k8s_charts`` never import the config."""
