"""Ports for TF_CONFIG clusters of processes on localhost (multi-worker and parameter-server tests
and benchmarks)."""

import socket
from typing import List


def free_ports(count: int) -> List[int]:
    """`count` distinct TCP ports that were free on localhost a moment ago: each is bound to an
    ephemeral port at once (so the kernel hands out different ones) and released for the cluster's
    servers to bind."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
