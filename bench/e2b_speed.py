"""The E2B API's speed through E2B's own Python SDKs, against `brig gateway` + `brig serve`
(issue 23's goals, docs/performance.md "E2B API"):

1. Sequential, interleaved round by round (so drift in the machine's load hits both
   alike): a fresh sandbox's `Sandbox.create()` + `commands.run("true")` + `kill()`
   (goal: median at most 15 ms), and `run_code("1+1")` in one live sandbox (goal: median
   at most 3 ms), and beside them the first through brig's own protocol (session_create,
   a command, session_close by clients/python's brig_client on the server's socket: what
   the gateway and HTTP add). The first is also ComputeSDK's "sequential" time to
   interactive (TTI: create to the first command's end; the kill after it, untimed there).
2. ComputeSDK's "staggered": ROUNDS sandboxes launched 200 ms apart, each in a thread of
   its own: create, a command, kill.
3. ComputeSDK's "burst": ROUNDS sandboxes created at once (threads released together),
   each running a command, and then left alive: with 100 of them, the `brig serve`
   process's and the `brig gateway` process's own memory (RSS and PSS of those two
   processes; the session runners, jails and interpreters are other processes and not
   counted; goal: at most 64 MiB together).
4. 50 concurrent SDK clients (processes, so that no client waits for another's GIL), each
   on one of those live sandboxes: `run_code("1+1")` 20 times each at once (goal: p99 at
   most 10x the median). The two processes' memory is sampled during it too.

ComputeSDK's method (computesdk/benchmarks, METHODOLOGY.md): TTI is the wall-clock time
from the create call to the first command's completion, reported as median, p95, p99
and success rate, in the three modes above, 100 iterations each. It runs `node -v` (earlier
`echo "benchmark"`); here it is `true`, as in issue 23's goal.

Run by bench/e2b.sh, which starts the processes and sets E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY: argv = rounds, the server's pid, the gateway's pid, the server's socket.
"""

import math
import multiprocessing
import os
import statistics
import sys
import threading
import time

import brig_client  # clients/python, on PYTHONPATH
from e2b_code_interpreter import Sandbox

CLIENTS = 50
CALLS_PER_CLIENT = 20
STAGGER_SECONDS = 0.2
# Long enough for the whole run; the bench kills what it made.
SANDBOX_TIMEOUT = 900


def percentile(samples, fraction):
    """The nearest-rank percentile (as ComputeSDK reports p95 and p99)."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def memory_kib(pid):
    """RSS and PSS of one process (KiB), from /proc/PID/smaps_rollup."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss"):
                fields[name] = int(rest.split()[0])
    return fields["Rss"], fields["Pss"]


def load():
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def tti_cycle():
    """ComputeSDK's time to interactive, then the kill: (tti, create+command+kill) in s."""
    started = time.perf_counter()
    sandbox = Sandbox.create(timeout=SANDBOX_TIMEOUT)
    sandbox.commands.run("true")
    interactive = time.perf_counter() - started
    sandbox.kill()
    return interactive, time.perf_counter() - started


def native_cycle(socket):
    """The same through brig's own protocol on the server's socket (its Python client):
    session_create + a command + session_close, without the gateway and HTTP."""
    started = time.perf_counter()
    sandbox = brig_client.Sandbox(socket)
    sandbox.commands.run("true")
    sandbox.close()
    return time.perf_counter() - started


def run_code_once(sandbox):
    started = time.perf_counter()
    execution = sandbox.run_code("1+1")
    elapsed = time.perf_counter() - started
    if execution.text != "2" or execution.error is not None:
        raise RuntimeError(f"run_code('1+1') answered {execution!r}")
    return elapsed


def client(sandbox_id, start_barrier, results):
    """One of the concurrent SDK clients (a process of its own)."""
    try:
        sandbox = Sandbox.connect(sandbox_id, timeout=SANDBOX_TIMEOUT)
        for _ in range(3):
            run_code_once(sandbox)
        start_barrier.wait()
        results.put([run_code_once(sandbox) for _ in range(CALLS_PER_CLIENT)])
    except Exception as error:  # counted, and named, by the parent
        start_barrier.abort()  # no one waits for a client that will not come
        results.put(repr(error))


def threaded(count, start, delay=0.0):
    """Runs start(i) in `count` threads, started `delay` s apart (0: released together by
    a barrier). Returns each thread's result or the exception it raised."""
    outcomes = [None] * count
    barrier = threading.Barrier(count) if delay == 0 else None

    def body(index):
        if barrier is not None:
            barrier.wait()
        try:
            outcomes[index] = start(index)
        except Exception as error:
            outcomes[index] = error

    threads = [threading.Thread(target=body, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
        if delay:
            time.sleep(delay)
    for thread in threads:
        thread.join()
    return outcomes


def ms(seconds):
    return f"{seconds * 1000:.2f}"


def summary(samples, attempts):
    """median / p95 / p99 (ms) and success rate, in ComputeSDK's terms."""
    if not samples:
        return f"none succeeded of {attempts}"
    return (
        f"{ms(statistics.median(samples))} / {ms(percentile(samples, 0.95))} / "
        f"{ms(percentile(samples, 0.99))} ms, {len(samples)}/{attempts} succeeded"
    )


def main():
    rounds, serve_pid, gateway_pid, socket = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rows = []
    failures = []

    def row(what, measured, goal=""):
        rows.append((what, measured, goal))
        print(f"  {what}: {measured}", file=sys.stderr, flush=True)

    idle = [memory_kib(pid) for pid in (serve_pid, gateway_pid)]

    # 1. Sequential, interleaved. Warm both paths first (connections, the first jails).
    live = Sandbox.create(timeout=SANDBOX_TIMEOUT)
    for _ in range(5):
        tti_cycle()
        native_cycle(socket)
        run_code_once(live)
    load_before = load()
    ttis, cycles, natives, cells = [], [], [], []
    for round_number in range(rounds):
        # A rotating order: each step goes first, second and third alike.
        steps = ["cycle", "native", "cell"]
        steps = steps[round_number % 3 :] + steps[: round_number % 3]
        for step in steps:
            try:
                if step == "cycle":
                    interactive, whole = tti_cycle()
                    ttis.append(interactive)
                    cycles.append(whole)
                elif step == "native":
                    natives.append(native_cycle(socket))
                else:
                    cells.append(run_code_once(live))
            except Exception as error:
                failures.append(f"sequential {step}: {error!r}")
    live.kill()
    row(
        "create + run(\"true\") + kill, sequential: median / p95 / p99",
        summary(cycles, rounds),
        "median at most 15 ms",
    )
    row(
        "  the same through brig's own protocol, no gateway (brig_client)",
        summary(natives, rounds),
    )
    row('run_code("1+1") in a live sandbox: median / p95 / p99', summary(cells, rounds), "median at most 3 ms")
    row("TTI, sequential (create to the command's end)", summary(ttis, rounds))
    row("load average (1/5/15 min) before the sequential part, after it", f"{load_before}, {load()}")

    # 2. Staggered: launched 200 ms apart, each created, tried and killed in its thread.
    def staggered_one(_index):
        return tti_cycle()[0]

    outcomes = threaded(rounds, staggered_one, delay=STAGGER_SECONDS)
    staggered = [value for value in outcomes if isinstance(value, float)]
    failures += [f"staggered: {value!r}" for value in outcomes if not isinstance(value, float)]
    row(f"TTI, staggered ({rounds} launched {STAGGER_SECONDS * 1000:.0f} ms apart)", summary(staggered, rounds))

    # 3. Burst: all at once, then kept alive.
    def burst_one(_index):
        started = time.perf_counter()
        sandbox = Sandbox.create(timeout=SANDBOX_TIMEOUT)
        sandbox.commands.run("true")
        return time.perf_counter() - started, sandbox

    load_before = load()
    outcomes = threaded(rounds, burst_one)
    alive = [value[1] for value in outcomes if isinstance(value, tuple)]
    failures += [f"burst: {value!r}" for value in outcomes if not isinstance(value, tuple)]
    row(f"TTI, burst ({rounds} at once)", summary([value[0] for value in outcomes if isinstance(value, tuple)], rounds))
    time.sleep(1)  # let the creates' transient buffers go
    held = [memory_kib(pid) for pid in (serve_pid, gateway_pid)]
    row(
        "own memory, idle: server + gateway, RSS (PSS)",
        f"{idle[0][0] / 1024:.1f} + {idle[1][0] / 1024:.1f} MiB ({idle[0][1] / 1024:.1f} + {idle[1][1] / 1024:.1f})",
    )
    row(
        f"own memory, {len(alive)} sandboxes alive: server + gateway, RSS (PSS)",
        f"{held[0][0] / 1024:.1f} + {held[1][0] / 1024:.1f} = {(held[0][0] + held[1][0]) / 1024:.1f} MiB "
        f"({(held[0][1] + held[1][1]) / 1024:.1f} PSS)",
        "at most 64 MiB",
    )

    # 4. 50 concurrent clients, each a process, on 50 of the live sandboxes.
    context = multiprocessing.get_context("spawn")
    on = alive[:CLIENTS]
    start_barrier = context.Barrier(len(on) + 1)
    results = context.Queue()
    clients = [context.Process(target=client, args=(sandbox.sandbox_id, start_barrier, results)) for sandbox in on]
    for process in clients:
        process.start()
    concurrent = []
    peak = [0, 0]
    try:
        start_barrier.wait(timeout=300)
        load_before = load()
        sampler_done = threading.Event()

        def sample():
            while not sampler_done.is_set():
                now = [memory_kib(pid)[0] for pid in (serve_pid, gateway_pid)]
                peak[:] = [max(a, b) for a, b in zip(peak, now)]
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        for _ in clients:
            answer = results.get(timeout=600)
            if isinstance(answer, list):
                concurrent += answer
            else:
                failures.append(f"concurrent client: {answer}")
        sampler_done.set()
        sampler.join()
    except threading.BrokenBarrierError:
        # A client failed before the barrier: its error, and the others', are in the queue.
        failures.append("concurrent clients: one failed before they all started")
        for process in clients:
            process.join(timeout=30)
        while not results.empty():
            failures.append(f"concurrent client: {results.get()}")
    for process in clients:
        process.join(timeout=30)
    attempts = len(clients) * CALLS_PER_CLIENT
    row(f'run_code("1+1"), {len(clients)} clients at once, {CALLS_PER_CLIENT} calls each', summary(concurrent, attempts))
    if concurrent:
        ratio = percentile(concurrent, 0.99) / statistics.median(concurrent)
        row("  its p99 / its median", f"{ratio:.1f}", "at most 10")
    row("  load average before it", load_before)
    row("own memory during it, peak RSS: server + gateway", f"{peak[0] / 1024:.1f} + {peak[1] / 1024:.1f} MiB")

    for sandbox in alive:
        try:
            sandbox.kill()
        except Exception as error:
            failures.append(f"kill: {error!r}")

    width = max(len(what) for what, _, _ in rows)
    print(f"E2B API through e2b-code-interpreter 2.9.1 / e2b 2.45.1, {rounds} rounds, {os.cpu_count()} CPUs")
    print(f"{'what'.ljust(width)}  measured  (goal)")
    for what, measured, goal in rows:
        print(f"{what.ljust(width)}  {measured}" + (f"  (goal: {goal})" if goal else ""))
    print(f"failures: {len(failures)}")
    for failure in failures[:10]:
        print(f"  {failure}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
