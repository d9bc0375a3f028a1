"""--secret's cost, in one interleaved run (bench/secrets.sh): the tests' servers
(tests/net/servers.py: cleartext HTTP, and TLS with their own CA) on 127.0.0.1, reached
as web.test through `--allow-net`; curl in the jail.

- hosts without secrets, with and without a `--secret` for another host configured:
  launch of `true`, a cleartext download, an HTTPS connection's set-up (relayed unread);
- through a secret-injecting connection (brig terminates TLS for web.test): a 100 MiB
  HTTPS download against the same download relayed unread, and the set-up
  (curl's time_appconnect) of a fresh connection once the jail's leaf for the host is
  made (the jail's first request makes it), against relayed.

Rounds are interleaved (each round runs every case once); medians are reported, with the
ratios, as a table and as JSON (bench/secrets-results.json).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--brig", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--download", type=int, default=100, help="MiB")
    parser.add_argument("--baseline", help="another brig (an earlier build): its launch, "
                        "cleartext download and HTTPS set-up without secrets, A/B")
    parser.add_argument("--json", default=os.path.join(ROOT, "bench/secrets-results.json"))
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="brig-bench-secrets-")
    os.chmod(state, 0o755)
    servers = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/net/servers.py"), "--state", state],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        ready = json.loads(servers.stdout.readline())
        run(args, ready, state)
    finally:
        servers.kill()
        servers.wait()
        subprocess.run(["rm", "-rf", state], check=False)


def run(args, ready, state):
    http, tls, ca = ready["http"], ready["tls"], ready["ca"]
    key = os.path.join(state, "api-key")
    with open(key, "w") as out:
        out.write("sk-bench-value\n")
    os.chmod(key, 0o644)
    # The relayed cases' curl trusts a bundle of the same size as the jail's (the host's
    # roots and the test CA): curl reads its CA file during the handshake, and a file of
    # one certificate would make the relayed set-up look some 15 ms cheaper.
    roots = "/etc/ssl/certs/ca-certificates.crt"
    with open(os.path.join(state, "bundle.pem"), "w") as out:
        out.write(open(roots).read() if os.path.exists(roots) else "")
        out.write(open(ca).read())
    base = ["run", "--quiet-limits", "--add-host", "web.test:127.0.0.1",
            "--add-host", "other.test:127.0.0.1",
            "--allow-net", f"web.test:{http}", "--allow-net", f"web.test:{tls}",
            "--allow-net", f"other.test:{tls}", "--ro-bind", f"{state}:/ca"]
    # A secret for another host: web.test's connections are relayed as before.
    elsewhere = ["--secret", f"API_KEY=file:{key}", "--secret-host", f"API_KEY=other.test:{tls}",
                 "--upstream-ca", ca]
    # A secret for web.test: its TLS is terminated.
    entitled = ["--secret", f"API_KEY=file:{key}", "--secret-host", f"API_KEY=web.test:{tls}",
                "--upstream-ca", ca]
    size = args.download * MIB

    def jail(extra, script, brig=args.brig):
        started = time.perf_counter()
        done = subprocess.run([brig] + base + extra + ["--", "sh", "-c", script],
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"brig failed ({done.returncode}): {done.stderr}")
        return wall, done.stdout

    def download(extra, url, cacert, brig=args.brig):
        option = f"--cacert {cacert}" if cacert else ""
        _, out = jail(extra, f"curl -sS {option} -o /dev/null -w '%{{speed_download}}' {url}", brig)
        return float(out) * 8 / 1e9

    def setup(extra, cacert, brig=args.brig):
        # Three fresh connections; the last two count (the first makes the leaf).
        option = f"--cacert {cacert}" if cacert else ""
        one = f"curl -sS {option} -o /dev/null -w '%{{time_appconnect}} ' https://web.test:{tls}/hello"
        _, out = jail(extra, f"{one}; {one}; {one}", brig)
        times = [float(value) * 1000 for value in out.split()]
        return statistics.mean(times[1:])

    cases = {
        "launch, no secret (ms)": lambda: jail([], "true")[0] * 1000,
        "launch, a secret for another host (ms)": lambda: jail(elsewhere, "true")[0] * 1000,
        "cleartext download, no secret (Gbit/s)":
            lambda: download([], f"http://web.test:{http}/bytes/{size}", None),
        "cleartext download, a secret for another host (Gbit/s)":
            lambda: download(elsewhere, f"http://web.test:{http}/bytes/{size}", None),
        "HTTPS set-up relayed, no secret (ms)": lambda: setup([], "/ca/bundle.pem"),
        "HTTPS set-up relayed, a secret for another host (ms)": lambda: setup(elsewhere, "/ca/bundle.pem"),
        "HTTPS set-up terminated, the secret's host (ms)": lambda: setup(entitled, None),
        "HTTPS download relayed (Gbit/s)":
            lambda: download([], f"https://web.test:{tls}/bytes/{size}", "/ca/bundle.pem"),
        "HTTPS download terminated (Gbit/s)":
            lambda: download(entitled, f"https://web.test:{tls}/bytes/{size}", None),
    }
    if args.baseline:
        cases["launch, no secret, baseline build (ms)"] = \
            lambda: jail([], "true", args.baseline)[0] * 1000
        cases["cleartext download, no secret, baseline build (Gbit/s)"] = \
            lambda: download([], f"http://web.test:{http}/bytes/{size}", None, args.baseline)
        cases["HTTPS set-up relayed, no secret, baseline build (ms)"] = \
            lambda: setup([], "/ca/bundle.pem", args.baseline)
    samples = {name: [] for name in cases}
    for round_ in range(args.rounds):
        for name, case in cases.items():
            samples[name].append(case())
        print(f"round {round_ + 1}/{args.rounds}", file=sys.stderr)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratio = lambda one, other: medians[one] / medians[other]
    ratios = {
        "launch: a secret elsewhere / none": ratio("launch, a secret for another host (ms)",
                                                   "launch, no secret (ms)"),
        "cleartext download: none / a secret elsewhere": ratio(
            "cleartext download, no secret (Gbit/s)",
            "cleartext download, a secret for another host (Gbit/s)"),
        "HTTPS set-up: a secret elsewhere / none": ratio(
            "HTTPS set-up relayed, a secret for another host (ms)", "HTTPS set-up relayed, no secret (ms)"),
        "HTTPS set-up: terminated - relayed (ms)":
            medians["HTTPS set-up terminated, the secret's host (ms)"]
            - medians["HTTPS set-up relayed, no secret (ms)"],
        "HTTPS download: terminated / relayed": ratio("HTTPS download terminated (Gbit/s)",
                                                      "HTTPS download relayed (Gbit/s)"),
    }
    if args.baseline:
        ratios["launch: this build / baseline"] = ratio(
            "launch, no secret (ms)", "launch, no secret, baseline build (ms)")
        ratios["cleartext download: baseline / this build"] = ratio(
            "cleartext download, no secret, baseline build (Gbit/s)", "cleartext download, no secret (Gbit/s)")
        ratios["HTTPS set-up: this build / baseline"] = ratio(
            "HTTPS set-up relayed, no secret (ms)", "HTTPS set-up relayed, no secret, baseline build (ms)")
    width = max(len(name) for name in list(medians) + list(ratios))
    print(f"{args.rounds} rounds, {args.download} MiB downloads, medians:")
    for name, value in medians.items():
        print(f"  {name:<{width}}  {value:8.2f}")
    for name, value in ratios.items():
        print(f"  {name:<{width}}  {value:8.3f}")
    with open(args.json, "w") as out:
        json.dump({"rounds": args.rounds, "download_mib": args.download, "medians": medians,
                   "ratios": ratios, "samples": samples}, out, indent=1)


if __name__ == "__main__":
    main()
