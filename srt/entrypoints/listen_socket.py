"""The HTTP listening socket, bound before anything slow starts.

Binding first turns "address already in use" into a message within a second, naming the process
that holds the port when it can be found, instead of a traceback after the model has loaded. The
bound socket is then handed to uvicorn, so nothing can take the port in between.
"""

from __future__ import annotations

import errno
import socket
from typing import Optional

import psutil


class PortInUseError(RuntimeError):
    pass


def bind_listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(_in_use_message(host, port)) from None
        raise PortInUseError(
            f"Cannot listen on {host}:{port}: {e.strerror}. Check --host and --port."
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _in_use_message(host: str, port: int) -> str:
    holder = _port_holder(port)
    who = f" by {holder}" if holder else ""
    return (
        f"Port {port} on {host} is already in use{who}. Stop that process, or start this server on "
        f"another port with --port (for example --port {port + 1})."
    )


def _port_holder(port: int) -> Optional[str]:
    """'PID 123 (python3 -m ...)' of the process listening on the port, if this user may see it."""
    try:
        for conn in psutil.net_connections(kind="inet"):
            if (
                conn.laddr
                and conn.laddr.port == port
                and conn.status == psutil.CONN_LISTEN
                and conn.pid
            ):
                try:
                    cmd = " ".join(psutil.Process(conn.pid).cmdline()[:4])
                except psutil.Error:
                    cmd = "?"
                return f"PID {conn.pid} ({cmd})"
    except (psutil.Error, OSError):
        pass
    return None
