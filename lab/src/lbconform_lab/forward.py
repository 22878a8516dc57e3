"""A loopback TCP forward from the root namespace to the apiserver inside the lab.

The listening socket is bound in the root namespace first; then the process moves into the
lab's fabric namespace, so that every connection it opens to the apiserver starts there.
The root namespace gets one loopback listener and nothing else.

Run as ``python -m lbconform_lab.forward PORT NETNS HOST:PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys

from lbconform.nsexec import enter


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(listener: socket.socket, host: str, port: int) -> None:
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(host, port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pipe(cr, uw), _pipe(ur, cw))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    listen_port, netns, target = int(argv[0]), argv[1], argv[2]
    host, port = target.rsplit(":", 1)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(128)
    enter(netns)
    asyncio.run(_serve(listener, host, int(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
