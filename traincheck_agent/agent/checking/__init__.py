"""Check mode inside the training process: loading the invariants, the sink that hands each
step's records to the checker, and the checker's own process."""
