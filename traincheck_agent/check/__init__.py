"""Checking runs against invariants: online in the training process, offline on traces."""
