"""Trace files: the record schema, the tolerant reader and summaries."""
