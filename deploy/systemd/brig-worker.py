#!/usr/bin/env python3
"""brig-worker: a tiny code-execution worker that runs untrusted Python jobs under brig.

A job is a Python file dropped into SPOOL/inbox/ (write it elsewhere and rename it in,
so the worker never sees half a file). The worker runs each one in a fresh brig jail,
writes SPOOL/outbox/NAME.json with brig's verdict and the job's output, and moves the job
to SPOOL/done/. Only the Python standard library is used.

    brig-worker.py [--once] SPOOL

Environment:
    BRIG              the brig binary (default: brig, from PATH)
    BRIG_WORKER_ARGS  extra `brig run` options, split on whitespace
                      (default: --time-limit 10s --memory 256M --pids 64 --output-limit 1M)

Under systemd with Delegate=yes on cgroup v2 (deploy/systemd/brig-worker.service), the
worker moves itself into a leaf cgroup of the unit, enables the memory, pids and cpu
controllers for the unit's subtree, and gives brig the unit's `jails` cgroup with
--cgroup-parent: every jail gets a cgroup of its own inside the unit, and systemd's
MemoryMax/TasksMax bound them all together. Elsewhere it leaves cgroups to brig.
"""

import argparse
import json
import os
import subprocess
import sys
import time

DEFAULT_ARGS = "--time-limit 10s --memory 256M --pids 64 --output-limit 1M"
CGROUP_ROOT = "/sys/fs/cgroup"


def log(message):
    print(f"brig-worker: {message}", file=sys.stderr, flush=True)


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def delegated_cgroup_parent():
    """The directory for brig's --cgroup-parent when systemd delegated our cgroup, else None.

    A cgroup that holds processes cannot hand controllers down ("no internal processes"),
    so the worker first moves itself into UNIT/worker, then enables the controllers in
    UNIT/cgroup.subtree_control and creates UNIT/jails for brig.
    """
    if "INVOCATION_ID" not in os.environ:  # not started by systemd as a service
        return None
    if not os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
        return None  # not a pure cgroup v2 host
    with open("/proc/self/cgroup") as f:
        own = next((line[3:].strip() for line in f if line.startswith("0::")), None)
    if not own or own == "/":
        return None
    unit = CGROUP_ROOT + own
    if os.path.basename(unit) == "worker":  # restarted inside our own leaf
        unit = os.path.dirname(unit)
    if not os.access(os.path.join(unit, "cgroup.subtree_control"), os.W_OK):
        return None  # not delegated to us
    leaf = os.path.join(unit, "worker")
    os.makedirs(leaf, exist_ok=True)
    write_file(os.path.join(leaf, "cgroup.procs"), "0")
    with open(os.path.join(unit, "cgroup.controllers")) as f:
        available = f.read().split()
    wanted = [c for c in ("memory", "pids", "cpu") if c in available]
    if wanted:
        write_file(
            os.path.join(unit, "cgroup.subtree_control"),
            " ".join("+" + c for c in wanted),
        )
    jails = os.path.join(unit, "jails")
    os.makedirs(jails, exist_ok=True)
    log(f"jails go under {jails} ({', '.join(wanted) or 'no controllers'})")
    return jails


def run_job(job, brig, extra_args, cgroup_parent):
    """Runs one job file in a jail; returns the outbox record."""
    read_fd, write_fd = os.pipe()
    args = [brig, "run", "--profile", "python", *extra_args]
    if cgroup_parent:
        args += ["--cgroup-parent", cgroup_parent]
    args += [
        "--ro-bind", f"{job}:/task/main.py",
        "--chdir", "/task",
        "--report-fd", str(write_fd),
        "--", "python3", "main.py",
    ]
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
        )
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as report:
        stdout, stderr = proc.communicate()
        verdict_text = report.read()
    verdict = json.loads(verdict_text) if verdict_text.strip() else None
    return {
        "job": os.path.basename(job),
        "exit": proc.returncode,
        "verdict": verdict,
        "stdout": stdout.decode("utf-8", "replace"),
        "stderr": stderr.decode("utf-8", "replace"),
    }


def process_inbox(spool, brig, extra_args, cgroup_parent):
    inbox = os.path.join(spool, "inbox")
    done = 0
    for name in sorted(os.listdir(inbox)):
        if not name.endswith(".py"):
            continue
        job = os.path.join(inbox, name)
        record = run_job(job, brig, extra_args, cgroup_parent)
        status = (record["verdict"] or {}).get("status", "no verdict")
        log(f"{name}: {status}, exit {record['exit']}")
        stem = name[: -len(".py")]
        out = os.path.join(spool, "outbox", stem + ".json")
        write_file(out + ".tmp", json.dumps(record, indent=2) + "\n")
        os.replace(out + ".tmp", out)
        os.replace(job, os.path.join(spool, "done", name))
        done += 1
    return done


def main():
    parser = argparse.ArgumentParser(description="Run Python jobs from SPOOL/inbox under brig.")
    parser.add_argument("spool", help="directory with inbox/, outbox/ and done/ (created)")
    parser.add_argument("--once", action="store_true", help="process the inbox once and exit")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between inbox scans")
    options = parser.parse_args()
    for sub in ("inbox", "outbox", "done"):
        os.makedirs(os.path.join(options.spool, sub), exist_ok=True)
    # brig binds the job into the jail and runs it as the jail's user: the job files
    # must be readable by the user brig maps the jail to.
    os.chmod(os.path.join(options.spool, "inbox"), 0o755)
    brig = os.environ.get("BRIG", "brig")
    extra_args = os.environ.get("BRIG_WORKER_ARGS", DEFAULT_ARGS).split()
    cgroup_parent = delegated_cgroup_parent()
    log(f"serving {options.spool} with {brig} {' '.join(extra_args)}")
    while True:
        process_inbox(options.spool, brig, extra_args, cgroup_parent)
        if options.once:
            return 0
        time.sleep(options.poll)


if __name__ == "__main__":
    sys.exit(main())
