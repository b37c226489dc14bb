"""Invariant inference: relation templates that hypothesise invariants from clean traces,
collect passing and failing examples, and keep a hypothesis only with a precondition that
separates them."""
