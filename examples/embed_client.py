#!/usr/bin/env python
"""Embed sentences with the example's real model and print their cosine similarities.

Usage::

    python examples/embed_client.py [-m text_embedding] [-u 127.0.0.1:8000] [-i http|grpc]
                                    "a sentence" "another one" [...]

Sends every sentence in one request to the ``text_embedding`` ensemble (tokenizer -> encoder
-> mean pooling; ``text_embedding_openvino`` runs the encoder on OpenVINO) and prints the
similarity of each pair. Only ``tritonclient`` and numpy are needed.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def embed(sentences: list[str], model: str, url: str, protocol: str) -> np.ndarray:
    if protocol == "grpc":
        import tritonclient.grpc as client_module
    else:
        import tritonclient.http as client_module
    client = client_module.InferenceServerClient(url)
    text = np.array([[s.encode("utf-8")] for s in sentences], dtype=np.object_)
    tensor = client_module.InferInput("TEXT", list(text.shape), "BYTES")
    tensor.set_data_from_numpy(text)
    return client.infer(model, [tensor]).as_numpy("EMBEDDING")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("-m", "--model", default="text_embedding")
    parser.add_argument("-u", "--url", default=None, help="default 127.0.0.1:8000 (gRPC :8001)")
    parser.add_argument("-i", "--protocol", choices=("http", "grpc"), default="http")
    args = parser.parse_args(argv)
    url = args.url or ("127.0.0.1:8001" if args.protocol == "grpc" else "127.0.0.1:8000")
    vectors = embed(args.sentences, args.model, url, args.protocol)
    print(f"{len(args.sentences)} sentences, {vectors.shape[1]}-dimensional embeddings")
    for i, first in enumerate(args.sentences):
        for j in range(i + 1, len(args.sentences)):
            similarity = float(vectors[i] @ vectors[j])
            print(f"{similarity:7.4f}  {first!r} ~ {args.sentences[j]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
