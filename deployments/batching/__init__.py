"""Triton's dynamic batching on Ray Serve's ``@serve.batch``.

``policy`` turns a model config into batching rules, ``queue`` holds admitted requests and
forms batches exactly as Triton's dynamic batcher does, ``batcher`` glues ``@serve.batch``
admission to one executor per model instance.
"""

from deployments.batching.batcher import DynamicBatcher
from deployments.batching.policy import BatchPolicy

__all__ = ["BatchPolicy", "DynamicBatcher"]
