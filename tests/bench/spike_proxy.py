#!/usr/bin/env python3
"""A TCP relay on 127.0.0.1 that adds delay spikes to one server's traffic, in place of `tc
netem` where the kernel has no sch_netem (bench_straggler.sh, scenario `spike`; not a test).

usage: spike_proxy.py PORT_FILE TARGET_PORT_FILE [MIN_MS MAX_MS STEP_MS]
  Listens on 127.0.0.1:0 and writes its port to PORT_FILE; each connection it accepts is relayed
  to 127.0.0.1:PORT, PORT read from TARGET_PORT_FILE at that moment (so the server behind it can
  start after the relay, with --advertise naming the relay). Until killed.
  SIGUSR1 starts a spike episode: every STEP_MS (default 250) a new delay is drawn uniformly from
  [MIN_MS, MAX_MS] (default 50..300) and every byte relayed, both ways, waits that long (in
  order: never ahead of the bytes before it); SIGUSR2 ends it (no added delay). Bytes are read
  as they come and queued, so a spike delays without capping the bandwidth, as netem's delay.
"""
import asyncio
import os
import random
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from delay_proxy import pump  # noqa: E402 (the relay, with a delay drawn per read)


class Spikes:
    def __init__(self, lo, hi, step):
        self.lo, self.hi, self.step = lo, hi, step
        self.on = False
        self.delay = 0.0
        self.drawn_at = 0.0

    def current(self, now):
        if not self.on:
            return 0.0
        if now - self.drawn_at >= self.step:
            self.delay = random.uniform(self.lo, self.hi)
            self.drawn_at = now
        return self.delay


async def main():
    port_file, target_file = sys.argv[1], sys.argv[2]
    lo, hi, step = (float(v) / 1000.0 for v in (sys.argv[3:6] or ("50", "300", "250")))
    spikes = Spikes(lo, hi, step)
    loop = asyncio.get_running_loop()

    def start():
        spikes.on = True
        spikes.drawn_at = -1e9

    def stop():
        spikes.on = False

    loop.add_signal_handler(signal.SIGUSR1, start)
    loop.add_signal_handler(signal.SIGUSR2, stop)

    async def on_client(creader, cwriter):
        try:
            port = int(open(target_file).read().strip())
            sreader, swriter = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, ValueError):
            cwriter.close()
            return
        await asyncio.gather(pump(creader, swriter, spikes.current),
                             pump(sreader, cwriter, spikes.current))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % server.sockets[0].getsockname()[1])
    os.rename(port_file + ".tmp", port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 6):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main())
