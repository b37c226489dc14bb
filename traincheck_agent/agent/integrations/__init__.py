"""What the agent knows of each framework: one module per framework, with its module name,
its probes, its wrapper classes and its ``install``."""
