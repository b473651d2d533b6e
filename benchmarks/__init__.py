"""The OpenReg benchmark suite (entry point: benchmarks/run.py)."""
