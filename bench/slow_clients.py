"""Slow-client attacker for bench/slow_clients.sh: loopback only, bounded.

Opens CONNECTIONS connections to HOST:PORT and keeps each one slow: a
quarter send nothing, a quarter trickle a request line and headers a byte
per second, a quarter send headers then trickle a body a byte per second,
a quarter send a request, read the answer and sit idle on keep-alive. A
connection the server closes is reopened (an attacker would), until
DURATION seconds have passed; then everything is closed and it exits.
"""

import asyncio
import resource
import sys
import time

HOST, PORT = sys.argv[1], int(sys.argv[2])
CONNECTIONS, DURATION = int(sys.argv[3]), float(sys.argv[4])

HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000 + b"\r\n\r\n"
POST = (b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 4000\r\n\r\n")
stats = {"opened": 0, "closed_by_server": 0, "connect_failed": 0}


async def slow(shape: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, PORT), 5)
        except (OSError, asyncio.TimeoutError):
            stats["connect_failed"] += 1
            await asyncio.sleep(1)
            continue
        stats["opened"] += 1
        try:
            if shape == 2:
                writer.write(POST)
            elif shape == 3:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                await writer.drain()
                await asyncio.wait_for(reader.read(4096), 5)
            i = 0
            while time.monotonic() < deadline:
                if shape in (1, 2):
                    writer.write((HEAD if shape == 1 else b"a" * 4000)[i:i + 1])
                    i += 1
                await writer.drain()
                # A closed connection reads EOF (or fails) here.
                try:
                    data = await asyncio.wait_for(reader.read(4096), 1)
                    if not data:
                        break
                except asyncio.TimeoutError:
                    pass
        except (OSError, asyncio.TimeoutError):
            pass
        stats["closed_by_server"] += time.monotonic() < deadline
        writer.close()


async def main() -> None:
    deadline = time.monotonic() + DURATION
    tasks = []
    for n in range(CONNECTIONS):
        tasks.append(asyncio.create_task(slow(n % 4, deadline)))
        if n % 500 == 499:
            await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    print(f"attacker: {stats}", flush=True)


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
asyncio.run(main())
