"""The adapter between the environment file and the construct library: the only code that reads the environment
config (:mod:`kvtiers.config`) and turns it into the props of the constructs and charts. The stacks, ``kvtiers plan``,
``kvtiers verify`` and the observability configuration call these functions, so each value is derived once."""
