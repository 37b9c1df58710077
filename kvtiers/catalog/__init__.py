"""The facts kvtiers knows, free of CDK, cdk8s and pydantic: the construct library, the environment schema, the CLI
and the Makefile all read them without loading anything else.

- :mod:`kvtiers.catalog.versions`: the serving version matrix (which vLLM and LMCache each pinned image carries); the
  Makefile runs it by path to learn the LMCache versions the contract tests install;
- :mod:`kvtiers.catalog.kubernetes`: the Kubernetes versions kvtiers knows, with their EKS support dates;
- :mod:`kvtiers.catalog.instance_types`: the HyperPod G6e instance sizes;
- :mod:`kvtiers.catalog.models`: the shapes of the models the sizing knows;
- :mod:`kvtiers.catalog.aws_limits`: limits AWS enforces at deploy time that synth checks first;
- :mod:`kvtiers.catalog.platform_defaults`, :mod:`kvtiers.catalog.serving_defaults`,
  :mod:`kvtiers.catalog.curvine_defaults`: the defaults of the platform constructs, of the serving library and of
  the Curvine L2, each the one home of its value.

Its modules import only the standard library and each other (tests/test_architecture.py).
"""
