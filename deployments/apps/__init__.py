"""The Serve wiring: rayton's Serve deployments and the applications built from a repository.

Everything that needs Ray Serve lives here (deployments, ``@serve.batch`` admission,
deployment handles, BLS on handles, the builders behind ``serve_config.yaml``); the layers
below (:mod:`deployments.core`, the transports, :mod:`repo_adapter`) do not import Ray Serve.
"""
