"""ZMQ sockets with high-water marks off, and the two wire formats (pickle default, msgpack)."""

from __future__ import annotations

import pickle
from typing import Any

import zmq


def make_socket(ctx: zmq.Context, kind: int, endpoint: str, bind: bool) -> zmq.Socket:
    sock = ctx.socket(kind)
    # No backpressure at the transport: a blocked send would stall the step loop.
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    if bind:
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock


def dumps(obj: Any, serializer: str = "pickle") -> bytes:
    if serializer == "msgpack":
        from sglang.srt.core.io_struct.codec import encode

        return encode(obj)
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes, serializer: str = "pickle") -> Any:
    if serializer == "msgpack":
        from sglang.srt.core.io_struct.codec import decode

        return decode(data)
    return pickle.loads(data)


def send_obj(sock: zmq.Socket, obj: Any, serializer: str = "pickle", flags: int = 0) -> None:
    sock.send(dumps(obj, serializer), flags=flags)


def recv_obj(sock: zmq.Socket, serializer: str = "pickle", flags: int = 0) -> Any:
    return loads(sock.recv(flags=flags), serializer)
