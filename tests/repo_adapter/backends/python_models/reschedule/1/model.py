"""Reschedules every request once; answers with how many times it was executed."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.request_id()
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                count = np.array([self.seen[key]], np.float32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", count)]))
        return responses
