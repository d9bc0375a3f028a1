//! A session's files API, for real, as root and rootless: stat, exists, mkdir, rename,
//! remove and deep listings with their errors; files of any size streamed on the
//! connection (a 100+ MiB binary round trip, the runner's memory bounded); every new
//! request refused a way out of the workspace (`..`, absolute, symlinks the jail plants,
//! through subdirectories); directory watchers (events in order, overflow, caps, another
//! uid; streamed: events as they happen, on the command line too, a reader that stalls dropped and counted, ended by
//! unwatch, hang-up and the session's close); nothing left after a broken transfer or the session's close.

use crate::common;

use common::serve::{Server, ask, create_session, read_reply, send_frame};
use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

both_modes!(
    files_requests_do_what_they_say,
    a_large_binary_file_streams_both_ways_in_bounded_memory,
    a_broken_or_oversized_write_leaves_nothing,
    no_files_request_leads_out_of_the_workspace,
    watchers_report_changes_in_order,
    watchers_are_bounded,
    a_streamed_watcher_sends_events_as_they_happen,
    the_command_line_watches_a_directory,
    python_client_files,
    node_client_files,
    the_command_line_streams_and_manages_files,
    a_stalled_or_drained_transfer_is_cut,
);

pub(crate) fn sh(server: &Server, id: &str, script: &str) -> Value {
    let reply = ask(
        server,
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", script]}),
    );
    assert_eq!(reply["type"], "exec", "{reply}");
    assert_eq!(reply["verdict"]["exit_code"], 0, "{script}: {reply}");
    reply
}

pub(crate) fn op(server: &Server, id: &str, kind: &str, fields: Value) -> Value {
    let mut message = json!({"type": kind, "session": id});
    for (key, value) in fields.as_object().into_iter().flatten() {
        message[key] = value.clone();
    }
    ask(server, message)
}

fn assert_error(reply: &Value, needle: &str) {
    assert_eq!(reply["type"], "error", "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    assert!(!message.contains('\n'), "{message:?}");
    assert_eq!(reply["exit_code"], 125, "{reply}");
    assert_eq!(reply["kind"], "bad_input", "{reply}");
}

pub(crate) fn connect(server: &Server, message: Value) -> UnixStream {
    let mut message = message;
    message["brig"] = json!(1);
    let stream = UnixStream::connect(&server.socket).expect("connect");
    send_frame(&stream, message.to_string().as_bytes(), &[]);
    stream
}

/// A streamed write: the request, `ready`, the bytes, the final reply (or the first
/// error).
fn write_file(server: &Server, id: &str, path: &str, data: &[u8]) -> Value {
    let mut stream = connect(
        server,
        json!({"type": "session_write", "session": id, "path": path, "size": data.len()}),
    );
    let ready = read_reply(&stream).expect("a first reply");
    if ready["type"] != "ready" {
        return ready;
    }
    // A write cut short by the runner ends in EPIPE here; its reply is still there.
    let _ = stream.write_all(data);
    read_reply(&stream).expect("a reply")
}

/// A streamed read: the data, or the error reply.
fn read_file(server: &Server, id: &str, path: &str) -> Result<Vec<u8>, Value> {
    let mut stream = connect(
        server,
        json!({"type": "session_read", "session": id, "path": path}),
    );
    let header = read_reply(&stream).expect("a first reply");
    if header["type"] != "reading" {
        return Err(header);
    }
    let length = header["length"].as_u64().unwrap() as usize;
    let mut data = vec![0u8; length];
    stream.read_exact(&mut data).expect("the whole file");
    // Nothing after the data: the runner closes its end.
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{} bytes after the data", rest.len());
    Ok(data)
}

fn names(listing: &Value, key: &str) -> Vec<String> {
    listing["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {listing}"))
        .iter()
        .map(|entry| entry[key].as_str().unwrap().to_string())
        .collect()
}

/// The session runners of a server without a pool: its children.
fn runners(server: &Server) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", server.pid()))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
}

/// A field of /proc/PID/status in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn files_requests_do_what_they_say(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    sh(
        &server,
        &id,
        "mkdir -p a/b && printf hello > a/b/f.txt && chmod 640 a/b/f.txt && ln -s b/f.txt a/link",
    );

    // stat: a file, a directory, a symlink (as itself, with its target), the workspace.
    let file = op(&server, &id, "session_stat", json!({"path": "a/b/f.txt"}));
    assert_eq!(file["type"], "stat", "{file}");
    let entry = &file["entry"];
    assert_eq!(entry["name"], "f.txt");
    assert_eq!(entry["path"], "a/b/f.txt");
    assert_eq!(entry["type"], "file");
    assert_eq!(entry["size"], 5);
    assert_eq!(entry["mode"], 0o640);
    let jail_uid = sh(&server, &id, "id -u")["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap();
    assert_eq!(entry["uid"], jail_uid, "{entry}");
    assert!(entry["mtime"].as_f64().unwrap() > 1.6e9, "{entry}");
    let link = op(&server, &id, "session_stat", json!({"path": "./a/link"}));
    assert_eq!(link["entry"]["type"], "symlink", "{link}");
    assert_eq!(link["entry"]["symlink_target"], "b/f.txt", "{link}");
    assert_eq!(
        op(&server, &id, "session_stat", json!({"path": "a"}))["entry"]["type"],
        "dir"
    );
    assert_eq!(
        op(&server, &id, "session_stat", json!({"path": "."}))["entry"]["type"],
        "dir"
    );
    assert_error(
        &op(&server, &id, "session_stat", json!({"path": "nope"})),
        "no such file",
    );

    // exists
    for (path, there) in [
        ("a/b/f.txt", true),
        ("a/link", true),
        ("missing", false),
        ("a/b/f.txt/under", false),
        ("x/y/z", false),
    ] {
        let reply = op(&server, &id, "session_exists", json!({"path": path}));
        assert_eq!(reply["exists"], there, "{path}: {reply}");
    }

    // mkdir: with parents (the default), without, already there, over a file.
    let made = op(&server, &id, "session_mkdir", json!({"path": "m/n/o"}));
    assert_eq!(made["created"], true, "{made}");
    let again = op(&server, &id, "session_mkdir", json!({"path": "m/n/o"}));
    assert_eq!(again["created"], false, "{again}");
    assert_error(
        &op(
            &server,
            &id,
            "session_mkdir",
            json!({"path": "p/q", "parents": false}),
        ),
        "no such file",
    );
    assert_error(
        &op(&server, &id, "session_mkdir", json!({"path": "a/b/f.txt"})),
        "exists and is not a directory",
    );
    sh(&server, &id, "test -d m/n/o");

    // rename: a file into a directory, a directory, errors.
    let moved = op(
        &server,
        &id,
        "session_rename",
        json!({"source": "a/b/f.txt", "destination": "m/g.txt"}),
    );
    assert_eq!(moved["type"], "renamed", "{moved}");
    sh(
        &server,
        &id,
        "test \"$(cat m/g.txt)\" = hello && ! test -e a/b/f.txt",
    );
    let moved = op(
        &server,
        &id,
        "session_rename",
        json!({"source": "m/n", "destination": "a/n2"}),
    );
    assert_eq!(moved["type"], "renamed", "{moved}");
    sh(&server, &id, "test -d a/n2/o");
    assert_error(
        &op(
            &server,
            &id,
            "session_rename",
            json!({"source": "gone", "destination": "x"}),
        ),
        "no such file",
    );
    assert_error(
        &op(
            &server,
            &id,
            "session_rename",
            json!({"source": "a", "destination": "a/n2/inside"}),
        ),
        "beneath itself",
    );
    assert_error(
        &op(
            &server,
            &id,
            "session_rename",
            json!({"source": ".", "destination": "x"}),
        ),
        "workspace itself",
    );

    // ls with depth: paths relative to the workspace, sorted; depth 1 is today's ls.
    let deep = op(&server, &id, "session_ls", json!({"path": "a", "depth": 3}));
    assert_eq!(
        names(&deep, "path"),
        ["a/b", "a/link", "a/n2", "a/n2/o"],
        "{deep}"
    );
    assert_eq!(deep["truncated"], false);
    let shallow = op(&server, &id, "session_ls", json!({"path": "a", "depth": 1}));
    assert_eq!(names(&shallow, "name"), ["b", "link", "n2"], "{shallow}");
    assert_error(
        &op(&server, &id, "session_ls", json!({"path": ".", "depth": 0})),
        "\"depth\" 0 is out of range",
    );
    assert_error(
        &op(
            &server,
            &id,
            "session_ls",
            json!({"path": ".", "depth": 65}),
        ),
        "\"depth\" 65",
    );

    // remove: a file, a directory tree, a missing path, the workspace itself.
    let removed = op(&server, &id, "session_remove", json!({"path": "m/g.txt"}));
    assert_eq!(removed["removed"], 1, "{removed}");
    let removed = op(&server, &id, "session_remove", json!({"path": "a"}));
    // a, a/b, a/link, a/n2, a/n2/o
    assert_eq!(removed["removed"], 5, "{removed}");
    assert_error(
        &op(&server, &id, "session_remove", json!({"path": "a"})),
        "no such file",
    );
    assert_error(
        &op(&server, &id, "session_remove", json!({"path": "."})),
        "workspace itself",
    );
    sh(&server, &id, "test ! -e a && test -d m");

    // Streamed write and read, small and empty; a read of a range; read errors.
    assert_eq!(
        write_file(&server, &id, "w/x.bin", b"\0\x01\xffdata")["size"],
        7
    );
    assert_eq!(
        read_file(&server, &id, "w/x.bin").unwrap(),
        b"\0\x01\xffdata"
    );
    assert_eq!(write_file(&server, &id, "empty", b"")["size"], 0);
    assert_eq!(read_file(&server, &id, "empty").unwrap(), b"");
    let mut ranged = connect(
        &server,
        json!({"type": "session_read", "session": id, "path": "w/x.bin", "offset": 3, "length": 2}),
    );
    let header = read_reply(&ranged).unwrap();
    assert_eq!(
        (&header["size"], &header["length"]),
        (&json!(7), &json!(2)),
        "{header}"
    );
    let mut two = Vec::new();
    ranged.read_to_end(&mut two).unwrap();
    assert_eq!(two, b"da");
    assert_error(
        &read_file(&server, &id, "w").unwrap_err(),
        "not a regular file",
    );
    assert_error(
        &read_file(&server, &id, "none").unwrap_err(),
        "no such file",
    );
    // put/get see what the stream wrote; the session goes on.
    let got = op(&server, &id, "session_get", json!({"path": "w/x.bin"}));
    assert_eq!(got["size"], 7, "{got}");
    close(&server, &id);
}

fn close(server: &Server, id: &str) {
    let reply = ask(server, json!({"type": "session_close", "session": id}));
    assert_eq!(reply["type"], "closed", "{reply}");
}

/// Bytes no compressor or dedup could shortcut, every byte value present.
fn noise(size: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut data = Vec::with_capacity(size);
    while data.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    data.truncate(size);
    data
}

fn sha256_on_host(data: &[u8]) -> String {
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn a_large_binary_file_streams_both_ways_in_bounded_memory(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--home-size", "300M"]);
    let id = create_session(&server, json!({"workspace_size": "300M"}));
    let [runner] = runners(&server)[..] else {
        panic!("one runner: {:?}", runners(&server));
    };
    let size = 100 << 20 | 12345;
    let data = noise(size);
    let before = status_kib(runner, "VmHWM");
    let file_pages = status_kib(runner, "RssFile");
    let written = write_file(&server, &id, "big/file.bin", &data);
    assert_eq!(written["type"], "written", "{written}");
    assert_eq!(written["size"], size, "{written}");
    // The jail sees the same bytes.
    let digest = sh(&server, &id, "sha256sum big/file.bin")["stdout"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(digest, sha256_on_host(&data));
    let back = read_file(&server, &id, "big/file.bin").unwrap();
    assert_eq!(back.len(), size);
    assert_eq!(sha256_on_host(&back), digest);
    // The runner's peak memory grew by its stream buffer at most, not by the file. Less
    // the file-backed pages it touched: the more of brig's own code runs, the more of
    // its binary counts in VmHWM (seen: +4 MiB RssFile, RssAnon unchanged).
    let after = status_kib(runner, "VmHWM");
    let code = status_kib(runner, "RssFile").saturating_sub(file_pages);
    assert!(
        after.saturating_sub(before).saturating_sub(code) < 4 << 10,
        "the runner's VmHWM went from {before} KiB to {after} KiB for a {size}-byte file \
         ({code} KiB of it file-backed pages)"
    );
    // The control: the file is larger than what the runner may have grown by.
    assert!(size as u64 > 25 * (4 << 20));
    close(&server, &id);
}

fn a_broken_or_oversized_write_leaves_nothing(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let small = create_session(&server, json!({"workspace_size": "1M"}));
    // More than the workspace holds: refused before a byte moves.
    let reply = write_file(&server, &small, "too/big.bin", &vec![7u8; 2 << 20]);
    assert_error(&reply, "the workspace is full (workspace_size 1M)");
    // More than is left once another file is there: refused too, the other file kept.
    let reply = write_file(&server, &small, "half.bin", &vec![7u8; 600 << 10]);
    assert_eq!(reply["type"], "written", "{reply}");
    let reply = write_file(&server, &small, "other.bin", &vec![7u8; 500 << 10]);
    assert_error(&reply, "the workspace is full");
    let listing = op(
        &server,
        &small,
        "session_ls",
        json!({"path": ".", "depth": 2}),
    );
    assert_eq!(names(&listing, "path"), ["half.bin", "too"], "{listing}");

    // The workspace fills while the bytes come (a process of the jail writes): the write
    // is cut with the workspace_size error, its partial file removed, the other kept.
    let filling = create_session(&server, json!({"workspace_size": "4M"}));
    let marker = format!("BRIG_TEST_MARKER={}", unique("fill"));
    let reply = ask(
        &server,
        json!({"type": "session_exec", "session": filling, "env": [marker],
            "command": ["sh", "-c", "(while [ \"$(stat -c %s big 2>/dev/null || echo 0)\" -lt 1048576 ]; do sleep 0.01; done; head -c 3000000 /dev/zero > fill; touch filled; sleep 600) > /dev/null 2>&1 &"]}),
    );
    assert_eq!(reply["verdict"]["exit_code"], 0, "{reply}");
    let mut stream = connect(
        &server,
        json!({"type": "session_write", "session": filling, "path": "big", "size": 3 << 20}),
    );
    assert_eq!(read_reply(&stream).unwrap()["type"], "ready");
    stream.write_all(&[9u8; 1 << 20]).unwrap();
    let filled = wait_until(std::time::Duration::from_secs(30), || {
        processes_with_environ(&marker).iter().any(|pid| {
            std::path::Path::new(&format!("/proc/{pid}/root/home/sandbox/filled")).exists()
        })
    });
    assert!(filled, "the jail's process did not fill the workspace");
    let _ = stream.write_all(&[9u8; 2 << 20]);
    assert_error(
        &read_reply(&stream).unwrap(),
        "the workspace is full (workspace_size 4M)",
    );
    let there = op(&server, &filling, "session_exists", json!({"path": "big"}));
    assert_eq!(there["exists"], false, "{there}");
    let kept = op(&server, &filling, "session_stat", json!({"path": "fill"}));
    assert_eq!(kept["entry"]["size"], 3_000_000, "{kept}");
    close(&server, &filling);

    // A client that goes away mid-way: the partial file is removed, the session goes on.
    let id = create_session(&server, json!({}));
    let mut stream = connect(
        &server,
        json!({"type": "session_write", "session": id, "path": "cut.bin", "size": 1 << 20}),
    );
    assert_eq!(read_reply(&stream).unwrap()["type"], "ready");
    stream.write_all(&[1u8; 1000]).unwrap();
    drop(stream);
    let there = op(&server, &id, "session_exists", json!({"path": "cut.bin"}));
    assert_eq!(there["exists"], false, "{there}");
    // A bad size is a one-line error naming the field.
    let reply = op(&server, &id, "session_write", json!({"path": "x"}));
    assert_error(&reply, "size");
    // The session and server are up; after the close no runner is left.
    assert_eq!(write_file(&server, &id, "ok", b"ok")["type"], "written");
    close(&server, &id);
    close(&server, &small);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || runners(&server)
            .is_empty()),
        "runners left: {:?}",
        runners(&server)
    );
}

fn no_files_request_leads_out_of_the_workspace(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    // A host directory the jail user could change if brig followed a path into it.
    let outside = TempDir::new("files-outside").writable_by_all();
    std::fs::write(outside.path().join("keep"), "host").unwrap();
    common::set_mode(&outside.path().join("keep"), 0o666);
    let id = create_session(&server, json!({}));
    sh(
        &server,
        &id,
        &format!(
            "ln -s /etc abs && ln -s ../../../../.. up && mkdir d && ln -s .. d/parent && ln -s {0} d/host && ln -s {0} host && echo x > f",
            outside.str()
        ),
    );
    let refused: &[(&str, Value)] = &[
        ("session_stat", json!({"path": "abs/passwd"})),
        ("session_stat", json!({"path": "d/parent/abs/passwd"})),
        ("session_exists", json!({"path": "up/etc"})),
        ("session_exists", json!({"path": "../x"})),
        ("session_mkdir", json!({"path": "host/made"})),
        ("session_mkdir", json!({"path": "/tmp/made"})),
        (
            "session_rename",
            json!({"source": "f", "destination": "host/f"}),
        ),
        (
            "session_rename",
            json!({"source": "host/keep", "destination": "stolen"}),
        ),
        (
            "session_rename",
            json!({"source": "d/host/keep", "destination": "stolen"}),
        ),
        ("session_remove", json!({"path": "host/keep"})),
        ("session_remove", json!({"path": "d/parent/host/keep"})),
        ("session_remove", json!({"path": "../keep"})),
        ("session_ls", json!({"path": "host", "depth": 2})),
        ("session_ls", json!({"path": "up", "depth": 1})),
        ("session_read", json!({"path": "abs/passwd"})),
        ("session_write", json!({"path": "host/new", "size": 1})),
        ("session_write", json!({"path": "/tmp/new", "size": 1})),
        ("session_watch", json!({"path": "host"})),
        ("session_watch", json!({"path": "d/host"})),
        ("session_watch", json!({"path": "abs"})),
        ("session_watch", json!({"path": "/etc"})),
        ("session_watch", json!({"path": ".."})),
    ];
    for (kind, fields) in refused {
        let reply = op(&server, &id, kind, fields.clone());
        assert_eq!(reply["type"], "error", "{kind} {fields}: {reply}");
        let message = reply["message"].as_str().unwrap();
        assert!(
            message.contains("leads out of the workspace")
                || message.contains("`..` is not allowed")
                || message.contains("absolute paths are not allowed"),
            "{kind} {fields}: {message}"
        );
    }
    // A deep listing shows the symlinks as entries and does not walk them.
    let listing = op(&server, &id, "session_ls", json!({"path": ".", "depth": 4}));
    let paths = names(&listing, "path");
    assert_eq!(
        paths,
        ["abs", "d", "d/host", "d/parent", "f", "host", "up"],
        "{listing}"
    );
    // Removing a symlink to outside, or a tree holding one, removes the links only.
    let removed = op(&server, &id, "session_remove", json!({"path": "host"}));
    assert_eq!(removed["removed"], 1, "{removed}");
    let removed = op(&server, &id, "session_remove", json!({"path": "d"}));
    assert_eq!(removed["removed"], 3, "{removed}");
    // The control: the links did lead to the host directory, which is intact.
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep")).unwrap(),
        "host"
    );
    assert!(outside.path().join("keep").exists());
    let passwd = std::fs::metadata("/etc/passwd").unwrap();
    assert!(passwd.len() > 0);
    assert!(!std::path::Path::new("/tmp/made").exists());
    assert!(!std::path::Path::new("/tmp/new").exists());
    close(&server, &id);
}

pub(crate) fn events(server: &Server, id: &str, watcher: &str) -> (Vec<(String, String)>, bool) {
    let reply = op(
        server,
        id,
        "session_watch_events",
        json!({"watcher": watcher}),
    );
    assert_eq!(reply["type"], "events", "{reply}");
    let events = reply["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            (
                event["type"].as_str().unwrap().to_string(),
                event["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (events, reply["overflow"].as_bool().unwrap())
}

pub(crate) fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(kind, path)| (kind.to_string(), path.to_string()))
        .collect()
}

fn watchers_report_changes_in_order(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let made = op(
        &server,
        &id,
        "session_watch",
        json!({"path": ".", "recursive": true}),
    );
    assert_eq!(made["type"], "watcher", "{made}");
    let all = made["watcher"].as_str().unwrap().to_string();
    sh(&server, &id, "mkdir sub && printf hi > top.txt");
    let (got, overflow) = events(&server, &id, &all);
    assert!(!overflow);
    assert_eq!(
        got,
        pairs(&[
            ("create", "sub"),
            ("create", "top.txt"),
            ("write", "top.txt")
        ])
    );
    // A tree made at once: what was in a new directory before brig watched it is
    // reported as created, and from then on it is watched.
    sh(&server, &id, "mkdir -p t/u/v && printf x > t/u/f");
    assert_eq!(
        events(&server, &id, &all),
        (
            pairs(&[
                ("create", "t"),
                ("create", "t/u"),
                ("create", "t/u/f"),
                ("create", "t/u/v")
            ])
            .into_iter()
            .collect::<Vec<_>>(),
            false
        )
    );
    sh(&server, &id, "printf y > t/u/v/g && rm -r t");
    let (got, _) = events(&server, &id, &all);
    assert_eq!(
        got[..2],
        pairs(&[("create", "t/u/v/g"), ("write", "t/u/v/g")]),
        "{got:?}"
    );
    assert!(
        got.contains(&("remove".to_string(), "t/u/f".to_string())),
        "{got:?}"
    );
    assert!(
        got.contains(&("remove".to_string(), "t".to_string())),
        "{got:?}"
    );
    // A second watcher, on the new directory only.
    let only_sub = op(&server, &id, "session_watch", json!({"path": "sub"}));
    let only_sub = only_sub["watcher"].as_str().unwrap().to_string();
    sh(
        &server,
        &id,
        "printf a > sub/f && mv sub/f sub/g && chmod 600 sub/g && rm sub/g && rm top.txt",
    );
    let expected_sub = [
        ("create", "sub/f"),
        ("write", "sub/f"),
        ("rename", "sub/f"),
        ("create", "sub/g"),
        ("chmod", "sub/g"),
        ("remove", "sub/g"),
    ];
    let mut expected_all = expected_sub.to_vec();
    expected_all.push(("remove", "top.txt"));
    assert_eq!(events(&server, &id, &all), (pairs(&expected_all), false));
    assert_eq!(
        events(&server, &id, &only_sub),
        (pairs(&expected_sub), false)
    );
    // Asked again: nothing new.
    assert_eq!(events(&server, &id, &all), (vec![], false));
    // Files written by the API are seen too.
    assert_eq!(write_file(&server, &id, "sub/api", b"x")["type"], "written");
    assert_eq!(
        events(&server, &id, &only_sub).0,
        pairs(&[("create", "sub/api"), ("write", "sub/api")])
    );
    // Removed: its id is unknown from then on; the other goes on.
    let removed = op(
        &server,
        &id,
        "session_unwatch",
        json!({"watcher": only_sub}),
    );
    assert_eq!(removed["type"], "unwatched", "{removed}");
    assert_error(
        &op(
            &server,
            &id,
            "session_watch_events",
            json!({"watcher": only_sub}),
        ),
        "no such watcher",
    );
    assert_error(
        &op(&server, &id, "session_unwatch", json!({"watcher": "w999"})),
        "no such watcher",
    );
    sh(&server, &id, "rm sub/api");
    assert_eq!(
        events(&server, &id, &all).0,
        pairs(&[
            ("create", "sub/api"),
            ("write", "sub/api"),
            ("remove", "sub/api")
        ])
    );
    // A file is not a directory to watch.
    sh(&server, &id, "touch plain");
    assert_error(
        &op(&server, &id, "session_watch", json!({"path": "plain"})),
        "not a directory",
    );
    // Another user can use neither a session's watcher nor its files, streamed or not
    // (root may, and made this one).
    if mode == Mode::Root {
        let group_server = Server::start(mode, &["--pool", "0", "--socket-group", "65534"]);
        let id = create_session(&group_server, json!({}));
        let made = op(&group_server, &id, "session_watch", json!({"path": "."}));
        assert_eq!(
            write_file(&group_server, &id, "secret", b"mine")["type"],
            "written"
        );
        op(
            &group_server,
            &id,
            "session_watch_events",
            json!({"watcher": made["watcher"]}),
        );
        let watcher = made["watcher"].as_str().unwrap();
        let script = format!(
            "import json,socket,struct\nfor m in ({{'type':'session_watch_events','watcher':{2:?}}},{{'type':'session_read','path':'secret'}},{{'type':'session_write','path':'planted','size':1}},{{'type':'session_remove','path':'secret'}}):\n s=socket.socket(socket.AF_UNIX)\n s.connect({0:?})\n b=json.dumps(dict(m,brig=1,session={1:?})).encode()\n s.sendall(struct.pack('>I',len(b))+b)\n n=struct.unpack('>I',s.recv(4))[0]\n print(json.loads(s.recv(n))['message'])",
            group_server.socket(),
            id,
            watcher
        );
        let mut foreign = std::process::Command::new("setpriv");
        foreign.args(["--reuid=65534", "--regid=65534", "--groups=65534"]);
        foreign.arg(interpreter("python3")).args(["-c", &script]);
        let output = output_of(foreign);
        let lines = assert_success(&output);
        assert_eq!(
            lines
                .lines()
                .filter(|line| line.contains("belongs to another user"))
                .count(),
            4,
            "{}",
            describe(&output)
        );
        // The control: its owner reads them, and nothing changed.
        assert_eq!(read_file(&group_server, &id, "secret").unwrap(), b"mine");
        assert_eq!(events(&group_server, &id, watcher), (vec![], false));
    }
    close(&server, &id);
}

fn watchers_are_bounded(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    // Overflow: more events than a watcher holds between two calls.
    let flood = op(&server, &id, "session_watch", json!({"path": "."}));
    let flood = flood["watcher"].as_str().unwrap().to_string();
    sh(
        &server,
        &id,
        "mkdir many && cd many && seq 5000 | xargs touch",
    );
    // Not recursive: what happens in the new directory is not its business.
    assert_eq!(
        events(&server, &id, &flood),
        (pairs(&[("create", "many")]), false)
    );
    let deep = op(&server, &id, "session_watch", json!({"path": "many"}));
    let deep = deep["watcher"].as_str().unwrap().to_string();
    sh(&server, &id, "cd many && seq 5000 | xargs rm");
    let (got, overflow) = events(&server, &id, &deep);
    assert!(overflow, "no overflow reported");
    assert_eq!(got.len(), 4096);
    assert_eq!(got[0], ("remove".to_string(), "many/1".to_string()));
    // The next call starts afresh.
    sh(&server, &id, ": > many/after");
    assert_eq!(
        events(&server, &id, &deep),
        (pairs(&[("create", "many/after")]), false)
    );
    op(&server, &id, "session_unwatch", json!({"watcher": deep}));

    // The watch cap: a recursive watcher over more directories than a session may watch
    // is refused whole, and the session goes on.
    sh(
        &server,
        &id,
        "mkdir dirs && cd dirs && seq 1100 | xargs mkdir",
    );
    let reply = op(
        &server,
        &id,
        "session_watch",
        json!({"path": "dirs", "recursive": true}),
    );
    assert_error(&reply, "1024 directories");
    // Within the cap it works.
    sh(&server, &id, "cd dirs && seq 200 1100 | xargs rmdir");
    let reply = op(
        &server,
        &id,
        "session_watch",
        json!({"path": "dirs", "recursive": true}),
    );
    assert_eq!(reply["type"], "watcher", "{reply}");
    // The watcher cap: 16 a session.
    let mut made = 2;
    loop {
        let reply = op(&server, &id, "session_watch", json!({"path": "many"}));
        if reply["type"] == "error" {
            assert_error(&reply, "16 watchers already");
            break;
        }
        made += 1;
        assert!(made <= 16, "a 17th watcher: {reply}");
    }
    assert_eq!(made, 16);
    close(&server, &id);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || runners(&server)
            .is_empty()),
        "runners left: {:?}",
        runners(&server)
    );
}

/// A copy of `clients/NAME` that uid 65534 can read (the checkout may not be).
fn client_copy(name: &str) -> TempDir {
    let dir = TempDir::new(&format!("files-client-{name}"));
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name);
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(&source)
        .arg(dir.path().join(name))
        .status()
        .expect("cp");
    assert!(copied.success());
    let chmod = std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir.path())
        .status()
        .expect("chmod");
    assert!(chmod.success());
    dir
}

fn assert_lines(output: &std::process::Output, expected: &[&str]) {
    let out = assert_success(output);
    let lines: Vec<&str> = out.lines().collect();
    for (index, want) in expected.iter().enumerate() {
        assert_eq!(
            lines.get(index).copied(),
            Some(*want),
            "line {}: {}",
            index + 1,
            describe(output)
        );
    }
    assert_eq!(lines.len(), expected.len(), "{}", describe(output));
}

/// The files API through the Python client: streamed writes (bytes, a file object by
/// sendfile) and reads (bytes, text, a stream of chunks), stat, exists, make_dir,
/// rename, remove, deep listings, a watcher, and a refused escape.
const PYTHON_FILES_SCRIPT: &str = r#"
import hashlib, json, sys, tempfile
from brig_client import BrigError, Sandbox
def show(*values):
    print(json.dumps(values), flush=True)
with Sandbox(socket=sys.argv[1]) as sb:
    big = bytes(range(256)) * (12 << 12) + b"tail"
    show(sb.files.write("d/big.bin", big), sb.files.read("d/big.bin", format="bytes") == big)
    with tempfile.TemporaryFile() as source:
        source.write(b"from a file\n" * 1000)
        source.seek(0)
        show(sb.files.write("d/f.txt", source))
    chunks = list(sb.files.read("d/big.bin", format="stream"))
    show(hashlib.sha256(b"".join(chunks)).hexdigest() == hashlib.sha256(big).hexdigest(), max(map(len, chunks)) <= 1 << 20)
    show(sb.files.read("d/f.txt").count("from a file"))
    info = sb.files.get_info("d/big.bin")
    show(info.name, info.path, info.type, info.size, info.modified_time > 0)
    show(sb.files.exists("d/f.txt"), sb.files.exists("nope"))
    show(sb.files.make_dir("x/y"), sb.files.make_dir("x/y"))
    moved = sb.files.rename("d/f.txt", "x/y/g.txt")
    show(moved.path, moved.type, sb.files.exists("d/f.txt"))
    show([(e.path, e.type) for e in sb.files.list("x", depth=2)])
    watcher = sb.files.watch_dir("x", recursive=True)
    sb.files.write("x/y/new.txt", "n")
    sb.files.remove("x/y/g.txt")
    show([(e.type, e.name) for e in watcher.get_new_events()], watcher.overflowed)
    watcher.stop()
    seen = []
    streamed = sb.files.watch_dir("x", on_event=seen.append)
    sb.files.write("x/s.txt", "s")
    sb.files.remove("x/s.txt")
    streamed.stop()
    show([(e.type, e.name) for e in seen], streamed.dropped, streamed.overflowed)
    sb.files.remove("x")
    show(sb.files.exists("x"), [e.name for e in sb.files.list(".")])
    for call in (lambda: sb.files.read("../etc/passwd"), lambda: sb.files.write("/etc/x", b"x"),
                 lambda: sb.files.watch_dir("/"), lambda: sb.files.watch_dir("..", on_event=print),
                 lambda: sb.files.remove("..")):
        try:
            call()
            show("not refused")
        except BrigError as error:
            show(error.kind, error.exit_code)
"#;

fn python_client_files(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let client = client_copy("python");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &["-c", PYTHON_FILES_SCRIPT, server.socket()],
    );
    command.env("PYTHONPATH", client.path().join("python"));
    assert_lines(
        &output_of(command),
        &[
            "[12582916, true]",
            "[12000]",
            "[true, true]",
            "[1000]",
            r#"["big.bin", "d/big.bin", "file", 12582916, true]"#,
            "[true, false]",
            "[true, false]",
            r#"["x/y/g.txt", "file", false]"#,
            r#"[[["x/y", "dir"], ["x/y/g.txt", "file"]]]"#,
            r#"[[["create", "x/y/new.txt"], ["write", "x/y/new.txt"], ["remove", "x/y/g.txt"]], false]"#,
            r#"[[["create", "x/s.txt"], ["write", "x/s.txt"], ["remove", "x/s.txt"]], 0, false]"#,
            r#"[false, ["d"]]"#,
            r#"["bad_input", 125]"#,
            r#"["bad_input", 125]"#,
            r#"["bad_input", 125]"#,
            r#"["bad_input", 125]"#,
            r#"["bad_input", 125]"#,
        ],
    );
}

/// The same through the Node client.
const NODE_FILES_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const crypto = require("crypto");
const show = (...values) => console.log(JSON.stringify(values));
(async () => {
  const sb = await brig.Sandbox.create({ socket: process.argv[2] });
  const big = Buffer.concat([Buffer.alloc(256 * (12 << 12)).map((_, i) => i % 256), Buffer.from("tail")]);
  show(await sb.files.write("d/big.bin", big), (await sb.files.read("d/big.bin", { format: "bytes" })).equals(big));
  async function* pieces() { for (let i = 0; i < 1000; i++) yield Buffer.from("from a file\n"); }
  show(await sb.files.write("d/f.txt", pieces(), { size: 12000 }));
  const hash = crypto.createHash("sha256");
  let most = 0;
  for await (const chunk of await sb.files.read("d/big.bin", { format: "stream" })) { hash.update(chunk); most = Math.max(most, chunk.length); }
  show(hash.digest("hex") === crypto.createHash("sha256").update(big).digest("hex"));
  show((await sb.files.read("d/f.txt")).split("from a file").length - 1);
  const info = await sb.files.getInfo("d/big.bin");
  show(info.name, info.path, info.type, info.size, info.modifiedTime > 0);
  show(await sb.files.exists("d/f.txt"), await sb.files.exists("nope"));
  show(await sb.files.makeDir("x/y"), await sb.files.makeDir("x/y"));
  const moved = await sb.files.rename("d/f.txt", "x/y/g.txt");
  show(moved.path, moved.type, await sb.files.exists("d/f.txt"));
  show((await sb.files.list("x", { depth: 2 })).map((e) => [e.path, e.type]));
  const watcher = await sb.files.watchDir("x", { recursive: true });
  await sb.files.write("x/y/new.txt", "n");
  await sb.files.remove("x/y/g.txt");
  show((await watcher.getNewEvents()).map((e) => [e.type, e.name]), watcher.overflowed);
  await watcher.stop();
  const seen = [];
  const streamed = await sb.files.watchDir("x", { onEvent: (e) => seen.push([e.type, e.name]) });
  await sb.files.write("x/s.txt", "s");
  await sb.files.remove("x/s.txt");
  await streamed.stop();
  show(seen, streamed.dropped, streamed.overflowed);
  await sb.files.remove("x");
  show(await sb.files.exists("x"), (await sb.files.list(".")).map((e) => e.name));
  for (const call of [() => sb.files.read("../etc/passwd"), () => sb.files.write("/etc/x", "x"),
                      () => sb.files.watchDir("/"), () => sb.files.watchDir("..", { onEvent: console.log }),
                      () => sb.files.remove("..")]) {
    try {
      await call();
      show("not refused");
    } catch (error) {
      show(error.kind, error.exitCode);
    }
  }
  await sb.close();
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_files(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let client = client_copy("node");
    let module = client.path().join("node");
    let output = output_of(command_as(
        mode,
        interpreter("node"),
        &[
            "-e",
            NODE_FILES_SCRIPT,
            "--",
            module.to_str().unwrap(),
            server.socket(),
        ],
    ));
    assert_lines(
        &output,
        &[
            "[12582916,true]",
            "[12000]",
            "[true]",
            "[1000]",
            r#"["big.bin","d/big.bin","file",12582916,true]"#,
            "[true,false]",
            "[true,false]",
            r#"["x/y/g.txt","file",false]"#,
            r#"[[["x/y","dir"],["x/y/g.txt","file"]]]"#,
            r#"[[["create","x/y/new.txt"],["write","x/y/new.txt"],["remove","x/y/g.txt"]],false]"#,
            r#"[[["create","x/s.txt"],["write","x/s.txt"],["remove","x/s.txt"]],0,false]"#,
            r#"[false,["d"]]"#,
            r#"["bad_input",125]"#,
            r#"["bad_input",125]"#,
            r#"["bad_input",125]"#,
            r#"["bad_input",125]"#,
            r#"["bad_input",125]"#,
        ],
    );
}

fn the_command_line_streams_and_manages_files(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--home-size", "100M"]);
    let dir = TempDir::new("files-cli").writable_by_all();
    let created = run(
        mode,
        &[
            "session",
            "create",
            "--server",
            server.socket(),
            "--workspace-size",
            "100M",
        ],
    );
    let id = assert_success(&created).trim().to_string();
    let at = |args: &[&str]| {
        let mut all = vec!["session"];
        all.extend_from_slice(&args[..1]);
        all.extend_from_slice(&["--server", server.socket(), "--session", &id]);
        all.extend_from_slice(&args[1..]);
        run(mode, &all)
    };
    // 20 MiB of binary through put and get, one request each.
    let data = noise(20 << 20);
    let local = dir.path().join("in.bin");
    std::fs::write(&local, &data).unwrap();
    set_mode(&local, 0o644);
    assert_success(&at(&["put", local.to_str().unwrap(), "a/in.bin"]));
    let back = dir.path().join("back.bin");
    assert_success(&at(&["get", "a/in.bin", back.to_str().unwrap()]));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get gave other bytes"
    );
    let output = at(&["stat", "a/in.bin"]);
    let line = assert_success(&output);
    assert!(
        line.starts_with("file    0644   20971520 uid=") && line.trim_end().ends_with(" a/in.bin"),
        "{line}"
    );
    assert_success(&at(&["mkdir", "b/c"]));
    assert_success(&at(&["mv", "a/in.bin", "b/c/moved.bin"]));
    let output = at(&["ls", "--depth", "3", "."]);
    let listing = assert_success(&output);
    assert!(listing.contains(" b/c/moved.bin\n"), "{listing}");
    assert_success(&at(&["rm", "b"]));
    let output = at(&["ls", "."]);
    assert_eq!(
        assert_success(&output).lines().count(),
        1,
        "{}",
        describe(&output)
    );
    let output = at(&["rm", "../x"]);
    assert_one_line_error(&output, &["`..`"]);
    assert_eq!(code(&output), 125);
    let output = at(&["get", "gone.bin"]);
    assert_one_line_error(&output, &["no such file"]);
    assert_success(&at(&["close"]));
}

/// A transfer whose client stops sending holds the session for the stall time at most
/// (10 s), and a draining server's grace holds for it as for any request.
fn a_stalled_or_drained_transfer_is_cut(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "0", "--drain-grace", "1s"]);
    let id = create_session(&server, json!({}));
    let begin = |path: &str| {
        let mut stream = connect(
            &server,
            json!({"type": "session_write", "session": id, "path": path, "size": 1 << 20}),
        );
        assert_eq!(read_reply(&stream).unwrap()["type"], "ready");
        stream.write_all(&[1u8; 1000]).unwrap();
        stream
    };
    // The client keeps its connection open and sends nothing more.
    let stalled = begin("stalled.bin");
    assert_error(
        &read_reply(&stalled).expect("an answer"),
        "session_write \"stalled.bin\": the client moved no data for 10 s; the transfer is cut",
    );
    drop(stalled);
    let there = op(
        &server,
        &id,
        "session_exists",
        json!({"path": "stalled.bin"}),
    );
    assert_eq!(there["exists"], false, "{there}");
    // The server drains while a client holds a transfer: cut at the grace, the server
    // exits, nothing is kept.
    let held = begin("held.bin");
    let process = server.running.take().expect("running");
    kill(process.pid(), libc::SIGTERM);
    assert_error(
        &read_reply(&held).expect("an answer"),
        "session_write \"held.bin\": the server is draining; the transfer is cut",
    );
    let output = process.wait();
    assert!(output.status.success(), "{}", describe(&output));
}

/// The next `watch_event` of a streamed watcher, as (kind, path).
pub(crate) fn next_event(stream: &UnixStream) -> (String, String) {
    let frame = read_reply(stream).expect("a frame");
    assert_eq!(frame["type"], "watch_event", "{frame}");
    (
        frame["kind"].as_str().unwrap().to_string(),
        frame["path"].as_str().unwrap().to_string(),
    )
}

fn a_streamed_watcher_sends_events_as_they_happen(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let watch = json!({"type": "session_watch", "session": id, "path": ".", "stream": true});
    let streamed = connect(&server, watch.clone());
    let made = read_reply(&streamed).unwrap();
    assert_eq!(made["type"], "watcher", "{made}");
    assert_eq!(made["stream"], true, "{made}");
    let watcher = made["watcher"].as_str().unwrap().to_string();
    // Each change arrives while the client waits on its connection, in order.
    sh(&server, &id, "printf a > f && mv f g && rm g");
    let expected = pairs(&[
        ("create", "f"),
        ("write", "f"),
        ("rename", "f"),
        ("create", "g"),
        ("remove", "g"),
    ]);
    for want in expected {
        assert_eq!(next_event(&streamed), want);
    }
    // It is not polled.
    assert_error(
        &op(
            &server,
            &id,
            "session_watch_events",
            json!({"watcher": watcher}),
        ),
        "streams its events",
    );
    // session_unwatch ends the stream with a last frame, then the connection closes.
    let removed = op(&server, &id, "session_unwatch", json!({"watcher": watcher}));
    assert_eq!(removed["type"], "unwatched", "{removed}");
    let end = read_reply(&streamed).unwrap();
    assert_eq!(end["type"], "watch_end", "{end}");
    assert_eq!(end["why"], "unwatched", "{end}");
    assert_eq!(end["dropped"], 0, "{end}");
    assert!(read_reply(&streamed).is_none(), "the stream closes");

    // A client that reads nothing: its events are dropped past its buffer and counted,
    // and the runner serves everything else meanwhile.
    let stalled = connect(&server, watch.clone());
    let made = read_reply(&stalled).unwrap();
    let stalled_id = made["watcher"].as_str().unwrap().to_string();
    let rounds = 25_000;
    sh(
        &server,
        &id,
        &format!("i=0; while [ $i -lt {rounds} ]; do echo >> a; echo >> b; i=$((i+1)); done"),
    );
    let stat = op(&server, &id, "session_stat", json!({"path": "a"}));
    assert_eq!(stat["type"], "stat", "{stat}");
    assert_eq!(stat["entry"]["size"], rounds, "{stat}");
    op(
        &server,
        &id,
        "session_unwatch",
        json!({"watcher": stalled_id}),
    );
    let mut received = 0u64;
    let end = loop {
        let frame = read_reply(&stalled).expect("a frame");
        if frame["type"] != "watch_event" {
            break frame;
        }
        let path = frame["path"].as_str().unwrap();
        assert!(path == "a" || path == "b", "{frame}");
        received += 1;
    };
    assert_eq!(end["type"], "watch_end", "{end}");
    let dropped = end["dropped"].as_u64().unwrap();
    assert!(
        dropped > 0,
        "nothing dropped for a client that did not read: {end}"
    );
    // The creates, then one write a line (the kernel joins none: a and b alternate);
    // unless the kernel's own queue overflowed, every event was sent or counted.
    if end["overflow"] == false {
        assert_eq!(received + dropped, 2 + 2 * rounds, "{end}");
    }

    // A client that hangs up takes its watcher with it.
    let hung_up = connect(&server, watch.clone());
    let made = read_reply(&hung_up).unwrap();
    let hung_up_id = made["watcher"].as_str().unwrap().to_string();
    drop(hung_up);
    sh(&server, &id, "echo >> a");
    assert_error(
        &op(
            &server,
            &id,
            "session_unwatch",
            json!({"watcher": hung_up_id}),
        ),
        "no such watcher",
    );

    // Escapes are refused on the watch's own connection, and the session goes on.
    for path in ["..", "/etc", "host"] {
        if path == "host" {
            sh(&server, &id, "ln -s / host");
        }
        let mut refused = watch.clone();
        refused["path"] = json!(path);
        let refused = read_reply(&connect(&server, refused)).unwrap();
        assert_eq!(refused["type"], "error", "{path}: {refused}");
        assert_eq!(refused["kind"], "bad_input", "{path}: {refused}");
        assert_eq!(refused["exit_code"], 125, "{path}: {refused}");
    }

    // While a code cell runs (the cell's own loop), the stream goes on: the cell makes a
    // file and waits for one this test makes only once it has seen the cell's event.
    let during = connect(&server, watch.clone());
    assert_eq!(read_reply(&during).unwrap()["type"], "watcher");
    let code = "import os, time\nopen('from_cell', 'w').close()\nwhile not os.path.exists('go'):\n    time.sleep(0.01)\n'done'";
    let cell = connect(
        &server,
        json!({"type": "session_exec", "session": id, "code": code}),
    );
    assert_eq!(next_event(&during), ("create".into(), "from_cell".into()));
    assert_eq!(write_file(&server, &id, "go", b"")["type"], "written");
    let ran = read_reply(&cell).unwrap();
    assert_eq!(ran["type"], "exec", "{ran}");
    assert_eq!(next_event(&during), ("create".into(), "go".into()));

    // The session's close ends the stream with the error frame every stream gets.
    let open = connect(&server, watch);
    assert_eq!(read_reply(&open).unwrap()["type"], "watcher");
    close(&server, &id);
    let end = read_reply(&open).unwrap();
    assert_eq!(end["type"], "error", "{end}");
    assert!(
        end["message"].as_str().unwrap().contains("it was closed"),
        "{end}"
    );
    assert!(read_reply(&open).is_none(), "the stream closes");
}

/// `brig session watch`: a line per event as it happens (the jail's names escaped), until
/// the session's close ends it (exit 0); a way out of the workspace is one line, 125.
fn the_command_line_watches_a_directory(mode: Mode) {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let server = Server::start(mode, &["--pool", "0"]);
    // Made by the command line, as the user it runs as (rootless: not root).
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    let id = assert_success(&created).trim().to_string();
    let args = |path: &'static str| {
        let mut watch = command(
            mode,
            &[
                "session",
                "watch",
                "--server",
                server.socket(),
                "--session",
                &id,
                path,
            ],
        );
        watch
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        watch
    };
    let refused = output_of(args(".."));
    assert_one_line_error(&refused, &["`..`"]);
    assert_eq!(code(&refused), 125);
    let mut watching = Running::spawn(args("."));
    let mut lines = std::io::BufReader::new(watching.child.stdout.take().unwrap()).lines();
    // Its first stderr line comes once the watch is in place: no change can be missed.
    let mut stderr = std::io::BufReader::new(watching.child.stderr.take().unwrap());
    let mut started = String::new();
    stderr.read_line(&mut started).unwrap();
    assert!(
        started.starts_with("brig: watching . (watcher "),
        "{started}"
    );
    // A name with a tab and an escape: printed escaped, one line each.
    sh(&server, &id, "touch \"$(printf 'a\\tb\\033c')\" && rm a*");
    let mut seen = Vec::new();
    while !seen.contains(&"remove\ta\\tb\\x1bc".to_string()) {
        let line = lines
            .next()
            .expect("a line before the stream ends")
            .unwrap();
        seen.push(line);
    }
    assert_eq!(
        seen.first().map(String::as_str),
        Some("create\ta\\tb\\x1bc"),
        "{seen:?}"
    );
    // SIGTERM ends a second one by its default action; the server drops its watcher on
    // the hang-up (unwatching it finds none). (Not SIGINT: a suite started in the
    // background by a non-interactive shell runs with SIGINT ignored, and brig, as
    // programs should, leaves an ignored signal ignored.)
    let mut interrupted = Running::spawn(args("."));
    let mut interrupted_err = std::io::BufReader::new(interrupted.child.stderr.take().unwrap());
    let mut line = String::new();
    interrupted_err.read_line(&mut line).unwrap();
    let watcher = line
        .trim_end()
        .strip_suffix(')')
        .and_then(|rest| rest.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no watcher id in {line:?}"))
        .to_string();
    kill(interrupted.pid(), libc::SIGTERM);
    let output = interrupted.wait();
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{output:?}");
    sh(&server, &id, "touch after_interrupt");
    assert_error(
        &op(&server, &id, "session_unwatch", json!({"watcher": watcher})),
        "no such watcher",
    );

    // The first one goes on meanwhile, and ends with the session.
    let mut later = Vec::new();
    while !later.contains(&"create\tafter_interrupt".to_string()) {
        later.push(
            lines
                .next()
                .expect("a line before the stream ends")
                .unwrap(),
        );
    }
    close(&server, &id);
    later.extend(lines.map(Result::unwrap));
    assert!(
        later.iter().all(|line| line.ends_with("\tafter_interrupt")),
        "{later:?}"
    );
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let output = watching.wait();
    assert_eq!(code(&output), 0, "{rest}");
    assert!(rest.contains("it was closed"), "{rest}");
}
