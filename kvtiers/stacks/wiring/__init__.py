"""The adapter from the environment config to props: the only code that reads a validated
:class:`kvtiers.config.schema.Environment` and turns it into the keyword arguments of the constructs
(``kvtiers.constructs``) and charts (``kvtiers.k8s_charts``), which import nothing from ``kvtiers.config``."""
