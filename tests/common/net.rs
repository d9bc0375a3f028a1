//! The network tests' servers (tests/net/servers.py) as a Rust value: started on this host
//! with ephemeral ports, stopped (stdin closed, then killed by pid) when dropped.

use super::*;
use serde_json::Value;
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::process::ChildStdin;

pub struct Servers {
    pub http: u16,
    pub tls: u16,
    pub echo: u16,
    pub udp: u16,
    pub dns: SocketAddr,
    /// The test CA that signed the TLS server's certificate (in `state_dir`, readable by all).
    pub ca: PathBuf,
    log: PathBuf,
    state: TempDir,
    stdin: Option<ChildStdin>,
    child: Child,
}

impl Servers {
    /// The servers, with the DNS stub on an ephemeral port of 127.0.0.1.
    pub fn start() -> Servers {
        Servers::start_with_dns("127.0.0.1".parse().unwrap(), 0)
    }

    /// The servers listening on `address` (another loopback address than 127.0.0.1, for
    /// a test that tells two servers apart by address), the DNS stub on 127.0.0.1.
    pub fn start_on(address: IpAddr) -> Servers {
        Servers::start_bound(address, "127.0.0.1".parse().unwrap(), 0)
    }

    /// The servers, with the DNS stub on `address:port` (port 53 for a stub named in a
    /// resolv.conf; needs root).
    pub fn start_with_dns(address: IpAddr, port: u16) -> Servers {
        Servers::start_bound("127.0.0.1".parse().unwrap(), address, port)
    }

    fn start_bound(bind: IpAddr, address: IpAddr, port: u16) -> Servers {
        require_program("openssl", "apt install openssl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/net/servers.py");
        let state = TempDir::new("net-servers");
        let mut child = Command::new(interpreter("python3"))
            .arg(&script)
            .args(["--state", state.str()])
            .args(["--bind", &bind.to_string()])
            .args([
                "--dns-address",
                &address.to_string(),
                "--dns-port",
                &port.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("start {}: {err}", script.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = receiver
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_default();
        let ready: Value = match serde_json::from_str(&line) {
            Ok(ready) => ready,
            Err(_) => {
                kill(child.id(), libc::SIGKILL);
                let _ = child.wait();
                panic!("tests/net/servers.py did not start (it printed {line:?})");
            }
        };
        let port = |key: &str| ready[key].as_u64().expect(key) as u16;
        let dns_address: IpAddr = ready["dns"][0]
            .as_str()
            .expect("dns")
            .parse()
            .expect("dns address");
        Servers {
            http: port("http"),
            tls: port("tls"),
            echo: port("echo"),
            udp: port("udp"),
            dns: SocketAddr::new(
                dns_address,
                ready["dns"][1].as_u64().expect("dns port") as u16,
            ),
            ca: PathBuf::from(ready["ca"].as_str().expect("ca")),
            log: PathBuf::from(ready["log"].as_str().expect("log")),
            state,
            stdin: child.stdin.take(),
            child,
        }
    }

    /// The directory holding `ca.pem` (0755), for `--ro-bind DIR:/ca`.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// Every JSON line the servers logged so far: requests, connections, datagrams, queries.
    pub fn log(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// A bare git repository served at `/git/NAME.git` (git's dumb HTTP protocol) with
    /// one commit holding `files` (name, contents).
    pub fn git_repository(&self, name: &str, files: &[(&str, &str)]) {
        let work = self.state.path().join(format!("{name}-work"));
        let bare = self.state.path().join(format!("git/{name}.git"));
        std::fs::create_dir_all(&work).expect("work tree");
        for (file, contents) in files {
            std::fs::write(work.join(file), contents).expect("write a file");
        }
        let git = |dir: &Path, args: &[&str]| {
            let output = Command::new("git")
                .args([
                    "-c",
                    "user.name=brig tests",
                    "-c",
                    "user.email=tests@brig.invalid",
                ])
                .args(args)
                .current_dir(dir)
                .output()
                .expect("run git");
            assert!(
                output.status.success(),
                "git {args:?}: {}",
                describe(&output)
            );
        };
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "first"]);
        git(
            &work,
            &["clone", "-q", "--bare", ".", bare.to_str().unwrap()],
        );
        git(&bare, &["update-server-info"]);
    }

    /// The names the DNS stub was asked about.
    pub fn dns_queries(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| entry["server"] == "dns")
            .filter_map(|entry| entry["name"].as_str().map(String::from))
            .collect()
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let pid = self.child.id();
        let ended = wait_until(Duration::from_secs(5), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !ended {
            kill(pid, libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Two sets of servers told apart by address, 127.0.0.2 and 127.0.0.3 (for a deny rule
/// naming one's address), with [`TwoByAddress::SERVE_ARGS`] for a `brig serve` whose
/// sessions reach them by name.
pub struct TwoByAddress {
    /// On 127.0.0.2, pinned as `web.test`.
    pub web: Servers,
    /// On 127.0.0.3, pinned as `other.test`.
    pub other: Servers,
}

impl TwoByAddress {
    /// `brig serve` options: filtered, `web.test` and `other.test` pinned to the two
    /// addresses and listed, and clients let to shape their network (a deny list lets
    /// out more than the list: `--client-may allow-net`).
    pub const SERVE_ARGS: [&'static str; 12] = [
        "--net",
        "filtered",
        "--add-host",
        "web.test:127.0.0.2",
        "--add-host",
        "other.test:127.0.0.3",
        "--allow-net",
        "web.test",
        "--allow-net",
        "other.test",
        "--client-may",
        "allow-net",
    ];

    pub fn start() -> TwoByAddress {
        TwoByAddress {
            web: Servers::start_on("127.0.0.2".parse().unwrap()),
            other: Servers::start_on("127.0.0.3".parse().unwrap()),
        }
    }
}

/// Rootless, brig creates the TUN device as uid 65534: `/dev/net/tun` must be 0666, the
/// distributions' default (tests/run.sh and .ci/run make it so on hosts that differ).
pub fn require_tun(mode: Mode) -> bool {
    let tun = Path::new("/dev/net/tun");
    let usable = match mode {
        Mode::Root => tun.exists(),
        Mode::Rootless => tun
            .metadata()
            .is_ok_and(|meta| meta.permissions().mode() & 0o006 == 0o006),
    };
    require(
        "a /dev/net/tun that this user may open",
        "modprobe tun; chmod 0666 /dev/net/tun (the distributions' default)",
        usable,
    )
}
