//! A session's `root` (`session_create`'s `"root": true`, then `session_exec`'s
//! `"user": "root"`): uid and gid 0 *inside* the jail's user namespace, mapped to a second
//! per-jail host uid/gid, with no capability. Each test makes the attack and shows the
//! exact errno: root cannot mount, chown to another, read the user's 0600 file, ptrace or
//! signal the user's processes; the user cannot become 0 (setuid, a setuid-root binary
//! root planted), nor ptrace or signal the spawner (the jail's init, which keeps 0 as its
//! real uid). Both host uids are released with the session. Sessions without `root`, and
//! `brig run`, map one id as before. Rootless, and as root with `--host-uid-range off`,
//! `root` is refused with a one-line error naming the fix.

use crate::common;

use common::memory::descendants;
use common::serve::{Server, ask, close_session, create_session};
use common::session::{assert_bad_input, assert_output_lines, client_script, session_cli};
use common::*;
use serde_json::{Value, json};

both_modes!(
    root_runs_as_uid_0_inside_with_no_capability_and_no_more_rights,
    the_user_cannot_become_root_nor_reach_the_spawner,
    root_maps_a_second_host_uid_released_with_the_session,
    sessions_without_root_map_one_id_as_before,
    the_python_and_node_clients_ask_for_root,
    the_command_line_asks_for_root,
);

/// A command's reply in session `id`, as `user` (None: the jail's user).
fn exec_as(server: &Server, id: &str, user: Option<&str>, script: &str) -> Value {
    let mut request =
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", script]});
    if let Some(user) = user {
        request["user"] = json!(user);
    }
    ask(server, request)
}

/// A command that must succeed; its stdout.
fn run_as(server: &Server, id: &str, user: Option<&str>, script: &str) -> String {
    let reply = exec_as(server, id, user, script);
    assert_eq!(reply["type"], "exec", "{script}: {reply}");
    assert_eq!(reply["verdict"]["exit_code"], 0, "{script}: {reply}");
    reply["stdout"].as_str().unwrap_or_default().to_string()
}

/// A Python probe that makes system calls and prints `NAME RESULT ERRNO` for each.
fn probe(calls: &str) -> String {
    format!(
        "python3 -c \"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    result = getattr(libc, name)(*args)
    print(name, result, errno.errorcode.get(ctypes.get_errno(), 0) if result == -1 else 'OK')
{calls}
\""
    )
}

/// A root server's session with `root`; rootless, the refusal is checked and None.
fn root_session(mode: Mode, server: &Server) -> Option<String> {
    if mode == Mode::Rootless {
        let reply = ask(server, json!({"type": "session_create", "root": true}));
        assert_bad_input(&reply, "root: a rootless brig serve maps one id");
        assert!(
            reply["message"]
                .as_str()
                .unwrap()
                .contains("run brig serve as root"),
            "the fix is named: {reply}"
        );
        assert_eq!(server.status()["session_root"], false);
        return None;
    }
    assert_eq!(server.status()["session_root"], true);
    Some(create_session(server, json!({"root": true})))
}

fn root_runs_as_uid_0_inside_with_no_capability_and_no_more_rights(mode: Mode) {
    if !require_program("python3", "apt install python3") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let Some(id) = root_session(mode, &server) else {
        return;
    };
    // Who: 0 inside as root, the user otherwise; root starts in /tmp, its HOME.
    assert_eq!(
        run_as(
            &server,
            &id,
            Some("root"),
            "id -u; id -g; pwd; echo $HOME $USER"
        ),
        "0\n0\n/tmp\n/tmp root\n"
    );
    assert_eq!(run_as(&server, &id, None, "id -u; id -g"), "1000\n1000\n");
    assert_eq!(run_as(&server, &id, Some("sandbox"), "id -u"), "1000\n");
    // No capability in any set, no_new_privs, and the securebits that take uid 0's
    // special treatment at exec away, locked (NOROOT, KEEP_CAPS_LOCKED,
    // NO_CAP_AMBIENT_RAISE, each locked: 0xe3).
    let status = run_as(
        &server,
        &id,
        Some("root"),
        "grep -E '^(Cap|NoNewPrivs)' /proc/self/status",
    );
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            status.contains(&format!("{set}:\t0000000000000000\n")),
            "{set}: {status}"
        );
    }
    assert!(status.contains("NoNewPrivs:\t1\n"), "{status}");
    let securebits = run_as(
        &server,
        &id,
        Some("root"),
        &probe("call('prctl', 27, 0, 0, 0, 0)"),
    );
    assert_eq!(securebits, "prctl 227 OK\n");
    // Root's privileges that a capability would give: none.
    let mounted = run_as(
        &server,
        &id,
        Some("root"),
        &format!(
            "mkdir -p /tmp/x && {}",
            probe("call('mount', b'none', b'/tmp/x', b'tmpfs', 0, None)")
        ),
    );
    assert_eq!(mounted, "mount -1 EPERM\n", "no CAP_SYS_ADMIN");
    run_as(
        &server,
        &id,
        None,
        "echo private > /tmp/users && chmod 600 /tmp/users",
    );
    let files = run_as(
        &server,
        &id,
        Some("root"),
        &format!(
            "touch /tmp/roots && stat -c '%u %g' /tmp/roots && {}",
            probe(
                "call('chown', b'/tmp/roots', 1000, 1000); call('open', b'/tmp/users', 0); call('chmod', b'/tmp/users', 0o644)"
            )
        ),
    );
    assert_eq!(
        files, "0 0\nchown -1 EPERM\nopen -1 EACCES\nchmod -1 EPERM\n",
        "root owns its files; no CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER"
    );
    // The user's home is the user's (0700): root cannot even look in.
    let home = exec_as(&server, &id, Some("root"), "ls /home/sandbox");
    assert_eq!(home["verdict"]["exit_code"], 2, "{home}");
    assert!(
        home["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{home}"
    );
    // Root cannot ptrace or signal the user's processes (another uid; no CAP_SYS_PTRACE,
    // CAP_KILL).
    let sleeper = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sleep", "1000"], "background": true}),
    );
    let pid = sleeper["pid"].as_u64().expect("a background pid");
    let reach = run_as(
        &server,
        &id,
        Some("root"),
        &probe(&format!(
            "call('ptrace', 16, {pid}, 0, 0); call('kill', {pid}, 9)"
        )),
    );
    assert_eq!(reach, "ptrace -1 EPERM\nkill -1 EPERM\n");
    // sudo: nothing to gain. Wherever it is installed, no_new_privs ignores its setuid
    // bit and root has no capability for it to use; here, as root or not, it gives no
    // more than `id` says.
    let sudo = exec_as(&server, &id, None, "sudo -n id -u");
    assert_ne!(sudo["stdout"], "0\n", "{sudo}");
    assert_ne!(sudo["verdict"]["exit_code"], 0, "{sudo}");
    // A cell has no user: refused, naming the field.
    let cell = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "1", "language": "python", "user": "root"}),
    );
    assert_bad_input(&cell, "user: only a command takes one");
    // Anyone else: no such user.
    let other = exec_as(&server, &id, Some("bob"), "true");
    assert_bad_input(
        &other,
        "user \"bob\": the session's jail has no such user; give \"sandbox\" or \"root\"",
    );
    close_session(&server, &id);
}

fn the_user_cannot_become_root_nor_reach_the_spawner(mode: Mode) {
    if !require_program("python3", "apt install python3") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let Some(id) = root_session(mode, &server) else {
        return;
    };
    // The spawner (the jail's init, pid 1) keeps 0 as its real uid and gid, its effective
    // and saved ids the user's.
    let init = run_as(&server, &id, None, "grep -E '^(Uid|Gid)' /proc/1/status");
    assert_eq!(
        init,
        "Uid:\t0\t1000\t1000\t1000\nGid:\t0\t1000\t1000\t1000\n"
    );
    // The user cannot take 0: not by setuid, setresuid, setgid.
    let become_root = run_as(
        &server,
        &id,
        None,
        &probe(
            "call('setuid', 0); call('setresuid', 0, 0, 0); call('setreuid', 0, 0); call('setgid', 0)",
        ),
    );
    assert_eq!(
        become_root,
        "setuid -1 EPERM\nsetresuid -1 EPERM\nsetreuid -1 EPERM\nsetgid -1 EPERM\n"
    );
    // Nor through the spawner, which would give it 0: ptrace (its ids differ, and it is
    // undumpable), its memory, its environment, a signal (Landlock's signal scope).
    let spawner = run_as(
        &server,
        &id,
        None,
        &probe(
            "call('ptrace', 16, 1, 0, 0); call('open', b'/proc/1/mem', 2); call('open', b'/proc/1/environ', 0); call('kill', 1, 9)",
        ),
    );
    assert_eq!(
        spawner,
        "ptrace -1 EPERM\nopen -1 EACCES\nopen -1 EACCES\nkill -1 EPERM\n"
    );
    // Root neither: the spawner's effective uid is the user's; and although root's uid is
    // the spawner's real one, Landlock's signal scope keeps its signals from it.
    let spawner = run_as(
        &server,
        &id,
        Some("root"),
        &probe("call('ptrace', 16, 1, 0, 0); call('open', b'/proc/1/mem', 2); call('kill', 1, 9)"),
    );
    assert_eq!(spawner, "ptrace -1 EPERM\nopen -1 EACCES\nkill -1 EPERM\n");
    // A setuid-root binary root planted gives the user nothing: /tmp is nosuid, and the
    // user's no_new_privs ignores the bit wherever it is.
    let planted = run_as(
        &server,
        &id,
        Some("root"),
        "cp /usr/bin/id /tmp/root-id && chmod 4755 /tmp/root-id && stat -c '%a %u' /tmp/root-id",
    );
    assert_eq!(
        planted, "4755 0\n",
        "the attack is real: a setuid binary of uid 0"
    );
    let ran = run_as(
        &server,
        &id,
        None,
        "/tmp/root-id -u; grep NoNewPrivs /proc/self/status",
    );
    assert_eq!(ran, "1000\nNoNewPrivs:\t1\n");
    // The session still serves, as both.
    assert_eq!(run_as(&server, &id, Some("root"), "id -u"), "0\n");
    assert_eq!(run_as(&server, &id, None, "id -u"), "1000\n");
    close_session(&server, &id);
}

/// The host uids of the processes below `server` whose command is `name`.
fn host_uids_of(server: &Server, name: &str) -> Vec<u32> {
    descendants(server.pid())
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|line| line.starts_with("Uid:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .collect()
}

fn root_maps_a_second_host_uid_released_with_the_session(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let Some(id) = root_session(mode, &server) else {
        return;
    };
    let map = run_as(
        &server,
        &id,
        None,
        "cat /proc/self/uid_map /proc/self/gid_map",
    );
    let lines: Vec<Vec<u64>> = map
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 4, "two ids in each map: {map}");
    let (root_host, user_host) = (lines[0][1], lines[1][1]);
    assert_eq!(lines[0], vec![0, root_host, 1], "{map}");
    assert_eq!(lines[1], vec![1000, user_host, 1], "{map}");
    assert_eq!(lines[2..], lines[..2], "the gid map is the same: {map}");
    assert_ne!(root_host, user_host);
    for host in [root_host, user_host] {
        assert!(
            (0x7000_0000..=0x7000_FFFF).contains(&host),
            "a per-jail host uid, never host root: {host}"
        );
    }
    // Each command's verdict names the host ids it ran as.
    for (user, host) in [(Some("root"), root_host), (None, user_host)] {
        let reply = exec_as(&server, &id, user, "true");
        let identity = &reply["verdict"]["protections"]["host_identity"];
        assert_eq!(identity["uid"], host, "{reply}");
        assert_eq!(identity["gid"], host, "{reply}");
        assert_eq!(identity["mode"], "per-jail", "{reply}");
    }
    // On the host, root's processes are the second uid, the user's the first.
    for user in [Some("root"), None] {
        let mut request = json!({"type": "session_exec", "session": id, "command": ["sleep", "1000"], "background": true});
        if let Some(user) = user {
            request["user"] = json!(user);
        }
        let reply = ask(&server, request);
        assert_eq!(reply["type"], "process", "{reply}");
    }
    let seen = wait_until(std::time::Duration::from_secs(10), || {
        host_uids_of(&server, "sleep").len() == 2
    });
    assert!(seen, "both sleepers run");
    let mut uids = host_uids_of(&server, "sleep");
    uids.sort();
    let mut expected = vec![root_host as u32, user_host as u32];
    expected.sort();
    assert_eq!(uids, expected, "root's process runs as the second host uid");
    // Both uids are held while the session lives, and released with it.
    let lock = |uid: u64| std::path::Path::new("/run/brig-host-uids").join(uid.to_string());
    assert!(lock(root_host).exists() && lock(user_host).exists());
    close_session(&server, &id);
    let released = wait_until(std::time::Duration::from_secs(10), || {
        !lock(root_host).exists() && !lock(user_host).exists()
    });
    assert!(released, "both host uids are released after the session");
}

fn sessions_without_root_map_one_id_as_before(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    // The fields' defaults may be given as well.
    let id = create_session(&server, json!({"root": false}));
    assert_eq!(run_as(&server, &id, None, "id -u"), "1000\n");
    let reply = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["id", "-u"], "user": null}),
    );
    assert_eq!(reply["stdout"], "1000\n", "{reply}");
    close_session(&server, &id);
    let id = create_session(&server, json!({}));
    let map = run_as(
        &server,
        &id,
        None,
        "cat /proc/self/uid_map /proc/self/gid_map; grep -E '^(Uid|Gid)' /proc/1/status",
    );
    let lines: Vec<&str> = map.lines().collect();
    assert_eq!(lines.len(), 4, "one id in each map: {map}");
    assert!(lines[0].split_whitespace().next() == Some("1000"), "{map}");
    assert_eq!(
        lines[2], "Uid:\t1000\t1000\t1000\t1000",
        "init has the user's ids only"
    );
    // Root is refused there, naming the fix.
    let refused = exec_as(&server, &id, Some("root"), "id -u");
    assert_bad_input(
        &refused,
        "user \"root\": this session was created without root",
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("\"root\": true"),
        "{refused}"
    );
    close_session(&server, &id);
    // A one-shot run: one id.
    let output = server.run(&[], &["cat", "/proc/self/uid_map"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).lines().count(),
        1,
        "{output:?}"
    );
    // As root with host ids shared by every jail, root is refused: 0 would have no host
    // id of its own.
    if mode == Mode::Root {
        let shared = Server::start(mode, &["--pool", "0", "--host-uid-range", "off"]);
        assert_eq!(shared.status()["session_root"], false);
        let reply = ask(&shared, json!({"type": "session_create", "root": true}));
        assert_bad_input(
            &reply,
            "root: brig serve maps every jail to one shared host id",
        );
        assert!(
            reply["message"]
                .as_str()
                .unwrap()
                .contains("--host-uid-range"),
            "{reply}"
        );
    }
}

const PYTHON_CLIENT: &str = r#"
import sys, brig_client
try:
    sb = brig_client.Sandbox(sys.argv[1], root=True)
except brig_client.BrigError as err:
    print("refused:", "rootless" in str(err))
    raise SystemExit
print(sb.commands.run("id -u", user="root").stdout.strip(), sb.commands.run("id -u").stdout.strip())
sb.close()
"#;

const NODE_CLIENT: &str = r#"
const [module, socket] = process.argv.slice(1);
const { Sandbox } = require(module);
(async () => {
  let sb;
  try {
    sb = await Sandbox.create({ socket, root: true });
  } catch (err) {
    console.log("refused:", String(err.message).includes("rootless"));
    return;
  }
  const root = await sb.commands.run("id -u", { user: "root" });
  const user = await sb.commands.run("id -u");
  console.log(root.stdout.trim(), user.stdout.trim());
  await sb.close();
})().catch((err) => { console.error(err); process.exit(1); });
"#;

fn the_python_and_node_clients_ask_for_root(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let expected = match mode {
        Mode::Root => "0 1000",
        Mode::Rootless => "refused: True",
    };
    if require_program("python3", "apt install python3") {
        let output = client_script(mode, "python", PYTHON_CLIENT, &server);
        assert_output_lines(&output, &[expected]);
    }
    if require_program("node", "apt install nodejs") {
        let output = client_script(mode, "node", NODE_CLIENT, &server);
        let expected = expected.replace("True", "true");
        assert_output_lines(&output, &[expected.as_str()]);
    }
}

fn the_command_line_asks_for_root(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let created = run(
        mode,
        &["session", "create", "--server", server.socket(), "--root"],
    );
    if mode == Mode::Rootless {
        assert_eq!(code(&created), 125, "{}", describe(&created));
        let stderr = String::from_utf8_lossy(&created.stderr);
        assert!(
            stderr.contains("root: a rootless brig serve maps one id"),
            "{stderr}"
        );
        return;
    }
    let id = assert_success(&created).trim().to_string();
    let as_root = session_cli(
        mode,
        &server,
        &id,
        &["exec", "--user", "root", "--", "id", "-u"],
    );
    assert_eq!(assert_success(&as_root), "0\n");
    let as_user = session_cli(mode, &server, &id, &["exec", "--", "id", "-u"]);
    assert_eq!(assert_success(&as_user), "1000\n");
    let nobody = session_cli(
        mode,
        &server,
        &id,
        &["exec", "--user", "bob", "--", "id", "-u"],
    );
    assert_eq!(code(&nobody), 125, "{}", describe(&nobody));
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("user \"bob\""),
        "{}",
        describe(&nobody)
    );
    assert_success(&session_cli(mode, &server, &id, &["close"]));
}
