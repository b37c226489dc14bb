"""Which recorded APIs initialise tensors: the agent marks the calls made inside one, and
inference judges initialisers as one family (see DistinctArgument)."""

from __future__ import annotations

_TENSOR_FILLS = frozenset({"torch.Tensor.normal_", "torch.Tensor.uniform_", "torch.Tensor.zero_", "torch.Tensor.fill_"})


def is_initialiser(api: str) -> bool:
    """Whether ``api`` overwrites a tensor with fresh values, whatever it held."""
    return api.startswith("torch.nn.init.") or api in _TENSOR_FILLS


def is_default_initialisation(api: str) -> bool:
    """Whether ``api`` is a layer's own (re)initialisation of its parameters."""
    return api.endswith((".reset_parameters", "._reset_parameters"))


def initialises(api: str) -> bool:
    """Whether the calls made inside ``api`` are part of one initialisation: an initialiser's
    own fills (``kaiming_normal_`` calls ``normal_``), a layer's ``reset_parameters``."""
    return is_initialiser(api) or is_default_initialisation(api)
