"""An asyncio event loop on a thread of its own, inside a network namespace when asked.

Traffic engines (the connection fleet, the request loop) run their sockets on such a loop:
the thread enters the namespace before the loop starts, so every socket the loop opens
starts there, while the caller's thread stays where it is. Callers hand coroutines over
and wait for their results.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from lbconform.nsexec import enter

T = TypeVar("T")

#: A loop that does not stop within this after being asked has a stuck coroutine.
STOP_SECONDS = 10.0


class LoopThread:
    def __init__(self, netns: str | None = None, name: str = "traffic") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(netns,), name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error:
            raise self._error

    def _run(self, netns: str | None) -> None:
        try:
            if netns:
                enter(netns)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        asyncio.set_event_loop(self.loop)
        self._ready.set()
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=STOP_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()
