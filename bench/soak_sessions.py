#!/usr/bin/env python3
"""Soak of brig serve's sessions: many session lives, concurrently, as root and rootless.

Each worker, over and over: creates a session (from the pool, or of its own shape with a
marker variable), runs cells and a command, puts and gets a file, and now and then lets a
cell run away (time limit), times a command out, kills its interpreter (os._exit), or
leaves the session open for the idle timeout to end; then closes it. Every reply is
checked. At the end the server is stopped (SIGTERM) and the host compared with before:
processes carrying the marker, brig's cgroups, the server's descriptors and RSS.

Run as root: `bench/soak_sessions.py [--cycles N] [--workers N] [--modes root,rootless]`
(`bench/soak.sh --sessions` builds brig first). Prints a table, writes
bench/soak-sessions-results.json, exits 0 only when every count is 0. Standard library
only; the protocol is spoken directly.
"""

import argparse, base64, json, os, random, shutil, socket, struct, subprocess, sys, tempfile, threading, time

MARKER = f"BRIG_SOAK_SESSION={os.getpid()}"


def ask(path, message, timeout=60):
    message = dict(message, brig=1)
    body = json.dumps(message).encode()
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(timeout)
        connection.connect(path)
        connection.sendall(struct.pack(">I", len(body)) + body)
        (length,) = struct.unpack(">I", connection.recv(4, socket.MSG_WAITALL))
        reply = b""
        while len(reply) < length:
            chunk = connection.recv(length - len(reply))
            if not chunk:
                break
            reply += chunk
    return json.loads(reply)


def marked_processes():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if MARKER.encode() in environ.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def brig_cgroups():
    root = "/sys/fs/cgroup"
    found = []
    for parent in [os.path.join(root, "brig")] + [os.path.join(root, name, "brig") for name in os.listdir(root)]:
        if os.path.isdir(parent):
            found += [os.path.join(parent, name) for name in os.listdir(parent) if name.startswith("jail-")]
    return found


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1])


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.cycles = self.requests = 0
        self.errors = []

    def check(self, ok, what, reply):
        with self.lock:
            self.requests += 1
            if not ok:
                self.errors.append(f"{what}: {json.dumps(reply)[:400]}")


def worker(path, seed, cycles, counts):
    rnd = random.Random(seed)
    for cycle in range(cycles):
        create = {"type": "session_create"}
        if rnd.random() < 0.5:
            create["options"] = {"env": [MARKER]}
        reply = ask(path, create)
        counts.check(reply.get("type") == "session", "create", reply)
        if reply.get("type") != "session":
            continue
        session = reply["session"]

        def do(message, **more):
            return ask(path, dict(message, session=session, **more))

        value = rnd.randint(0, 10**6)
        reply = do({"type": "session_exec", "code": f"value = {value}"})
        counts.check(reply.get("verdict", {}).get("status") == "ok", "cell", reply)
        reply = do({"type": "session_exec", "code": "value + 1"})
        counts.check(reply.get("result") == str(value + 1), "state", reply)
        reply = do({"type": "session_exec", "command": ["sh", "-c", f"echo {value}; exit {value % 7}"]})
        counts.check(
            reply.get("stdout") == f"{value}\n" and reply.get("verdict", {}).get("exit_code") == value % 7,
            "command",
            reply,
        )
        data = os.urandom(rnd.randint(0, 4096))
        reply = do({"type": "session_put", "path": f"d/{cycle}.bin", "data": base64.b64encode(data).decode()})
        counts.check(reply.get("size") == len(data), "put", reply)
        reply = do({"type": "session_get", "path": f"d/{cycle}.bin"})
        counts.check(base64.b64decode(reply.get("data", "")) == data, "get", reply)
        twist = rnd.random()
        if twist < 0.15:
            reply = do({"type": "session_exec", "code": "while True: pass", "time_limit": "300ms"})
            counts.check(reply.get("verdict", {}).get("status") == "timeout", "runaway cell", reply)
            reply = do({"type": "session_exec", "code": "value"})
            counts.check(reply.get("result") == str(value), "state after a runaway", reply)
        elif twist < 0.25:
            reply = do({"type": "session_exec", "command": ["sleep", "10"], "time_limit": "200ms"})
            counts.check(reply.get("verdict", {}).get("status") == "timeout", "command timeout", reply)
        elif twist < 0.30:
            reply = do({"type": "session_exec", "code": "import os; os._exit(3)"})
            counts.check(reply.get("state_lost") is True, "interpreter exit", reply)
            reply = do({"type": "session_exec", "code": "1"})
            counts.check(reply.get("result") == "1", "fresh interpreter", reply)
        if rnd.random() < 0.9:
            reply = do({"type": "session_close"})
            counts.check(reply.get("type") == "closed", "close", reply)
        with counts.lock:
            counts.cycles += 1


def soak(mode, brig, cycles, workers):
    directory = tempfile.mkdtemp(prefix="brig-soak-sessions-")
    os.chmod(directory, 0o1777)  # sticky: brig refuses a socket dir others could write
    path = os.path.join(directory, "brig.sock")
    prefix = [] if mode == "root" else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    binary = brig
    if mode != "root":
        binary = os.path.join(directory, "brig")
        shutil.copy(brig, binary)
        os.chmod(binary, 0o755)
    server = subprocess.Popen(
        prefix + [binary, "serve", "--socket", path, "--pool", "0", "--session-pool", "2",
                  "--idle-timeout", "3s", "--quiet-limits"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 20
        while not os.path.exists(path) or ask(path, {"type": "status"}).get("session_ready", 0) < 2:
            if time.time() > deadline:
                raise SystemExit(f"{mode}: brig serve did not start")
            time.sleep(0.05)
        fds_before, rss_before = len(os.listdir(f"/proc/{server.pid}/fd")), rss_kib(server.pid)
        counts = Counts()
        started = time.time()
        threads = [threading.Thread(target=worker, args=(path, seed, cycles, counts)) for seed in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.time() - started
        # The sessions left open end with the idle timeout; then the pool is full again.
        deadline = time.time() + 30
        while time.time() < deadline:
            status = ask(path, {"type": "status"})
            if status["sessions"] == 0 and status["session_ready"] == 2:
                break
            time.sleep(0.2)
        # The server closes a status request's connection just after answering it.
        deadline = time.time() + 5
        while len(os.listdir(f"/proc/{server.pid}/fd")) > fds_before and time.time() < deadline:
            time.sleep(0.05)
        fds_after, rss_after = len(os.listdir(f"/proc/{server.pid}/fd")), rss_kib(server.pid)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=60)
    result = {
        "mode": mode,
        "cycles": counts.cycles,
        "requests": counts.requests,
        "seconds": round(elapsed, 1),
        "wrong_replies": len(counts.errors),
        "first_errors": counts.errors[:5],
        "server_exit": server.returncode,
        "server_fds_gained": fds_after - fds_before,
        "server_rss_growth_kib": rss_after - rss_before,
        "processes_left": len(marked_processes()),
        "cgroups_left": len(brig_cgroups()),
    }
    shutil.rmtree(directory, ignore_errors=True)
    if server.returncode != 0:
        result["server_stderr"] = stderr.decode(errors="replace")[-400:]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brig", default="target/x86_64-unknown-linux-gnu/release/brig")
    parser.add_argument("--cycles", type=int, default=250, help="session lives per worker")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--modes", default="root,rootless")
    parser.add_argument("--json", default="bench/soak-sessions-results.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the rootless mode runs brig as uid 65534 with setpriv)")
    results = [soak(mode, os.path.abspath(args.brig), args.cycles, args.workers) for mode in args.modes.split(",")]
    failed = False
    print(f"{'mode':<10}{'cycles':>8}{'requests':>10}{'seconds':>9}{'wrong':>7}{'fds+':>6}{'rss+KiB':>9}{'procs':>7}{'cgroups':>9}")
    for r in results:
        print(f"{r['mode']:<10}{r['cycles']:>8}{r['requests']:>10}{r['seconds']:>9}{r['wrong_replies']:>7}"
              f"{r['server_fds_gained']:>6}{r['server_rss_growth_kib']:>9}{r['processes_left']:>7}{r['cgroups_left']:>9}")
        for error in r["first_errors"]:
            print("   ", error)
        failed |= bool(r["wrong_replies"] or r["server_fds_gained"] > 0 or r["processes_left"]
                       or r["cgroups_left"] or r["server_exit"] != 0)
    with open(args.json, "w") as out:
        json.dump(results, out, indent=2)
    print(f"wrote {args.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
