//! E2B's `user="root"` through the pinned Python SDK (tests/serve/gateway.rs): behind a
//! root `brig serve` (per-jail host uids) a sandbox's commands run as uid 0 *inside* its
//! user namespace, with no capability: the attacks root's privileges would allow fail
//! with their exact errno, and `sudo` gives nothing. Root's background command is killed
//! like any. Behind a rootless server `user="root"` is the SDK's InvalidArgumentException
//! with the one-line reason, and the jail maps one id. Files are never done as root
//! (the workspace is the user's, which root cannot enter): refused with the reason, in
//! both modes.

use crate::common;

use super::gateway::{Gateway, KEY_A, assert_passed, with_args};
use common::serve::Server;
use common::*;

both_modes!(e2b_user_root_is_uid_0_inside_without_capabilities);

const ROOT: &str = r#"
import sys
from e2b import Sandbox, CommandExitException, InvalidArgumentException
rootless = sys.argv[2] == "rootless"
sbx = Sandbox.create()
assert sbx.commands.run("id -u; id -g").stdout == "1000\n1000\n"

PROBE = (
    "import ctypes, errno\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def call(name, *args):\n"
    "    result = getattr(libc, name)(*args)\n"
    "    print(name, result, errno.errorcode.get(ctypes.get_errno(), 0) if result == -1 else 'OK')\n"
)

def run_python(calls, user):
    """System calls made as `user`, each printed as NAME RESULT ERRNO (through a
    here-document: no quoting to get wrong)."""
    script = PROBE + calls
    return sbx.commands.run("python3 - <<'EOF'\n" + script + "\nEOF", user=user).stdout

if rootless:
    try:
        sbx.commands.run("id -u", user="root")
        raise SystemExit("a command ran as root behind a rootless server")
    except InvalidArgumentException as err:
        assert 'user "root": this brig serve runs rootless' in str(err), err
        assert "run brig serve as root" in str(err) and "\n" not in str(err), err
    mapped = sbx.commands.run("cat /proc/self/uid_map").stdout.split()
    assert mapped[0] == "1000" and len(mapped) == 3, mapped  # one id
    # uid 0 is not mapped: setuid(0) is EINVAL.
    assert run_python("call('setuid', 0)", None) == "setuid -1 EINVAL\n"
else:
    result = sbx.commands.run("id -u; id -g; pwd; echo $HOME $USER", user="root")
    assert result.stdout == "0\n0\n/tmp\n/tmp root\n", result
    assert sbx.commands.run("pwd", user="root", cwd="/").stdout == "/\n"
    mapped = [line.split() for line in sbx.commands.run("cat /proc/self/uid_map").stdout.splitlines()]
    assert [line[0] for line in mapped] == ["0", "1000"], mapped
    assert mapped[0][1] != mapped[1][1] and "0" not in (mapped[0][1], mapped[1][1]), mapped
    # No capability in any set, and no_new_privs.
    status = sbx.commands.run("grep -E '^(Cap|NoNewPrivs)' /proc/self/status", user="root").stdout
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{name}:\t0000000000000000\n" in status, status
    assert "NoNewPrivs:\t1\n" in status, status
    # What a capability would allow: mount (CAP_SYS_ADMIN), chown to someone else
    # (CAP_CHOWN), reading the user's 0600 file (CAP_DAC_OVERRIDE).
    sbx.commands.run("mkdir -p /tmp/x; echo private > /tmp/users; chmod 600 /tmp/users")
    attacks = run_python(
        "call('mount', b'none', b'/tmp/x', b'tmpfs', 0, None)\n"
        "open('/tmp/roots', 'w').close()\n"
        "call('chown', b'/tmp/roots', 1000, 1000)\n"
        "call('open', b'/tmp/users', 0)",
        "root",
    )
    assert attacks == "mount -1 EPERM\nchown -1 EPERM\nopen -1 EACCES\n", attacks
    assert sbx.commands.run("stat -c '%u %g' /tmp/roots").stdout == "0 0\n"
    # sudo: nothing more, as root or as the user (absent here, or no setuid effect).
    for user in ("root", None):
        try:
            result = sbx.commands.run("sudo -n id -u", user=user)
            raise SystemExit(f"sudo succeeded: {result}")
        except CommandExitException as err:
            assert err.exit_code != 0, err
    # The user cannot become 0.
    assert run_python("call('setuid', 0)\ncall('setresuid', 0, 0, 0)", None) == "setuid -1 EPERM\nsetresuid -1 EPERM\n"
    # Root's background command is listed and killed like any.
    sleeper = sbx.commands.run("sleep 600", background=True, user="root")
    assert sleeper.pid in [process.pid for process in sbx.commands.list()]
    assert sbx.commands.kill(sleeper.pid) is True
    try:
        sleeper.wait()
        raise SystemExit("a killed command raised nothing")
    except CommandExitException as err:
        assert (err.exit_code, err.error) == (-1, "signal: killed"), err

# Files are the workspace's, the user's alone: not done as root, in either mode.
for attempt in (
    lambda: sbx.files.write("as-root.txt", "x", user="root"),
    lambda: sbx.files.read("as-root.txt", user="root"),
    lambda: sbx.files.list(".", user="root"),
    lambda: sbx.files.make_dir("as-root", user="root"),
):
    try:
        attempt()
        raise SystemExit("a file operation ran as root")
    except InvalidArgumentException as err:
        assert "root inside cannot enter" in str(err), err
assert not sbx.files.exists("as-root.txt") and not sbx.files.exists("as-root")
sbx.kill()
print("PASS")
"#;

fn e2b_user_root_is_uid_0_inside_without_capabilities(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let mode_name = match mode {
        Mode::Root => "root",
        Mode::Rootless => "rootless",
    };
    assert_passed(gateway.sdk(KEY_A, &with_args(ROOT, &[mode_name])));
}
