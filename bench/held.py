"""What a create costs a host as it fills: the CPU of the host's `brig serve` and every
process under it (runners, jails, what they ran, reaped ones included: /proc) per
create + run("true") + kill, with no other sandbox alive and with HELD idle ones alive,
in turns (ROUNDS each). The server process's own share is given apart.

Run by bench/held.sh, which starts the host and sets E2B_API_KEY: argv = HELD, ROUNDS,
CYCLES (per measurement), the server's pid, the host's URL.
"""

import statistics
import sys
import time

from e2b import Sandbox

import route  # bench/route.py and bench/scale.py (the script's directory is on sys.path)
import scale

# After the cycles, the pool refills the jail the last create took: wait for it so that
# its CPU is counted in the measurement it belongs to.
REFILL_SECONDS = 1


def measure(serve_pid, cycles):
    """(the server tree's, the server process's) CPU ms per cycle."""
    route.cycle()
    time.sleep(REFILL_SECONDS)
    table = scale.processes()
    tree, own = scale.tree_ticks([serve_pid], table), table[serve_pid][1]
    for _ in range(cycles):
        route.cycle()
    time.sleep(REFILL_SECONDS)
    table = scale.processes()
    per_cycle = 1000 / scale.TICKS / cycles
    return (scale.tree_ticks([serve_pid], table) - tree) * per_cycle, (table[serve_pid][1] - own) * per_cycle


def main():
    held_count, rounds, cycles, serve_pid, url = (*map(int, sys.argv[1:5]), sys.argv[5])
    route.use(url)
    results = {0: [], held_count: []}
    for round_number in range(rounds):
        order = [0, held_count] if round_number % 2 == 0 else [held_count, 0]
        for count in order:
            held = [Sandbox.create(timeout=600) for _ in range(count)]
            results[count].append(measure(serve_pid, cycles))
            for sandbox in held:
                sandbox.kill()
            print(f"  {count} alive: {results[count][-1][0]:.2f} ms", file=sys.stderr, flush=True)
    print(f"{rounds} rounds of {cycles} create + run(\"true\") + kill; CPU per cycle, median of rounds:")
    for count, samples in results.items():
        tree = statistics.median(sample[0] for sample in samples)
        own = statistics.median(sample[1] for sample in samples)
        print(f"  {count:4} other sandboxes alive: {tree:6.2f} ms the server and all under it "
              f"({own:.2f} ms the server process)")


if __name__ == "__main__":
    main()
