"""Relation templates, one module each."""
