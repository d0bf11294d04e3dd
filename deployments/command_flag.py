"""The marker that makes a settings field a ``rayton`` command-line flag.

Below every settings model (the server's, the metrics endpoint's, the commands' own), so each
model can mark its fields where they are defined: ``deployments/cli/flags.py`` turns the
marked fields into argparse flags and parses them back into the model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """Marks a settings field as a ``rayton`` command-line flag (``Annotated`` metadata).

    The flag's help is the field's ``description``; its default, type and choices come from
    the field itself (``deployments/cli/flags.py`` turns the fields into argparse flags).
    """

    name: str = ""  # "": ``--`` and the field's name with dashes
    short: str = ""  # a one-letter alias, such as ``-o``
    metavar: str | None = None
    positional: bool = False
