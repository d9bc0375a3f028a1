"""Creates per second, one brig host against three, behind the same ingress and routers
(issue 25: "3 hosts on this 2-core machine sustain at least 2x the creates/s of one").

CLIENTS client processes (each its own Python, so that no client waits for another's GIL),
all started once and kept, each doing PER_CLIENT cycles of bench/route.py's `cycle`
(Sandbox.create + commands.run("true") + kill, E2B's Python SDK) at once through a
stack's ingress; the stacks take turns round by round (the order alternating), each
round starting when every host of both stacks is idle again (no sandbox open, its
session pool full: the host's /metrics), so that neither pays for the other's refill.

Per round: the sustained rate (cycles that ended before the first client finished, over
that time: every client busy throughout), the success rate, the p50/p99 of a cycle and
of its create alone; and where the CPU went, from /proc (what pidstat reports): the
server process itself (its event loop and its threads), the sessions beside it (runners,
jails, Pythons: the server's descendants), the hosts' gateways, the routers, nginx, the
clients, and the rest of the machine (other people's work on a shared machine), each as
CPU ms per create and as cores busy.

Run by bench/scale.sh, which starts the processes and sets E2B_API_KEY: argv = CLIENTS,
PER_CLIENT, ROUNDS, the session pool, nginx's pid, then one argument per stack:
NAME|INGRESS_URL|HOST_URL,...|SERVE_PID,...|HOST_GATEWAY_PID,...|ROUTER_PID,...
"""

import math
import multiprocessing
import os
import statistics
import sys
import time
import urllib.request

import route  # bench/route.py (the script's directory is on sys.path)

TICKS = os.sysconf("SC_CLK_TCK")
# How long a host may take to be idle again after a round (its sessions ended, its pool
# refilled) before the bench says so and goes on.
SETTLE_SECONDS = 30
# The CPU of every process not the bench's: other people's work on a shared machine.
REST = "rest of the machine"


def worker(inbox, barrier, outbox):
    """A client process: for each task (ingress URL, cycles), one untimed cycle (this
    process's connections to that path), the barrier, then the cycles."""
    while (task := inbox.get()) is not None:
        url, count = task
        route.use(url)
        try:
            route.cycle()
        except Exception:  # this path's failures are the measured cycles' to count
            pass
        barrier.wait()
        samples, errors = [], []
        for _ in range(count):
            started = time.monotonic()
            try:
                created, whole = route.cycle()
                samples.append((started, created, whole))
            except Exception as error:  # counted, and the first few named, by the parent
                errors.append(repr(error))
        outbox.put((samples, errors, time.monotonic()))


def stat(pid):
    """(ppid, own CPU ticks, reaped children's CPU ticks) of a process, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based.
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def processes():
    """Every process now: pid -> stat()."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := stat(int(entry))) is not None:
            table[int(entry)] = found
    return table


def tree_ticks(roots, table):
    """CPU ticks of the roots and every descendant, those they reaped included."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        total += table[pid][1] + table[pid][2]
        stack += children.get(pid, [])
    return total


def machine_ticks():
    """(busy, all) CPU ticks of the machine, from /proc/stat."""
    with open("/proc/stat") as file:
        values = [int(value) for value in file.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


class Stack:
    def __init__(self, spec, nginx_pid):
        name, url, hosts, serves, gateways, routers = spec.split("|")
        self.name, self.url = name, url
        self.hosts = hosts.split(",")
        pids = {key: [int(pid) for pid in value.split(",")] for key, value in
                (("serves", serves), ("gateways", gateways), ("routers", routers))}
        self.serves, self.gateways, self.routers = pids["serves"], pids["gateways"], pids["routers"]
        self.nginx = [nginx_pid]
        self.rounds = []

    def snapshot(self, clients):
        """CPU ticks by part of the path, now."""
        table = processes()
        serve_own = sum(table[pid][1] for pid in self.serves if pid in table)
        busy, _ = machine_ticks()
        parts = {
            "server process (loop, threads)": serve_own,
            "sessions (runners, jails, Python)": tree_ticks(self.serves, table) - serve_own,
            "hosts' gateways": tree_ticks(self.gateways, table),
            "routers": tree_ticks(self.routers, table),
            "nginx (ingress and Service)": tree_ticks(self.nginx, table),
            "clients (E2B SDK)": tree_ticks(clients, table),
        }
        parts[REST] = busy - sum(parts.values())
        return parts


def metric(text, name):
    """The sum of a Prometheus text exposition's samples named `name`."""
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def settle(stacks, pool):
    """Waits until every host has no sandbox open and its pool full (its /metrics)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    for stack in stacks:
        for host in stack.hosts:
            while True:
                with urllib.request.urlopen(f"{host}/metrics", timeout=5) as answer:
                    text = answer.read().decode()
                idle = metric(text, "brig_sandbox_slots_free") == metric(text, "brig_sandbox_slots")
                if idle and metric(text, "brig_sandbox_pool_ready") >= pool:
                    break
                if time.monotonic() > deadline:
                    print(f"  host {host} not idle after {SETTLE_SECONDS} s; going on", file=sys.stderr)
                    break
                time.sleep(0.05)


def quantile(samples, fraction):
    """The nearest-rank quantile (as bench/e2b_speed.py's p95 and p99)."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def run_round(stack, clients, inboxes, barrier, outbox, per_client):
    for inbox in inboxes:
        inbox.put((stack.url, per_client))
    barrier.wait(timeout=300)
    started = time.monotonic()
    before = stack.snapshot(clients)
    answers = [outbox.get() for _ in inboxes]
    ended = time.monotonic()
    after = stack.snapshot(clients)
    samples = [sample for answer in answers for sample in answer[0]]
    errors = [error for answer in answers for error in answer[1]]
    # Sustained: every client busy, from the barrier to the first client's last answer.
    first_done = min(answer[2] for answer in answers)
    steady = sum(1 for begun, _, whole in samples if begun + whole <= first_done)
    result = {
        "rate": steady / (first_done - started),
        "overall": len(samples) / (ended - started),
        "attempts": len(samples) + len(errors),
        "samples": samples,
        "errors": errors,
        "wall": ended - started,
        "cpu": {part: (after[part] - before[part]) / TICKS for part in after},
    }
    stack.rounds.append(result)
    cpu = result["cpu"]
    print(
        f"  {stack.name}: {result['rate']:.1f} creates/s sustained ({result['overall']:.1f} overall), "
        f"{len(samples)}/{result['attempts']} ok, cycle p50 {statistics.median(s[2] for s in samples) * 1000:.1f} ms, "
        f"cores busy {sum(cpu.values()) / result['wall']:.2f}",
        file=sys.stderr,
        flush=True,
    )


def report(stacks, clients, per_client, rounds):
    print(f"{len(clients)} clients x {per_client} create+run+kill each, {rounds} rounds per stack, "
          f"{os.cpu_count()} CPUs, load average {'/'.join(f'{v:.1f}' for v in os.getloadavg())}")
    width = 36
    print("".ljust(width) + "".join(stack.name.rjust(14) for stack in stacks))

    def row(label, values):
        print(label.ljust(width) + "".join(value.rjust(14) for value in values))

    rates = [[r["rate"] for r in stack.rounds] for stack in stacks]
    row("creates/s sustained, median", [f"{statistics.median(rate):.1f}" for rate in rates])
    row("  rounds' range", [f"{min(rate):.0f}-{max(rate):.0f}" for rate in rates])
    row("creates/s overall, median", [f"{statistics.median(r['overall'] for r in s.rounds):.1f}" for s in stacks])
    ok = [(sum(len(r["samples"]) for r in s.rounds), sum(r["attempts"] for r in s.rounds)) for s in stacks]
    row("success", [f"{good}/{tried}" for good, tried in ok])
    for label, index in (("cycle", 2), ("create alone", 1)):
        for name, fraction in (("p50", 0.5), ("p99", 0.99)):
            row(f"{label} {name} (ms)", [
                f"{quantile([x[index] for r in s.rounds for x in r['samples']], fraction) * 1000:.1f}"
                for s in stacks])
    print("CPU per create (ms), and cores busy on average:")
    for part in stacks[0].rounds[0]["cpu"]:
        cells = []
        for stack in stacks:
            seconds = sum(r["cpu"][part] for r in stack.rounds)
            creates = sum(len(r["samples"]) for r in stack.rounds) or 1
            wall = sum(r["wall"] for r in stack.rounds)
            cells.append(f"{seconds / creates * 1000:.1f} {seconds / wall:.2f}")
        row(f"  {part}", cells)
    cells = []
    for stack in stacks:
        wall = sum(r["wall"] for r in stack.rounds)
        cells.append(f"{sum(sum(r['cpu'].values()) for r in stack.rounds) / wall:.2f}")
    row("  all (cores busy)", cells)
    # The rate over the CPU the bench's own processes had: what the hosts, routers and
    # clients make of a core, whatever the rest of the machine took.
    cells = []
    for stack in stacks:
        ours = sum(seconds for r in stack.rounds for part, seconds in r["cpu"].items() if part != REST)
        cells.append(f"{sum(len(r['samples']) for r in stack.rounds) / ours:.1f}")
    row("creates per CPU-second of the bench's", cells)
    if len(stacks) == 2:
        first, second = stacks
        paired = statistics.median(b["rate"] / a["rate"] for a, b in zip(first.rounds, second.rounds))
        ratio = statistics.median(rates[1]) / statistics.median(rates[0])
        print(f"{second.name} / {first.name}, sustained creates/s: {ratio:.2f} "
              f"(median of each round's own ratio: {paired:.2f}; goal: at least 2)")
    failures = [error for s in stacks for r in s.rounds for error in r["errors"]]
    print(f"failures: {len(failures)}")
    for failure in failures[:10]:
        print(f"  {failure}")
    return failures


def main():
    count, per_client, rounds, pool, nginx_pid = (int(value) for value in sys.argv[1:6])
    stacks = [Stack(spec, nginx_pid) for spec in sys.argv[6:]]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(count + 1)
    outbox = context.Queue()
    inboxes = [context.Queue() for _ in range(count)]
    workers = [context.Process(target=worker, args=(inbox, barrier, outbox)) for inbox in inboxes]
    for process in workers:
        process.start()
    clients = [process.pid for process in workers]
    try:
        for round_number in range(rounds):
            order = stacks if round_number % 2 == 0 else stacks[::-1]
            for stack in order:
                settle(stacks, pool)
                run_round(stack, clients, inboxes, barrier, outbox, per_client)
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for process in workers:
            process.join(timeout=30)
    sys.exit(1 if report(stacks, clients, per_client, rounds) else 0)


if __name__ == "__main__":
    main()
