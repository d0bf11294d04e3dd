"""Triton's HTTP/REST protocol: routes, body codec (JSON + binary tensor extension),
compression. The public codec API is :mod:`deployments.http.codec`."""
