"""Triton's gRPC protocol (``inference.GRPCInferenceService``) for rayton.

* :mod:`deployments.grpc.codec`: protobuf messages <-> ``InferRequest`` / ``InferResponse``
  and the JSON documents the HTTP frontend serves;
* :mod:`deployments.grpc.servicer`: every RPC, forwarded to the model deployments;
* :mod:`deployments.grpc.model_infer`: ``ModelInfer`` on the model's replica, from the
  request's wire bytes to the response's;
* :mod:`deployments.grpc.deployment`: the ``rayton-grpc`` application whose replica runs the
  ``grpc.aio`` server (``build_grpc_app``).
"""
