"""Turns a Triton model repository on disk into loaded, runnable models.

Independent of Ray: config parsing and normalisation (Triton's own protobuf schema),
repository scanning and version policies, and the model backends.
"""
