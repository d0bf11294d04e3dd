"""Harness code shared by the tests and the benchmarks (never shipped): ports, process sessions."""
