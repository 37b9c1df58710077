"""Stand-in for ``torch`` in the LMCache contract-test venvs: it only satisfies ``import torch`` and attribute
lookups made while LMCache's config and controller-message modules import (type annotations, ``torch.Size``).
Nothing here computes; a test that reached real tensor code would fail loudly on a placeholder."""


__version__ = "0+kvtiers.stub"
"""A string, as code probing torch's version expects (transformers 4.57 reads it when torch has no package metadata
and then treats torch as absent)."""


class _Placeholder:
    def __init__(self, *args, **kwargs):
        pass


def __getattr__(name: str):
    return type(name, (_Placeholder,), {})
