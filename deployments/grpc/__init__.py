"""Triton's gRPC protocol (``inference.GRPCInferenceService``) for rayton.

* :mod:`deployments.grpc.codec`: protobuf messages <-> ``InferRequest`` / ``InferResponse``
  and the JSON documents the HTTP frontend serves;
* :mod:`deployments.grpc.routing`: the model name and version of a serialized
  ``ModelInferRequest``, read without parsing its tensors;
* :mod:`deployments.grpc.servicer`: every RPC, answered from a ``ServerCore``;
* :mod:`deployments.grpc.model_infer`: ``ModelInfer`` on the model's replica, from the
  request's wire bytes to the response's;
* :mod:`deployments.grpc.server`: the ``grpc.aio`` server (the ``rayton-grpc`` application's
  replica runs it: :mod:`deployments.apps.grpc_deployment`).
"""
