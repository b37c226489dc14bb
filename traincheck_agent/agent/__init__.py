"""In-process agent: decides at startup whether to instrument this process, then runs there."""
