//! Recursive directory watchers and the directories they follow, for real, as root and
//! rootless: a tree made in one command (`mkdir -p a/b/c && echo x > a/b/c/f`) is reported
//! whole, each path created once, every time, polled and streamed at once (the stream
//! makes the runner read the kernel's events while the tree is being made, so the scan of
//! a new directory races the events of what is made in it); a renamed directory's later
//! events carry its new name, and one renamed out of a recursive watcher's tree leaves it.

use crate::common;
use crate::session_files::{connect, events, next_event, op, pairs, sh};

use common::serve::{Server, close_session, create_session, read_reply};
use common::*;
use serde_json::json;
use std::os::unix::net::UnixStream;

both_modes!(
    a_tree_made_at_once_is_reported_whole_and_once,
    a_renamed_directory_reports_its_new_name,
);

/// A polled watcher made with `fields`; its id.
fn watch(server: &Server, id: &str, fields: serde_json::Value) -> String {
    let made = op(server, id, "session_watch", fields);
    assert_eq!(made["type"], "watcher", "{made}");
    made["watcher"].as_str().unwrap().to_string()
}

/// Checks that polled watcher `watcher`'s events since the last call are `expected`,
/// none lost.
fn assert_events(server: &Server, id: &str, watcher: &str, expected: &[(&str, &str)]) {
    assert_eq!(events(server, id, watcher), (pairs(expected), false));
}

const TREE: [&str; 4] = ["a", "a/b", "a/b/c", "a/b/c/f"];

/// A streamed watcher's events until (and without) `("create", mark)`: the events of the
/// changes made before `mark`, as the kernel queues them in order.
fn streamed_until(stream: &UnixStream, mark: &str) -> Vec<(String, String)> {
    let mut got = Vec::new();
    loop {
        let event = next_event(stream);
        if event == ("create".to_string(), mark.to_string()) {
            return got;
        }
        got.push(event);
    }
}

/// Checks that `got` (one watcher's events of one round) creates the tree's four paths
/// once each, a directory before what is in it, with nothing else than the file's write.
fn assert_tree_once(got: &[(String, String)], round: usize, how: &str) {
    let created: Vec<&str> = (got.iter())
        .filter(|(kind, _)| kind == "create")
        .map(|(_, path)| path.as_str())
        .collect();
    let mut sorted = created.clone();
    sorted.sort();
    assert_eq!(sorted, TREE, "{how}, round {round}: {got:?}");
    for (at, path) in created.iter().enumerate() {
        if let Some((parent, _)) = path.rsplit_once('/') {
            assert!(
                created[..at].contains(&parent),
                "{how}, round {round}: {path} before {parent}: {got:?}"
            );
        }
    }
    let others: Vec<_> = got.iter().filter(|(kind, _)| kind != "create").collect();
    assert!(
        others.is_empty() || others == [&("write".to_string(), "a/b/c/f".to_string())],
        "{how}, round {round}: {got:?}"
    );
}

fn a_tree_made_at_once_is_reported_whole_and_once(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let polled = watch(&server, &id, json!({"path": ".", "recursive": true}));
    let stream = connect(
        &server,
        json!({"type": "session_watch", "session": id, "path": ".", "recursive": true, "stream": true}),
    );
    let made = read_reply(&stream).expect("the watcher");
    assert_eq!(made["type"], "watcher", "{made}");
    for round in 0..20 {
        sh(
            &server,
            &id,
            "mkdir -p a/b/c && echo x > a/b/c/f && : > mark",
        );
        // A create the kernel queued between a watch and its directory's scan comes
        // before `mark`'s: nothing of the tree comes after it.
        let streamed = streamed_until(&stream, "mark");
        assert_tree_once(&streamed, round, "streamed");
        let (got, overflow) = events(&server, &id, &polled);
        assert!(!overflow, "round {round}: {got:?}");
        assert_eq!(
            got.last(),
            Some(&("create".to_string(), "mark".to_string())),
            "round {round}"
        );
        assert_tree_once(&got[..got.len() - 1], round, "polled");
        // Removed, the same names made again next round are new again.
        sh(&server, &id, "rm -r a mark");
        let mut removed = Vec::new();
        while removed
            .last()
            .map(|(_, path): &(String, String)| path.as_str())
            != Some("mark")
        {
            removed.push(next_event(&stream));
        }
        let (got, _) = events(&server, &id, &polled);
        for listed in [&removed, &got] {
            let mut paths: Vec<&str> = (listed.iter())
                .inspect(|(kind, _)| assert_eq!(kind, "remove", "round {round}: {listed:?}"))
                .map(|(_, path)| path.as_str())
                .collect();
            paths.sort();
            assert_eq!(
                paths,
                ["a", "a/b", "a/b/c", "a/b/c/f", "mark"],
                "round {round}"
            );
        }
    }
    close_session(&server, &id);
}

fn a_renamed_directory_reports_its_new_name(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let all = watch(&server, &id, json!({"path": ".", "recursive": true}));
    sh(&server, &id, "mkdir -p d/e");
    assert_events(&server, &id, &all, &[("create", "d"), ("create", "d/e")]);
    // A second watcher on the inner directory only.
    let inner = watch(&server, &id, json!({"path": "d/e"}));
    sh(&server, &id, "mv d r && : > r/e/x");
    // The recursive watcher follows the directory under its new name (what it holds is
    // reported as there); the file made after the rename is reported once.
    assert_events(
        &server,
        &id,
        &all,
        &[
            ("rename", "d"),
            ("create", "r"),
            ("create", "r/e"),
            ("create", "r/e/x"),
        ],
    );
    // The other watcher's directory moved with its parent: its events follow the rename.
    assert_events(&server, &id, &inner, &[("create", "r/e/x")]);
    sh(&server, &id, "rm r/e/x");
    assert_events(&server, &id, &inner, &[("remove", "r/e/x")]);
    assert_events(&server, &id, &all, &[("remove", "r/e/x")]);
    // Renamed out of a recursive watcher's tree (into another watcher's): it is not that
    // watcher's any more, and the other reports it under its new name.
    let in_r = watch(&server, &id, json!({"path": "r", "recursive": true}));
    sh(&server, &id, "mv r/e moved && : > moved/y");
    assert_events(&server, &id, &in_r, &[("rename", "r/e")]);
    assert_events(
        &server,
        &id,
        &all,
        &[
            ("rename", "r/e"),
            ("create", "moved"),
            ("create", "moved/y"),
        ],
    );
    assert_events(&server, &id, &inner, &[("create", "moved/y")]);
    // Back in: followed again, what it holds reported as there.
    sh(&server, &id, "mv moved r/back && : > r/back/z");
    assert_events(
        &server,
        &id,
        &in_r,
        &[
            ("create", "r/back"),
            ("create", "r/back/y"),
            ("create", "r/back/z"),
        ],
    );
    close_session(&server, &id);
}
