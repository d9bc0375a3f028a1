"""What routing costs: E2B's SDK creates a sandbox, runs a command in it and kills it,
through a router (a `brig gateway` without a server) in front of a host's gateway, and
directly through that host's gateway, interleaved round by round (so drift in the
machine's load hits both alike). Reported: the medians, their difference (the goal:
within 1.5 ms), their ratio, and the median of each round's own difference.

Run by bench/route.sh, which starts the processes: argv = host URL, router URL, rounds.
"""

import os
import statistics
import sys
import time

from e2b import Sandbox

host, router, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])


def once(url):
    os.environ["E2B_API_URL"] = url
    os.environ["E2B_SANDBOX_URL"] = url
    started = time.perf_counter()
    sandbox = Sandbox.create(timeout=60)
    sandbox.commands.run("true")
    sandbox.kill()
    return time.perf_counter() - started


# Warm both paths (connections, the server's first jails) before measuring.
for _ in range(5):
    once(host)
    once(router)
times = {"direct": [], "routed": []}
for round_number in range(rounds):
    order = [("direct", host), ("routed", router)]
    if round_number % 2:
        order.reverse()
    for name, url in order:
        times[name].append(once(url))
direct = statistics.median(times["direct"]) * 1000
routed = statistics.median(times["routed"]) * 1000
print(f"rounds                                   {rounds}")
print(f"create+command+kill, direct (median)     {direct:.2f} ms")
print(f"create+command+kill, routed (median)     {routed:.2f} ms")
print(f"routed - direct                          {routed - direct:+.2f} ms (goal: within 1.5 ms)")
print(f"routed / direct                          {routed / direct:.3f}")
# Each round's own difference: the pair ran back to back, under the same load.
paired = statistics.median(r - d for r, d in zip(times["routed"], times["direct"])) * 1000
print(f"median of each round's routed - direct   {paired:+.2f} ms")
