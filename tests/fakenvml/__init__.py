"""A fake libnvidia-ml.so.1 (C, built with gcc) and helpers to drive it from tests."""
