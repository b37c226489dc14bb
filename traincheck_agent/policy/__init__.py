"""Policies: which APIs are wrapped and which state is snapshotted, read from YAML files."""

from traincheck_agent.policy.loader import PolicyError, load_policies
from traincheck_agent.policy.model import ApiRule, Policy, Sampling, StateRule

__all__ = ["ApiRule", "Policy", "PolicyError", "Sampling", "StateRule", "load_policies"]
