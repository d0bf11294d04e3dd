"""execute() always raises."""


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("model exploded")
