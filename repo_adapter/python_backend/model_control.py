"""``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready``.

They work only when the serving layer installed a model repository hook
(:func:`repo_adapter.python_backend.runtime.set_model_repository_hook`), as Triton allows them
only in explicit model-control mode; otherwise they raise a ``TritonModelException``.
"""

from __future__ import annotations

import inspect
from typing import Any

from repo_adapter.errors import InferenceServerError
from repo_adapter.python_backend import runtime
from repo_adapter.python_backend.triton_error import TritonModelException


def _call_hook(method: str, *args: Any) -> Any:
    hook = runtime.get_model_repository_hook()
    if hook is None:
        raise TritonModelException(
            f"pb_utils.{method}() is not supported in this mode: model control from a Python "
            "model needs the server to run in explicit model-control mode"
        )
    try:
        result = getattr(hook, method)(*args)
        if inspect.isawaitable(result):
            awaitable = result

            async def wait() -> Any:
                return await awaitable

            result = runtime.run_blocking(wait, f"pb_utils.{method}()")
    except InferenceServerError as err:
        raise TritonModelException(err.message) from None
    except runtime.LoopUnavailableError as err:
        raise TritonModelException(str(err)) from None
    return result


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name``.

    Args:
        model_name: The model to load.
        config: Optional JSON model configuration overriding config.pbtxt.
        files: Optional ``"file:<version>/<name>"`` -> content overrides (needs ``config``).

    Raises:
        TritonModelException: when model control is unavailable or the load fails.
    """
    if files and not config:
        raise TritonModelException("'files' requires 'config' to be set as well")
    _call_hook("load_model", model_name, config, files)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload ``model_name`` (and, with ``unload_dependents``, the models that use it).

    Raises:
        TritonModelException: when model control is unavailable or the unload fails.
    """
    _call_hook("unload_model", model_name, unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether ``model_name`` (``model_version``; "" for any) is ready.

    Raises:
        TritonModelException: when model control is unavailable.
    """
    return bool(_call_hook("is_model_ready", model_name, str(model_version)))
