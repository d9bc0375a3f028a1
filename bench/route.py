"""What routing costs: E2B's SDK creates a sandbox, runs a command in it and kills it
through each of several paths to the same kind of host, interleaved round by round (the
order rotating, so that drift in the machine's load hits all alike). The first path is
the baseline (a host's own gateway); for each other one: its median, the difference of
the medians (the goal: within 1.5 ms), their ratio, and the median of each round's own
difference (the pair ran back to back, under the same load).

A path is NAME=URL: E2B_API_URL and E2B_SANDBOX_URL both that URL (the SDK names the
sandbox in its `E2b-Sandbox-Id` header, which every brig gateway routes by). An https
URL is verified against the certificates SSL_CERT_FILE names. (Not the SDK's host form,
https://{port}-{sandboxID}.DOMAIN: that needs a wildcard DNS name, which loopback has no
server for, and the SDK's transport resolves names itself, so a process cannot fake one.)

Run by bench/route.sh and bench/ingress.sh, which start the processes and set
E2B_API_KEY: argv = rounds, then the paths. bench/scale.py imports `use` and `cycle`.
"""

import os
import statistics
import sys
import time

from e2b import Sandbox

def use(url):
    """Points the SDK's next calls at `url`."""
    os.environ["E2B_API_URL"] = url
    os.environ["E2B_SANDBOX_URL"] = url


def cycle():
    """A sandbox created, `true` run in it, the sandbox killed, through the path `use`
    chose last: (seconds to the create's answer, seconds for the whole)."""
    started = time.perf_counter()
    sandbox = Sandbox.create(timeout=60)
    created = time.perf_counter() - started
    sandbox.commands.run("true")
    sandbox.kill()
    return created, time.perf_counter() - started


def main():
    rounds = int(sys.argv[1])
    paths = [argument.split("=", 1) for argument in sys.argv[2:]]
    # Warm every path (connections, the servers' first jails) before measuring.
    for _ in range(5):
        for _, url in paths:
            use(url)
            cycle()
    times = {name: [] for name, _ in paths}
    for round_number in range(rounds):
        shift = round_number % len(paths)
        for name, url in paths[shift:] + paths[:shift]:
            use(url)
            times[name].append(cycle()[1])
    width = max(len(name) for name, _ in paths) + 40

    def line(label, value):
        print(f"{label.ljust(width)}  {value}")

    line("rounds", rounds)
    base_name = paths[0][0]
    base = times[base_name]
    base_median = statistics.median(base) * 1000
    for name, url in paths:
        line(f"create+command+kill, {name} (median)", f"{statistics.median(times[name]) * 1000:.2f} ms  {url}")
    for name, _ in paths[1:]:
        median = statistics.median(times[name]) * 1000
        paired = statistics.median(mine - theirs for mine, theirs in zip(times[name], base)) * 1000
        line(f"{name} - {base_name}", f"{median - base_median:+.2f} ms (goal: within 1.5 ms)")
        line(f"{name} / {base_name}", f"{median / base_median:.3f}")
        line(f"median of each round's own {name} - {base_name}", f"{paired:+.2f} ms")

if __name__ == "__main__":
    main()
