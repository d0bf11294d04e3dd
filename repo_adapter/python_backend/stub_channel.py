"""The byte channel between a python model's host and its stub process.

A Unix stream socket carries messages both ways. A message is pickled with protocol 5 and
its large buffers (tensor data) travel out of band, never copied into the pickle: through
the sender's shared-memory arena where the channel has one, else on the socket after the
pickle. An arena holds one message's buffers at a time and the receiver copies them out as it
reads the message, so only a channel whose messages strictly alternate (one answer per
message, as the batch channel's) may have arenas. Sends are thread-safe; one thread
receives.
"""

from __future__ import annotations

import contextlib
import copyreg
import io
import mmap
import os
import pickle
import select
import socket
import struct
import threading
from typing import Any

import numpy as np

_COUNT = struct.Struct("<I")
_SIZE = struct.Struct("<Q")
_ON_SOCKET = (1 << 64) - 1  # the buffer's place: after the pickle on the socket
# Buffers below this size stay inside the pickle (a separate buffer costs more than a copy):
# on the socket, and in an arena (a copy into shared memory costs little).
_OUT_OF_BAND_MIN_BYTES = 64 * 1024
_ARENA_MIN_BYTES = 4 * 1024
ARENA_BYTES = 64 << 20  # address space; pages are used only as large messages touch them


def _array_from_wire(data: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _array_to_wire(array: np.ndarray) -> tuple[Any, tuple[Any, ...]]:
    """Numeric arrays as their bytes, dtype and shape: a tenth of numpy's own pickling cost
    for the small tensors most requests carry."""
    if array.dtype.hasobject:
        return array.__reduce_ex__(5)  # BYTES tensors: numpy's own way
    contiguous = np.ascontiguousarray(array)
    return _array_from_wire, (pickle.PickleBuffer(contiguous), array.dtype.str, array.shape)


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[np.ndarray] = _array_to_wire


class ChannelClosedError(ConnectionError):
    """The other end closed the channel or died."""


class Arena:
    """A shared-memory region one end writes large buffers into and the other reads."""

    def __init__(self, fd: int) -> None:
        """The arena of memory file ``fd`` (this object owns the descriptor)."""
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.memory = mmap.mmap(fd, self.size)

    @classmethod
    def create(cls, name: str, size: int = ARENA_BYTES) -> Arena:
        """A new arena in a memory file, for a child process to open by its descriptor."""
        fd = os.memfd_create(name, 0)  # inheritable where passed (``pass_fds``)
        os.ftruncate(fd, size)
        return cls(fd)

    def close(self) -> None:
        """Unmap the arena and close its descriptor (once: a descriptor number closed twice
        may by then be another file's)."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        with contextlib.suppress(BufferError):  # a view still alive: unmapped at exit
            self.memory.close()
        with contextlib.suppress(OSError):
            os.close(fd)


class StubChannel:
    """Messages over one connected stream socket, large buffers through arenas if given
    (``send_arena`` written by this end, ``receive_arena`` by the other)."""

    def __init__(
        self,
        sock: socket.socket,
        send_arena: Arena | None = None,
        receive_arena: Arena | None = None,
    ) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._send_arena = send_arena
        self._receive_arena = receive_arena

    def send(self, message: Any, use_arena: bool = True) -> None:
        """Send one message; ``use_arena`` False keeps its buffers out of the arena (a
        message outside the channel's strict alternation, such as a call made during one).

        Raises:
            ChannelClosedError: the other end is gone.
        """
        views: list[memoryview] = []
        arena = self._send_arena if use_arena else None
        smallest = _OUT_OF_BAND_MIN_BYTES if arena is None else _ARENA_MIN_BYTES

        def out_of_band(buffer: pickle.PickleBuffer) -> bool:
            view = buffer.raw()
            if view.nbytes < smallest:
                return True  # keep it in the pickle
            views.append(view)
            return False

        stream = io.BytesIO()
        pickler = pickle.Pickler(stream, protocol=5, buffer_callback=out_of_band)
        pickler.dispatch_table = _DISPATCH
        pickler.dump(message)
        payload = stream.getbuffer()
        try:
            with self._send_lock:
                places = _place(views, arena)
                header = [_COUNT.pack(len(views)), _SIZE.pack(payload.nbytes)]
                for view, place in zip(views, places, strict=True):
                    header += [_SIZE.pack(view.nbytes), _SIZE.pack(place)]
                on_socket = [v for v, p in zip(views, places, strict=True) if p == _ON_SOCKET]
                _send_all(self._sock, [b"".join(header), payload, *on_socket])
        except OSError as err:
            raise ChannelClosedError(str(err)) from None

    def receive(self) -> Any:
        """The next message (blocks).

        Raises:
            ChannelClosedError: the other end closed the channel or died.
        """
        (count,) = _COUNT.unpack(self._read(_COUNT.size))
        fields = struct.unpack(f"<{1 + 2 * count}Q", self._read(_SIZE.size * (1 + 2 * count)))
        payload = self._read(fields[0])
        buffers = []
        for size, place in zip(fields[1::2], fields[2::2], strict=True):
            if place == _ON_SOCKET:
                buffers.append(self._read(size))
            else:
                assert self._receive_arena is not None, "a buffer in an arena this end lacks"
                # A copy: the arena holds the next message's buffers once this one is answered.
                with memoryview(self._receive_arena.memory) as arena:
                    buffers.append(bytearray(arena[place : place + size]))
        return pickle.loads(payload, buffers=buffers)

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        """Close this end (the other end's receive then fails)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for arena in (self._send_arena, self._receive_arena):
            if arena is not None:
                arena.close()

    def _read(self, size: int) -> bytearray:
        data = bytearray(size)
        view = memoryview(data)
        got = 0
        try:
            while got < size:
                try:
                    n = self._sock.recv_into(view[got:], size - got)
                except BlockingIOError:
                    _wait(self._sock, readable=True)
                    continue
                if n == 0:
                    raise ChannelClosedError("the other end closed the channel")
                got += n
        except OSError as err:
            raise ChannelClosedError(str(err)) from None
        return data


def _wait(sock: socket.socket, readable: bool) -> None:
    """Block until ``sock`` can be read (or written): an event loop that watches the socket
    makes it non-blocking, and a message is still read and written whole."""
    poller = select.poll()
    poller.register(sock, select.POLLIN if readable else select.POLLOUT)
    poller.poll()


def _place(views: list[memoryview], arena: Arena | None) -> list[int]:
    """Where each buffer travels: its offset in ``arena`` (written now), or on the socket
    (no arena, or no room left in it)."""
    places, used = [], 0
    for view in views:
        if arena is None or used + view.nbytes > arena.size:
            places.append(_ON_SOCKET)
            continue
        arena.memory[used : used + view.nbytes] = view
        places.append(used)
        used += view.nbytes
    return places


def _send_all(sock: socket.socket, parts: list[Any]) -> None:
    views = [memoryview(part).cast("B") for part in parts if len(memoryview(part).cast("B"))]
    while views:
        try:
            sent = sock.sendmsg(views)
        except BlockingIOError:
            _wait(sock, readable=False)
            continue
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]
