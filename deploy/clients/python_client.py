#!/usr/bin/env python3
"""Calling brig from Python: run code in a jail and read the verdict.

    BRIG=/usr/local/bin/brig python3 python_client.py 'print(6 * 7)'

brig writes its verdict (one JSON object, schema brig-verdict/1) to the descriptor given
with --report-fd; here that is the write end of a pipe passed to the child with
`pass_fds`. The program's stdout and stderr arrive on their own pipes. Prints one JSON
object: the exit status, the verdict's status and times, and what the program printed.
"""

import json
import os
import subprocess
import sys


def run_in_jail(code, brig=None, time_limit="10s", extra=()):
    """Runs `python3 -c code` in a brig jail; returns (exit status, stdout, stderr, verdict)."""
    brig = brig or os.environ.get("BRIG", "brig")
    read_fd, write_fd = os.pipe()
    args = [
        brig, "run", "--profile", "python",
        "--time-limit", time_limit,
        "--output-limit", "1M",
        "--report-fd", str(write_fd),
        *extra,
        "--", "python3", "-c", code,
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
        os.close(write_fd)  # brig holds its own copy; EOF comes when brig exits
    with os.fdopen(read_fd, "rb") as report:
        stdout, stderr = proc.communicate()
        verdict = json.loads(report.read())
    return proc.returncode, stdout.decode(), stderr.decode(), verdict


def main():
    code = sys.argv[1] if len(sys.argv) > 1 else 'print("hello from the jail")'
    time_limit = sys.argv[2] if len(sys.argv) > 2 else "10s"
    status, stdout, stderr, verdict = run_in_jail(code, time_limit=time_limit)
    print(json.dumps({
        "exit": status,
        "status": verdict["status"],
        "exit_code": verdict["exit_code"],
        "signal": verdict["signal"],
        "wall_ms": verdict["wall_ms"],
        "stdout": stdout,
        "stderr": stderr,
        "schema": verdict["schema"],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
