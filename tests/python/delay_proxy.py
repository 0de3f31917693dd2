#!/usr/bin/env python3
"""A TCP relay on 127.0.0.1 that delays every byte by a fixed time in each direction (a long
round trip without netem): `delay_proxy.py DELAY_MS TARGET_HOST:PORT` prints its port, then
relays until killed. Used by test_verdict.py (not a test itself)."""
import asyncio
import sys


async def pump(reader, writer, delay_of):
    """Relays reader to writer, each read's bytes sent delay_of(now) seconds after they came,
    never ahead of the bytes before them. Also the relay of tests/bench/spike_proxy.py."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def sender():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    task = asyncio.create_task(sender())
    last_due = 0.0
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            now = loop.time()
            last_due = max(last_due, now + delay_of(now))
            await queue.put((last_due, data))
    except (ConnectionError, OSError):
        pass
    await queue.put((0, None))
    try:
        await task
    except (ConnectionError, OSError):
        pass


async def main():
    delay = float(sys.argv[1]) / 1000.0
    host, port = sys.argv[2].rsplit(":", 1)

    async def on_client(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection(host, int(port))
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pump(creader, swriter, lambda now: delay),
                             pump(sreader, cwriter, lambda now: delay))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main())
