"""The warm server's wire format (``gnnpipe warm``): a request is a 4-byte length sent with the
client's stdin, stdout and stderr (SCM_RIGHTS), then that many bytes of JSON; each reply is one
JSON line. JSON, not pickle: a request is data, never code."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

MAX_REQUEST = 16 * 2**20  # bytes: an environment and a sys.path, far below this
_HEADER = struct.Struct("!I")


def interpreter() -> dict:
    """What must match between server and client besides the environment: the interpreter and
    the options it was started with (``-X importtime`` in a client is a reason to run cold)."""
    return {"executable": os.path.realpath(sys.executable), "prefix": sys.prefix,
            "exec_prefix": sys.exec_prefix, "version": sys.hexversion, "flags": list(sys.flags),
            "xoptions": {k: str(v) for k, v in sorted(sys._xoptions.items())},
            "warnoptions": list(sys.warnoptions)}


def send_request(sock: socket.socket, request: dict, fds: list[int]) -> None:
    payload = json.dumps(request).encode()
    socket.send_fds(sock, [_HEADER.pack(len(payload))], fds)
    sock.sendall(payload)


def receive_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The request and its three fds (the caller closes them); ValueError on a malformed one
    (its fds closed), OSError from the socket (a timeout too)."""
    header, fds, flags, _ = socket.recv_fds(conn, _HEADER.size, 3)
    try:
        if flags & socket.MSG_CTRUNC or len(fds) != 3:
            raise ValueError("a request carries stdin, stdout and stderr")
        header += _exactly(conn, _HEADER.size - len(header))
        (size,) = _HEADER.unpack(header)
        if size > MAX_REQUEST:
            raise ValueError(f"a request of {size} bytes")
        request = json.loads(_exactly(conn, size))
        if not isinstance(request, dict):
            raise ValueError("a request is a JSON object")
    except BaseException:
        for fd in fds:
            _close(fd)
        raise
    return request, fds


def reply(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def read_reply(stream) -> dict | None:
    """The next reply line from ``stream`` (``sock.makefile("rb")``); None at EOF."""
    line = stream.readline()
    return json.loads(line) if line else None


def _exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ValueError("the client hung up mid-request")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
