"""Performance benchmarks of trainbench itself (run from benchmarks/*.py, never from tests)."""
