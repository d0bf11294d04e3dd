"""Triton's dynamic batching, Ray-free.

``policy`` turns a model config into batching rules, ``queue`` holds admitted requests and
forms batches exactly as Triton's dynamic batcher does, ``batcher`` runs them on one executor
per model instance, behind an admission stage where one is given (``@serve.batch`` in a
replica started with ``--batch-admission serve-batch``: :mod:`deployments.apps.batch_admission`),
and ``scheduling`` decides where each batch runs
(inline on the event loop, or on the instance's own thread).
"""

from deployments.core.batching.batcher import AdmissionFactory, DynamicBatcher
from deployments.core.batching.policy import BatchPolicy

__all__ = ["AdmissionFactory", "BatchPolicy", "DynamicBatcher"]
