//! A `brig serve` for the server tests (tests/serve/server.rs, tests/serve/clients.rs), and the
//! protocol spoken by hand.

use super::*;
use serde_json::Value;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// A `brig serve` started by the test, stopped (SIGTERM, then waited for) when dropped.
pub struct Server {
    pub mode: Mode,
    pub running: Option<Running>,
    pub socket: PathBuf,
    _dir: TempDir,
}

impl Server {
    /// A server with `--quiet-limits` (tests compare outputs across hosts) and `args`.
    pub fn start(mode: Mode, args: &[&str]) -> Server {
        let mut all = vec!["--quiet-limits"];
        all.extend_from_slice(args);
        Server::start_under(mode, &[], &all)
    }

    /// A server with exactly `args` (besides its socket).
    pub fn start_with(mode: Mode, args: &[&str]) -> Server {
        Server::start_under(mode, &[], args)
    }

    /// A server started through `wrapper` (e.g. `prlimit --nofile=1024:4096 --`), with
    /// exactly `args` (besides its socket).
    pub fn start_under(mode: Mode, wrapper: &[&str], args: &[&str]) -> Server {
        // Writable by the rootless server, sticky: brig refuses a socket directory
        // where others could rename its socket away.
        let dir = TempDir::new("serve");
        set_mode(dir.path(), 0o1777);
        let socket = dir.path().join("brig.sock");
        let mut all = vec!["serve", "--socket", socket.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut argv: Vec<std::ffi::OsString> = wrapper.iter().map(Into::into).collect();
        argv.extend(super::argv(mode, &all));
        let mut command = command_from(&argv);
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let running = Running::spawn(command);
        let up = wait_until(Duration::from_secs(10), || {
            UnixStream::connect(&socket).is_ok()
        });
        assert!(up, "brig serve did not listen on {}", socket.display());
        Server {
            mode,
            running: Some(running),
            socket,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.running.as_ref().expect("running").pid()
    }

    pub fn socket(&self) -> &str {
        self.socket.to_str().unwrap()
    }

    /// `brig run --server SOCKET ARGS -- PROGRAM`, as the server's user.
    pub fn run(&self, args: &[&str], program: &[&str]) -> Output {
        let mut all = vec!["run", "--server", self.socket()];
        all.extend_from_slice(args);
        all.push("--");
        all.extend_from_slice(program);
        run(self.mode, &all)
    }

    pub fn status(&self) -> Value {
        let reply = exchange(&self.socket, br#"{"brig":1,"type":"status"}"#, &[]);
        assert_eq!(reply["type"], "status", "{reply}");
        reply
    }

    /// SIGTERM, and the server's stderr once it has drained and exited.
    pub fn stop(&mut self) -> Output {
        let running = self.running.take().expect("running");
        kill(running.pid(), libc::SIGTERM);
        running.wait()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.running.is_some() {
            let output = self.stop();
            // A test already failing says why; a second panic here would abort the
            // binary and leave its other servers running (seen after a watchdog kill).
            if std::thread::panicking() {
                return;
            }
            assert!(output.status.success(), "brig serve: {}", describe(&output));
            assert!(!self.socket.exists(), "the socket outlived the server");
        }
    }
}

/// One request on a fresh connection, with descriptors; the server's reply.
pub fn exchange(socket: &PathBuf, body: &[u8], fds: &[i32]) -> Value {
    let stream = UnixStream::connect(socket).expect("connect");
    send_frame(&stream, body, fds);
    read_reply(&stream).expect("a reply")
}

pub fn send_frame(stream: &UnixStream, body: &[u8], fds: &[i32]) {
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    let iov = [std::io::IoSlice::new(&frame)];
    let rights = [nix::sys::socket::ControlMessage::ScmRights(fds)];
    let control: &[nix::sys::socket::ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    nix::sys::socket::sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        control,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("send a frame");
}

/// brig's own lines on stderr (`brig: ...`), without the program's.
pub fn brig_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.starts_with("brig: "))
        .map(String::from)
        .collect()
}

pub fn read_reply(mut stream: &UnixStream) -> Option<Value> {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Server {
    /// A server on an existing socket path (one a killed server left).
    pub fn start_at(mode: Mode, socket: &std::path::Path, args: &[&str]) -> Server {
        let dir = TempDir::new("serve-again");
        let mut all = vec![
            "serve",
            "--socket",
            socket.to_str().unwrap(),
            "--quiet-limits",
        ];
        all.extend_from_slice(args);
        let mut command = command(mode, &all);
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let running = Running::spawn(command);
        assert!(wait_until(Duration::from_secs(10), || UnixStream::connect(
            socket
        )
        .is_ok()));
        Server {
            mode,
            running: Some(running),
            socket: socket.to_path_buf(),
            _dir: dir,
        }
    }
}

/// A listener that takes one connection and prints how many bytes and descriptors the
/// first frame brought (up to end of file), as uid 4242: neither root nor 65534.
const FAKE_LISTENER: &str = r#"
import array, os, socket, struct, sys
os.umask(0)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
# Bound under another name and moved into place once listening: a client that sees the
# path can connect (seen: ECONNREFUSED between bind and listen on a loaded machine).
server.bind(sys.argv[1] + ".binding")
server.listen()
os.rename(sys.argv[1] + ".binding", sys.argv[1])
connection, _ = server.accept()
data, fds = b"", array.array("i")
while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
    message, ancillary, _, _ = connection.recvmsg(1 << 20, socket.CMSG_SPACE(16 * 4))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % 4])
    if not message:
        break
    data += message
print(len(data), len(fds), flush=True)
"#;

pub fn fake_listener(dir: &TempDir, name: &str) -> (Running, PathBuf) {
    let socket = dir.path().join(name);
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=4242", "--regid=4242", "--clear-groups"])
        .arg(interpreter("python3"))
        .args(["-c", FAKE_LISTENER])
        .arg(&socket)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let running = Running::spawn(command);
    assert!(
        wait_until(Duration::from_secs(10), || socket.exists()),
        "the fake listener did not bind {}",
        socket.display()
    );
    (running, socket)
}

/// A copy of `clients/NAME` that uid 65534 can read (the checkout may not be).
pub fn client_copy(name: &str) -> TempDir {
    readable_copy(&Path::new("clients").join(name))
}

/// A copy of the checkout's `PATH` (a file or a directory), as `DIR/NAME` in the
/// directory returned, that uid 65534 can read.
pub fn readable_copy(path: &Path) -> TempDir {
    let name = path.file_name().unwrap();
    let dir = TempDir::new(&format!("client-{}", name.to_str().unwrap()));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(&source)
        .arg(dir.path().join(name))
        .status()
        .expect("cp");
    assert!(copied.success());
    std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir.path())
        .status()
        .expect("chmod");
    dir
}

/// Node running `script` with a readable copy of clients/node as `process.argv[1]` and
/// `socket` as `process.argv[2]`, as the mode's user.
pub fn run_node_client(mode: Mode, script: &str, socket: &str) -> Output {
    let client = client_copy("node");
    let module = client.path().join("node");
    output_of(command_as(
        mode,
        interpreter("node"),
        &["-e", script, "--", module.to_str().unwrap(), socket],
    ))
}

/// One request (with its `brig` version) sent as uid and gid 65534 (setpriv, as root);
/// the reply's text on stdout.
pub fn exchange_as_nobody(socket: &str, request: &Value) -> Output {
    let script = format!(
        "import socket,struct\ns=socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\nb={:?}.encode()\ns.sendall(struct.pack('>I',len(b))+b)\nn=struct.unpack('>I',s.recv(4))[0]\nprint(s.recv(n).decode())",
        request.to_string()
    );
    let mut foreign = Command::new("setpriv");
    foreign.args(["--reuid=65534", "--regid=65534", "--groups=65534"]);
    foreign.arg(interpreter("python3")).args(["-c", &script]);
    output_of(foreign)
}

// Sessions, spoken by hand (tests/serve/sessions.rs, tests/serve/session_processes.rs).

/// One request on a fresh connection (the test's own uid: root, which every server admits).
pub fn ask(server: &Server, mut message: Value) -> Value {
    message["brig"] = serde_json::json!(1);
    exchange(&server.socket, message.to_string().as_bytes(), &[])
}

/// A session created with `extra` fields; its id.
pub fn create_session(server: &Server, extra: Value) -> String {
    let mut message = serde_json::json!({"type": "session_create"});
    for (key, value) in extra.as_object().into_iter().flatten() {
        message[key] = value.clone();
    }
    let reply = ask(server, message);
    assert_eq!(reply["type"], "session", "{reply}");
    let id = reply["session"].as_str().expect("an id").to_string();
    assert_eq!(id.len(), 32, "{reply}");
    id
}

pub fn close_session(server: &Server, id: &str) {
    let reply = ask(
        server,
        serde_json::json!({"type": "session_close", "session": id}),
    );
    assert_eq!(reply["type"], "closed", "{reply}");
}

/// The server's runner processes (one per pooled or open session).
pub fn runners(server: &Server) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", server.pid()))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
}
