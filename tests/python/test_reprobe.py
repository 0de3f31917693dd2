"""A restarted server is used again soon (docs/cluster.md, "Failover"): three clustered dscached
(--replicas 2, --warm), a paced loader streaming; three times the first server is stopped
(SIGTERM), started again on its address and waited for until /readyz answers 200, and the time
until the loader's bytes from it grow again is measured. A loader probes a failed server first
DSC__BACKOFF_FIRST_S (0.25 s, +-25%) after the failure, then doubling; it used to wait 1 s, so a
server back within a few tens of milliseconds was unused for about a second after readiness. The
check: the quickest of the three rounds is back within half of that second after readiness
(a bound set by the old first back-off, not by this machine's speed; a round whose restart
itself took over 0.4 s does not count, and the test skips when none is left)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import reprobe_scenario  # noqa: E402

ROUNDS = 3
t = te.Checks()
env = te.Env()
delays, downs, errors = reprobe_scenario.run(env, ROUNDS)
fast = [dl for dl, dn in zip(delays, downs) if dn <= 0.4]
t.check(not errors, "the loader kept streaming across the restarts (%s)" % errors)
if not fast:
    te.skip("every restart took over 0.4 s to be ready (down %s): too loaded to tell" % downs)
t.check(min(fast) < 0.5, "the restarted server was used again within 0.5 s of readiness "
        "(quickest round %.2f s; the old first re-probe came 1 s after the failure)" % min(fast))
sys.exit(t.done())
