"""A small HTTP/1.1 load generator for the HTTP benchmark: asyncio, keep-alive, no dependencies.

Closed loop: N clients, each sends its next request when the last one answered (the
throughput at N concurrent clients). Open loop: requests start on a fixed schedule
whatever the server does (how an overload arrives); each is timed from its scheduled
start, so a client that fell behind does not hide the server's queue. Every request
carries X-Request-Start with that start, as a proxy would stamp it.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: dict | None = None
    raw: bytes | None = None  # sent as is, in place of `body`
    headers: tuple[str, ...] = ()  # more header lines ("Name: value")


@dataclass(frozen=True)
class Result:
    status: int  # 0: no answer (connection refused or reset, or past the client's timeout)
    latency_ms: float
    started: float  # seconds since the run began
    error: str = ""  # why there was no answer (status 0)
    # From the scheduled start until the request was written: the load generator's own lag
    # (it shares the CPU with the server), part of latency_ms.
    lag_ms: float = 0.0


class Connection:
    # Stamp X-Request-Start as a proxy would (False: as a client talking to gunicorn alone).
    proxy_stamp = True
    # Every n-th request (0: none) sends a forged X-Request-Start an hour in the future, as a
    # client trying to switch shedding off (or one whose clock runs fast) would, from `source`
    # (an address the server does not trust as a proxy).
    forge_every = 0
    source: str | None = None
    # TLS to the server (nginx in front, evaluation.deployment), None for plain HTTP.
    tls = None

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port, self.headers = host, port, headers
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.sent_at = 0.0
        self.sent = 0

    async def send(self, request: Request, stamp: float) -> int:
        if self.writer is None:
            local = (self.source, 0) if self.source else None
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, local_addr=local, ssl=self.tls, server_hostname=self.host if self.tls else None
            )
        body = (
            request.raw
            if request.raw is not None
            else json.dumps(request.body).encode()
            if request.body is not None
            else b""
        )
        head = [
            f"{request.method} {request.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            f"Content-Length: {len(body)}",
            "Content-Type: application/json",
            *request.headers,
        ]
        self.sent += 1
        if self.forge_every and self.sent % self.forge_every == 0:
            head.append(f"X-Request-Start: t={time.time() + 3600:.6f}")
        elif self.proxy_stamp:
            head.append(f"X-Request-Start: t={stamp:.6f}")
        head += [f"{k}: {v}" for k, v in self.headers.items()]
        self.sent_at = time.perf_counter()
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed")
        length, close, chunked = 0, False, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
            elif name.lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if chunked:
            while (size := int((await self.reader.readline()).split(b";")[0], 16)) > 0:
                await self.reader.readexactly(size + 2)
            await self.reader.readline()  # the empty trailer
        else:
            await self.reader.readexactly(length)
        if close:
            self.close()
        return int(status_line.split()[1])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _send(connection: Connection, request: Request, stamp: float) -> int:
    reused = connection.writer is not None
    try:
        return await connection.send(request, stamp)
    except (ConnectionError, asyncio.IncompleteReadError):
        if not reused:
            raise
        # The server closed an idle keep-alive connection as the request left: HTTP
        # clients send it again on a new connection.
        connection.close()
        return await connection.send(request, stamp)


async def _timed(connection: Connection, request: Request, start: float, began: float, timeout: float) -> Result:
    try:
        status = await asyncio.wait_for(
            _send(connection, request, time.time() - (time.perf_counter() - start)), timeout
        )
    except (
        OSError,
        ConnectionError,
        asyncio.TimeoutError,
        asyncio.IncompleteReadError,
        ValueError,
        IndexError,
    ) as error:
        connection.close()
        return Result(0, (time.perf_counter() - start) * 1000.0, start - began, type(error).__name__)
    return Result(
        status,
        (time.perf_counter() - start) * 1000.0,
        start - began,
        lag_ms=max(0.0, connection.sent_at - start) * 1000.0,
    )


async def closed_loop(
    host: str,
    port: int,
    headers: dict[str, str],
    make: Callable[[int], Request],
    clients: int,
    seconds: float | None = None,
    requests: int | None = None,
    timeout: float = 10.0,
) -> list[Result]:
    """`clients` clients send requests back to back, for `seconds` or until `requests` were sent."""
    began = time.perf_counter()
    results: list[Result] = []
    sent = 0

    async def client() -> None:
        nonlocal sent
        connection = Connection(host, port, headers)
        while (seconds is None or time.perf_counter() - began < seconds) and (requests is None or sent < requests):
            sent += 1
            results.append(await _timed(connection, make(sent - 1), time.perf_counter(), began, timeout))
        connection.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return results


async def open_loop(
    host: str,
    port: int,
    headers: dict[str, str],
    make: Callable[[int], Request],
    rate: float,
    seconds: float,
    timeout: float = 10.0,
    max_connections: int = 1000,
) -> list[Result]:
    """Starts `rate` requests a second for `seconds`, then waits for the last to end (at most `timeout`)."""
    began = time.perf_counter()
    idle: list[Connection] = []
    open_count = 0
    results: list[Result] = []
    tasks = []

    async def one(i: int, start: float) -> None:
        nonlocal open_count
        if idle:
            connection = idle.pop()
        elif open_count < max_connections:
            open_count += 1
            connection = Connection(host, port, headers)
        else:
            results.append(Result(0, 0.0, start - began, "the client ran out of connections"))
            return
        results.append(await _timed(connection, make(i), start, began, timeout))
        idle.append(connection)

    i = 0
    while True:
        start = began + i / rate
        if start - began >= seconds:
            break
        delay = start - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, start)))
        i += 1
    await asyncio.gather(*tasks)
    for connection in idle:
        connection.close()
    return results
