"""The transport-neutral core: what a served model is, and how requests run through it.

Ray-free and unit-tested without Serve. :class:`~deployments.core.served_model.ServedModel` is
the interface the transports use; :mod:`~deployments.core.single_model` and
:mod:`~deployments.core.ensemble_model` implement it; :mod:`~deployments.core.server_core`
answers the server-wide protocol; :mod:`~deployments.core.batching` is Triton's dynamic
batcher. What they record (statistics, traces) is :mod:`deployments.observability`'s.
"""
