"""Conformance suite: rayton diffed against the reference Triton (see README section)."""
