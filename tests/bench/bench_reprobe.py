#!/usr/bin/env python3
"""How soon a loader uses a restarted server again (not a test; docs/benchmarks.md): three
clustered dscached on 127.0.0.1 (--replicas 2, --warm), one paced loader streaming; ROUNDS times
the first server is stopped (SIGTERM), started again on its address and waited for until /readyz
answers 200; then the time until the loader's bytes from it grow again (its per-server metric
dscache_loader_server_bytes_total) is the re-probe delay after readiness, the wait a rolling
restart needs per server before stopping the next one.
usage: DSC_BIN=build/bin DSCACHE_LIB=build/lib/libdscache.so PYTHONPATH=client/python \\
       /usr/bin/python3 tests/bench/bench_reprobe.py [ROUNDS]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import reprobe_scenario  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
env = te.Env()
delays, downs, errors = reprobe_scenario.run(env, ROUNDS)
d = sorted(delays)
print("re-probe delay after readiness over %d rounds: median %.2f s, max %.2f s (down %.2f s "
      "median); loader errors: %s" % (ROUNDS, d[len(d) // 2], d[-1], sorted(downs)[len(d) // 2],
                                     errors or "none"))
env.close()
