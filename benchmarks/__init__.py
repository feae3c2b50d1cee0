"""Benchmarks of sktensor_fast (run ``python -m benchmarks --help``)."""
