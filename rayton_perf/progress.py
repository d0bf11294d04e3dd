"""Progress display on stderr while a run measures.

On a terminal one status line is rewritten in place (``\\r``); otherwise (CI logs, pipes)
status updates become plain lines at most every ``interval_s`` seconds, and milestones
(finished windows) are printed as lines, so a log shows the run advancing without being
flooded.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


class Progress:
    """Status line (TTY) or periodic log lines (not a TTY).

    Args:
        stream: where to write; stderr by default so stdout stays perf_analyzer-like.
        enabled: False makes every call a no-op (library use, tests).
        interval_s: least time between two status lines when the stream is not a TTY.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool = True, interval_s=5.0):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.interval_s = interval_s
        try:
            self.is_tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.is_tty = False
        self._width = 0
        self._last_line = float("-inf")

    def status(self, text: str) -> None:
        """A transient update: rewritten in place on a TTY, rate-limited lines otherwise."""
        if not self.enabled:
            return
        if self.is_tty:
            # A line longer than the terminal wraps, and "\r" then cannot rewrite it.
            text = text[: max(20, shutil.get_terminal_size().columns - 1)]
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._width = len(text)
            return
        now = time.monotonic()
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            self._write_line(text)

    def line(self, text: str) -> None:
        """A lasting message (e.g. a finished window): always printed on its own line."""
        if not self.enabled:
            return
        self.clear()
        self._write_line(text)
        # A window line counts as an update, so the next status line is due later.
        self._last_line = time.monotonic()

    def event(self, text: str) -> None:
        """A milestone (e.g. a finished window): the status line on a TTY, a line otherwise.

        On a terminal the display stays one updating line; in a log every milestone shows.
        """
        if self.is_tty:
            self.status(text)
        else:
            self.line(text)

    def clear(self) -> None:
        """Remove the status line (TTY) so normal output starts on a clean line."""
        if self.enabled and self.is_tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
