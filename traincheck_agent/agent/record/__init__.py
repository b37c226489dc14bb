"""Recording: the call recorder and its argument descriptors, the state probe, the model
registry and its names, the training clock, and the trace writer."""
