"""``pb_utils.ModelConfig``: the object ``TritonPythonModel.auto_complete_config`` edits.

It wraps the model configuration as the JSON dictionary Triton renders (``/config`` shape). Only
the batch size, the scheduler, inputs, outputs and the transaction policy can be changed, and
every method refuses, with ``ValueError`` as in Triton, to contradict what config.pbtxt says.
"""

from __future__ import annotations

import copy
import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


class ModelConfig:
    """A model configuration under auto-completion.

    Args:
        model_config: The configuration as a JSON string (what Triton passes) or a dict
            (copied).
    """

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        if isinstance(model_config, str):
            self._model_config: dict[str, Any] = json.loads(model_config)
        else:
            self._model_config = copy.deepcopy(dict(model_config))

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        """The configuration dictionary (treat it as read-only)."""
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size``.

        Raises:
            ValueError: when the configuration already specifies a larger value.
        """
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher, unless another scheduler is configured.

        Raises:
            ValueError: when ``sequence_batching`` or ``ensemble_scheduling`` is set.
        """
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        """Add an input, or complete the config.pbtxt input of the same name.

        Args:
            input: ``name``, ``data_type`` (``"TYPE_FP32"``...), ``dims`` and optionally
                ``optional``.

        Raises:
            ValueError: for unknown or missing properties, or a definition that contradicts
                the existing one (data type, dims, optional).
        """
        self._check_tensor("input", input, _INPUT_PROPERTIES)
        existing = self._find("input", input["name"])
        if existing is None:
            self._model_config.setdefault("input", []).append(dict(input))
            return
        self._check_same_tensor("input", existing, input)
        if (
            "optional" in existing
            and "optional" in input
            and bool(existing["optional"]) != bool(input["optional"])
        ):
            raise ValueError(
                f"model '{self._name}', tensor '{input['name']}': the model expects optional "
                f"{input['optional']} but the model configuration specifies optional "
                f"{existing['optional']}"
            )
        existing["data_type"] = input["data_type"]
        existing["dims"] = list(input["dims"])
        if "optional" in input:
            existing["optional"] = input["optional"]

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output, or complete the config.pbtxt output of the same name.

        Args:
            output: ``name``, ``data_type`` and ``dims``.

        Raises:
            ValueError: for unknown or missing properties, or a definition that contradicts
                the existing one (data type, dims).
        """
        self._check_tensor("output", output, _OUTPUT_PROPERTIES)
        existing = self._find("output", output["name"])
        if existing is None:
            self._model_config.setdefault("output", []).append(dict(output))
            return
        self._check_same_tensor("output", existing, output)
        existing["data_type"] = output["data_type"]
        existing["dims"] = list(output["dims"])

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (only ``decoupled`` is settable).

        Raises:
            ValueError: for other properties, or a ``decoupled`` value that contradicts the
                configuration.
        """
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

    def _find(self, kind: str, name: str) -> dict[str, Any] | None:
        for tensor in self._model_config.get(kind, []):
            if tensor.get("name") == name:
                return tensor
        return None

    def _check_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        if not isinstance(tensor, dict):
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' must be a "
                f"dict, found {type(tensor).__name__}"
            )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' is missing "
                "'name' property."
            )
        extra = [key for key in tensor if key not in allowed]
        if extra:
            listed = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
            raise ValueError(
                f"{kind} '{tensor['name']}' in auto-complete-config function for model "
                f"'{self._name}' contains property other than {listed}."
            )
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{key}' property."
                )

    def _check_same_tensor(self, kind: str, existing: dict[str, Any], new: dict[str, Any]) -> None:
        current_type = existing.get("data_type", "TYPE_INVALID")
        if current_type != "TYPE_INVALID" and current_type != new["data_type"]:
            raise ValueError(
                f"unable to load model '{self._name}', configuration expects datatype "
                f"{current_type} for {kind} '{new['name']}', model provides {new['data_type']}"
            )
        current_dims = [int(d) for d in existing.get("dims", [])]
        if current_dims and current_dims != [int(d) for d in new["dims"]]:
            raise ValueError(
                f"model '{self._name}', tensor '{new['name']}': the model expects dims "
                f"{list(new['dims'])} but the model configuration specifies dims {current_dims}"
            )
