#!/usr/bin/env bash
# brig's whole test suite, from a fresh Debian machine: installs what the tests need,
# checks formatting and lints, builds the static release binary, runs every test.
# Run it as root (the suite runs brig both as root and, via setpriv, rootless).
# No test passes by skipping: a missing prerequisite fails its test. With
# BRIG_TEST_ALLOW_SKIP=1 such a test is skipped instead, and listed at the end (SKIPPED).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
# The jails bind the host's /usr: the interpreters must live there (a pyenv or nvm
# shim earlier in PATH does not count).
[[ -x /usr/bin/python3 ]] || need+=(python3)
[[ -x /usr/bin/node ]] || need+=(nodejs)
# tests/operators/docs.rs runs the clients' install examples: a venv (python3-venv) and npm
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
# tests/serve/session_rich.rs and the client READMEs draw a figure in a session (its PNG comes
# back without savefig): Debian's matplotlib, with numpy
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
# tests/serve/session_rich.rs shows a pandas DataFrame in a session (text/html and text/plain,
# through both clients): Debian's pandas
/usr/bin/python3 -c 'import pandas' 2>/dev/null || need+=(python3-pandas)
[[ -x /usr/bin/npm ]] || need+=(npm)
command -v setpriv >/dev/null || need+=(util-linux)
command -v file >/dev/null || need+=(file)
command -v script >/dev/null || need+=(bsdutils)
# tests/jail/attacks.rs builds its probe with `gcc -static`, which needs libc.a
command -v gcc >/dev/null || need+=(gcc)
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
# tests/jail/network.rs: curl and git in the jails, openssl for the test CA of its TLS server
# (and of the ingress in tests/operators/kubernetes_hosts.rs)
command -v curl >/dev/null || need+=(curl)
[[ -x /usr/bin/git ]] || need+=(git)
command -v openssl >/dev/null || need+=(openssl)
# tests/operators/doctor.rs syntax-checks the zsh and fish completions (bash is always there)
command -v zsh >/dev/null || need+=(zsh)
command -v fish >/dev/null || need+=(fish)
# tests/operators/containers.rs runs brig inside podman containers (runc: crun refuses hybrid cgroups)
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
# brig(1) and brig-config(5) must render without warnings (man --warnings -l)
command -v man >/dev/null || need+=(man-db)
# tests/operators/deploy.rs verifies the systemd unit (systemd-analyze; the package starts nothing
# where systemd is not PID 1) and parses the AppArmor profile (apparmor_parser; Debian 12's
# is AppArmor 3, which parses all of the profile but its AppArmor 4 `userns,` rule)
command -v systemd-analyze >/dev/null || need+=(systemd)
# tests/operators/deploy.rs also boots the host's own root with systemd as PID 1 in the qemu VM
# (tests/vm/run-in-vm.sh --systemd) and runs the units there: systemd, python3, setpriv
# and ps of this host
command -v ps >/dev/null || need+=(procps)
command -v apparmor_parser >/dev/null || need+=(apparmor)
# tests/operators/cgroup_v2.rs and tests/operators/doctor.rs boot tests/vm/run-in-vm.sh, which installs
# qemu-system-x86 itself (as root) and fetches a Debian kernel into /var/cache/jail-vm.
# tests/jail/rootfs.rs builds the `shell` root from Debian's busybox-static (apt-get download);
# tests/operators/kubernetes_hosts.rs fetches Debian's nginx the same way (tests/net/nginx.sh,
# never installed: its postinst would start a daemon on port 80). Both need the package lists.
apt_lists_known=yes
apt-cache show busybox-static >/dev/null 2>&1 || apt_lists_known=no
if ((${#need[@]})) || [[ $apt_lists_known == no ]]; then
    echo "installing test dependencies: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Rootless, --net filtered creates the jail's TUN device as an ordinary user: that needs
# /dev/net/tun open to everyone, the distributions' default (0666; some VMs make it 0600).
[[ -c /dev/net/tun ]] || modprobe tun
chmod 0666 /dev/net/tun

cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --workspace --all-targets -- -D warnings

cargo build --release
binary=target/x86_64-unknown-linux-gnu/release/brig
if ! file "$binary" | grep -q 'static-pie linked\|statically linked' ||
    ldd "$binary" 2>&1 | grep -q '=>'; then
    echo "FAIL: $binary is not statically linked:" >&2
    file "$binary" >&2
    exit 1
fi
echo "static binary: $(file -b "$binary" | cut -d, -f1-2), $(stat -c %s "$binary") bytes"

# The fuzz targets (fuzz/run.sh: cargo-fuzz with nightly, 20 s each, all at once) run
# while the tests do; a crash fails the run and prints its input.
fuzz_log=$PWD/target/fuzz-run.log
fuzz/run.sh 20 >"$fuzz_log" 2>&1 &
fuzz_pid=$!

# A test whose prerequisite is missing fails, unless BRIG_TEST_ALLOW_SKIP=1: then it
# records the skip here (tests/common/mod.rs, `require`), and this lists them all.
skips=$PWD/target/brig-test-skips
export BRIG_TEST_SKIP_DIR=$skips
rm -rf "$skips"
status=0
# The integration tests are five binaries, one per area (a module per former test file):
# tests/jail/ (brig run), tests/serve/ (the server, sessions, clients), tests/operators/
# (docs, deploy, doctor, containers, the cgroup v2 VMs), tests/host_identity.rs and
# tests/library.rs. cargo runs them one after another, each with its tests in parallel,
# and that is deliberate: host_identity's control runs take all of host root's inotify
# instances and pending signals, podman (operators) adds host mounts that jail's
# leftover checks would count, and the VMs want the CPUs. Run one area alone with
# `cargo test --test jail`, one module with `cargo test --test serve sessions::`.
# --no-fail-fast: one failing binary does not hide the results of the others.
# Its output is kept too: a failing test's message is printed again at the very end,
# where a CI log cut to its head and tail still shows it.
test_log=$PWD/target/test-run.log
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$test_log" || status=$?
# The attack tests' kit (tests/jail/attacks.rs) outlives its test process, which has no
# teardown: remove it here (a later run also sweeps those whose process is gone).
rm -rf "${TMPDIR:-/tmp}"/brig-attacks-*
if [[ -d $skips ]] && skipped=$(cat "$skips"/* 2>/dev/null | sort) && [[ -n $skipped ]]; then
    echo "SKIPPED ($(wc -l <<<"$skipped")):"
    sed 's/^/  /' <<<"$skipped"
fi
if wait "$fuzz_pid"; then
    grep '^fuzz ' "$fuzz_log"
else
    status=1
    echo "FAIL: fuzz/run.sh (log: $fuzz_log):" >&2
    grep -v '^ *\(Compiling\|Downloaded\|Downloading\)' "$fuzz_log" | tail -60 >&2
fi
if ((status)) && grep -q '^---- .* stdout ----$' "$test_log"; then
    echo "FAILED TESTS (each one's first lines; the whole output: $test_log):"
    # Per test: its panic's first lines, and the lines naming an error or assertion.
    awk '/^---- .* stdout ----$/ { block = 1; head = 0; errors = 0; print; next }
         /^(failures:$|test result:|running [0-9]+ tests?$)/ { block = 0 }
         !block || !NF { next }
         head < 4 { print "    " substr($0, 1, 300); head++; next }
         /Error|assert|FAIL/ && errors < 6 { print "    " substr($0, 1, 300); errors++ }' "$test_log"
fi
exit "$status"
