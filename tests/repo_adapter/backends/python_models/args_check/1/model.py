"""Returns the initialize args (with their types) as a JSON string."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.types = {key: type(value).__name__ for key, value in args.items()}
        self.model_dir = pb_utils.get_model_dir()
        weights = os.path.join(args["model_repository"], args["model_version"], "weights.txt")
        with open(weights) as f:
            self.weights = f.read().strip()

    def execute(self, requests):
        payload = json.dumps(
            {
                "args": self.args,
                "types": self.types,
                "model_dir": self.model_dir,
                "weights": self.weights,
                "parameters": [json.loads(r.parameters()) for r in requests],
                "request_ids": [r.request_id() for r in requests],
                "correlation_ids": [r.correlation_id() for r in requests],
                "flags": [r.flags() for r in requests],
                "timeouts": [r.timeout() for r in requests],
                "requested": [r.requested_output_names() for r in requests],
            }
        )
        out = pb_utils.Tensor("ARGS", np.array([payload.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
