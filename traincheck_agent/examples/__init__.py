"""Small training scripts bundled for the demo and the benchmarks (CPU, synthetic data)."""
