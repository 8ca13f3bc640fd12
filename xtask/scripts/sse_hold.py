#!/usr/bin/env python3
"""Open N legacy SSE streams to Breeze, hold them through a keepalive, report what arrived.

usage: sse_hold.py HOST PORT API_KEY N HOLD_SECONDS
Prints one JSON line: streams opened, endpoint events received, ping events received, errors.
"""
import asyncio
import json
import resource
import sys


async def hold(host, port, key, hold_s, stats, started):
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            f"GET /api/v1/mcp/sse HTTP/1.1\r\nHost: {host}:{port}\r\nX-API-Key: {key}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            stats["errors"] += 1
            writer.close()
            return
        stats["opened"] += 1
        buf = b""
        got_endpoint = got_ping = False
        started.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + hold_s
        while loop.time() < deadline and not got_ping:
            try:
                chunk = await asyncio.wait_for(reader.read(4096), deadline - loop.time())
            except asyncio.TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
            if not got_endpoint and b"event: endpoint" in buf:
                got_endpoint = True
                stats["endpoint"] += 1
            if b"event: ping" in buf:
                got_ping = True
                stats["ping"] += 1
        # Keep the connection open until everyone is done, so the server holds them all at once.
        await stats["release"].wait()
        writer.close()
    except Exception:  # noqa: BLE001 - counted and reported
        stats["errors"] += 1


async def main():
    host, port, key, n, hold_s = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stats = {"opened": 0, "endpoint": 0, "ping": 0, "errors": 0, "release": asyncio.Event()}
    started = asyncio.Event()
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(hold(host, port, key, hold_s, stats, started)))
        if i % 500 == 499:
            await asyncio.sleep(0.05)
    # Print the count once all are open (the caller samples server RSS now).
    await asyncio.sleep(hold_s + 2)
    print(json.dumps({k: v for k, v in stats.items() if k != "release"}), flush=True)
    stats["release"].set()
    await asyncio.gather(*tasks)


asyncio.run(main())
