"""Writes Triton's trace file from the traces the replicas ship (the controller runs one).

Triton's layout: with ``log_frequency`` N > 0, every N traces go to ``<trace_file>.<i>``
(i = 0, 1, ...), each a JSON array of trace entries; with 0, all traces go to ``<trace_file>``.
Triton writes that single file when it exits; here it is kept a complete JSON array on disk as
traces arrive (appended in place, before its closing bracket), so it can be read while serving
and survives a stopped controller. Trace ids are renumbered 1, 2, ... in arrival order, and a
child's ``parent_id`` names its parent's number (replicas know traces by cluster-wide keys).
Ray-free.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from repo_adapter.request_trace import TraceEvent, TraceRecord, trace_events

logger = logging.getLogger(__name__)

# Traces whose ids are remembered, for children that arrive later (a bounded memory).
REMEMBERED_TRACES = 100_000


def forget_oldest(keys: dict[str, Any], limit: int = REMEMBERED_TRACES) -> None:
    """Drop the oldest half of ``keys`` once it holds more than ``limit`` (insertion order)."""
    if len(keys) > limit:
        for key in list(keys)[: limit // 2]:
            del keys[key]


class TraceFileWriter:
    """One trace file (and its numbered parts)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._ids: dict[str, int] = {}
        self._last_id = 0
        self._pending: list[list[TraceEvent]] = []  # traces of the next numbered part
        self._next_part = 0
        self._single_started = False

    def _id(self, key: str) -> int:
        found = self._ids.get(key)
        if found is None:
            self._last_id += 1
            found = self._ids[key] = self._last_id
            forget_oldest(self._ids)
        return found

    def write(self, records: list[TraceRecord], log_frequency: int) -> None:
        """Write ``records`` (``RequestTrace.to_record``) as ``log_frequency`` says."""
        traces = []
        for record in records:
            parent = record.get("parent_key") or ""
            parent_id = self._id(parent) if parent else None
            traces.append(trace_events(record, self._id(record["key"]), parent_id))
        try:
            if log_frequency > 0:
                self._pending.extend(traces)
                while len(self._pending) >= log_frequency:
                    part, self._pending = (
                        self._pending[:log_frequency],
                        self._pending[log_frequency:],
                    )
                    self._write_part(part)
            else:
                self.flush()  # traces of an earlier frequency first
                self._append_single([event for trace in traces for event in trace])
        except OSError as err:  # a bad path must not fail the controller
            logger.error("cannot write the trace file %s: %s", self.path, err)

    def flush(self) -> None:
        """Write the traces of an unfinished numbered part (the frequency changed, or the
        server stops), as Triton does."""
        if self._pending:
            part, self._pending = self._pending, []
            self._write_part(part)

    def _write_part(self, traces: list[list[TraceEvent]]) -> None:
        events = [event for trace in traces for event in trace]
        path = f"{self.path}.{self._next_part}"
        self._next_part += 1
        with open(path, "w", encoding="utf-8") as out:
            json.dump(events, out, separators=(",", ":"))

    def _append_single(self, events: list[TraceEvent]) -> None:
        if not events:
            return
        body = ",".join(json.dumps(e, separators=(",", ":")) for e in events)
        if not self._single_started or not os.path.exists(self.path):
            with open(self.path, "w", encoding="utf-8") as out:
                out.write(f"[{body}]")
            self._single_started = True
            return
        with open(self.path, "r+b") as out:
            out.seek(-1, os.SEEK_END)  # over the closing bracket
            out.write(f",{body}]".encode())
