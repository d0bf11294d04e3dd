"""Command-line flags generated from settings models, and parsed back into them.

A field marked :class:`~deployments.command_flag.Flag` becomes one argparse flag: its name
from the field's, its help from the field's ``description``, ``true``/``false`` choices for a
bool, a ``Literal``'s values as choices, a repeatable flag for a list. A field whose type is
itself a settings model contributes that model's flags. Flags left out keep no value in the
parsed namespace (``argparse.SUPPRESS``), so the model's own defaults apply and pydantic
validates what was given: the settings model is the one definition of each flag.
"""

from __future__ import annotations

import argparse
import functools
import sys
import types
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from deployments.command_flag import Flag

Settings = TypeVar("Settings", bound=BaseModel)

_BOOLEAN_CHOICES = ("true", "false")  # Triton's spelling; pydantic reads them as bools


def add_settings_command(
    commands: argparse._SubParsersAction,
    name: str,
    summary: str,
    model: type[Settings],
    run: Callable[[Settings], int],
) -> None:
    """The subcommand ``name`` (``summary``: its line in ``rayton --help``), whose flags are
    ``model``'s: ``run`` is given the validated settings (a value the model refuses ends the
    command first: its message, exit status 2)."""
    parser = commands.add_parser(name, help=summary)
    add_flags(parser, model)
    parser.set_defaults(func=functools.partial(_run_with_settings, model, run))


def add_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """Add a flag to ``parser`` for each field of ``model`` (and of its nested settings models)
    that is marked :class:`Flag`."""
    for name, field in model.model_fields.items():
        nested = _settings_model(field)
        if nested is not None:
            add_flags(parser, nested)
            continue
        flag = _flag(field)
        if flag is not None:
            _add_flag(parser, name, field, flag)


def settings_from_flags(model: type[Settings], args: argparse.Namespace) -> Settings:
    """The settings the parsed flags give, validated by ``model``.

    Raises:
        ValidationError: a value the model refuses (:func:`validation_message` says why).
    """
    return model.model_validate(_given(model, args))


def validation_message(err: ValidationError, model: type[BaseModel]) -> str:
    """The problems ``err`` found, as one line a user reads: a check's own message, else the
    flag (or field) and what pydantic expected."""
    problems = []
    for error in err.errors():
        if error["type"] == "value_error":
            problems.append(str(error["ctx"]["error"]))
        else:
            problems.append(f"{_flag_name_at(model, error['loc'])}: {error['msg']}")
    return "; ".join(problems)


def _flag_name(name: str, field: FieldInfo) -> str:
    """The flag a field is on the command line (its name when it is positional or no flag)."""
    flag = _flag(field)
    if flag is None or flag.positional:
        return name
    return flag.name or "--" + name.replace("_", "-")


def _run_with_settings(
    model: type[Settings], run: Callable[[Settings], int], args: argparse.Namespace
) -> int:
    try:
        settings = settings_from_flags(model, args)
    except ValidationError as err:
        print(f"error: {validation_message(err, model)}", file=sys.stderr)
        return 2
    return run(settings)


def _add_flag(parser: argparse.ArgumentParser, name: str, field: FieldInfo, flag: Flag) -> None:
    options: dict[str, Any] = {"help": field.description, "metavar": flag.metavar}
    value_type = _without_none(field.annotation)
    if get_origin(value_type) is list:
        options["action"] = "append"
        (value_type,) = get_args(value_type)
    if value_type is bool:
        options["choices"] = _BOOLEAN_CHOICES
    elif get_origin(value_type) is Literal:
        options["choices"] = get_args(value_type)
    elif value_type in (int, float):
        options["type"] = value_type  # argparse's own message for a malformed number
    if flag.positional:
        parser.add_argument(name, **options)
        return
    names = [flag.short] if flag.short else []
    names.append(_flag_name(name, field))
    if field.is_required():
        options["required"] = True
    parser.add_argument(*names, dest=name, default=argparse.SUPPRESS, **options)


def _given(model: type[BaseModel], args: argparse.Namespace) -> dict[str, Any]:
    """The values of ``model``'s fields that the command line gave, nested as the model is."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        nested = _settings_model(field)
        if nested is not None:
            values[name] = _given(nested, args)
        elif _flag(field) is not None and hasattr(args, name):
            values[name] = getattr(args, name)
    return values


def _flag_name_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """The flag of the field at ``loc`` in ``model`` (the location itself if none)."""
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            break
        nested = _settings_model(field)
        if nested is None:
            return _flag_name(str(part), field)
        model = nested
    return ".".join(str(part) for part in loc)


def _flag(field: FieldInfo) -> Flag | None:
    return next((item for item in field.metadata if isinstance(item, Flag)), None)


def _settings_model(field: FieldInfo) -> type[BaseModel] | None:
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _without_none(annotation: Any) -> Any:
    """``X`` of ``X | None`` (an optional flag's value type)."""
    if get_origin(annotation) in (Union, types.UnionType):
        (inner,) = [arg for arg in get_args(annotation) if arg is not type(None)]
        return inner
    return annotation
