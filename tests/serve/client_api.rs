//! `brig::serve::Client`, the library's typed client, against a real `brig serve`, as
//! root and rootless (the server then runs as nobody, and this process, root, trusts it
//! by `Client::trusting`): every kind of reply read back as its type — commands, cells
//! and contexts, files (put/get, streamed write/read, stat, exists, mkdir, rename,
//! remove), polled and streamed watchers, background processes (stdin as text and as
//! bytes, attach, ps, signal, kill), metadata, timeout and close — and refusals as
//! `brig::Error`s of the server's kind. The CLI's `brig session` tests drive the same
//! client through the command line.

use crate::common;

use brig::ErrorKind;
use brig::serve::protocol::{Language, Request};
use brig::serve::reply::{OutputStream, SessionReply};
use brig::serve::{Client, Create, Exec, ProcessRef, Session};
use brig::verdict::Status;
use common::serve::Server;
use common::*;

both_modes!(
    commands_cells_and_contexts_come_back_typed,
    files_and_watchers_come_back_typed,
    background_processes_come_back_typed,
    refusals_are_errors_of_the_servers_kind,
);

/// A client of `server`, trusting its user (nobody, rootless).
fn client(server: &Server) -> Client {
    Client::new(&server.socket).trusting(match server.mode {
        Mode::Root => 0,
        Mode::Rootless => NOBODY,
    })
}

fn session(server: &Server) -> Session {
    let create = Create {
        metadata: [("test".to_string(), "client_api".to_string())].into(),
        ..Create::default()
    };
    client(server).create(&create).expect("create a session")
}

fn commands_cells_and_contexts_come_back_typed(mode: Mode) {
    let server = Server::start(mode, &[]);
    let session = session(&server);
    let listed = client(&server)
        .list(&[("test".to_string(), "client_api".to_string())].into())
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].session, session.id());
    assert_eq!(listed[0].metadata["test"], "client_api");

    let done = session
        .exec(&Exec {
            stdin: Some("from stdin".into()),
            ..Exec::command(["sh", "-c", "cat; echo; echo oops >&2; exit 3"])
        })
        .unwrap();
    assert_eq!(done.stdout.as_deref(), Some("from stdin\n"));
    assert_eq!(done.stderr.as_deref(), Some("oops\n"));
    assert_eq!(done.verdict.status, Status::NonzeroExit);
    assert_eq!(done.verdict.exit_code, Some(3));
    assert_eq!(done.verdict.brig_exit_code, 3);
    assert!(done.cell.is_none());

    // A streamed command: its chunks in order, then the end without stdout/stderr.
    let mut chunks = Vec::new();
    let streamed = session
        .exec_stream(
            &Exec::command(["sh", "-c", "echo one; sleep 0.2; echo two >&2"]),
            |output| {
                chunks.push((output.stream, output.bytes()?));
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(
        chunks,
        [
            (OutputStream::Stdout, b"one\n".to_vec()),
            (OutputStream::Stderr, b"two\n".to_vec())
        ]
    );
    assert_eq!((streamed.stdout, streamed.dropped), (None, Some(0)));

    // The same, as an iterator of frames.
    let request = Request::SessionExec {
        session: session.id().into(),
        command: vec!["echo".into(), "framed".into()],
        code: None,
        language: None,
        context: None,
        stdin: None,
        env: vec![],
        chdir: None,
        time_limit: None,
        output_limit: None,
        stream: true,
        background: false,
        tag: None,
        pty: None,
        user: None,
    };
    let kinds: Vec<String> = client(&server)
        .open(&request)
        .unwrap()
        .map(|frame| frame.unwrap().kind())
        .collect();
    assert_eq!(kinds, ["output", "exec"]);

    // Cells: the value, the error, state across cells.
    session.run_code("x = 41", "python").unwrap();
    let cell = session.run_code("x + 1", "python").unwrap();
    let answer = cell.cell.expect("a cell's answer");
    assert_eq!(answer.result.as_deref(), Some("42"));
    assert_eq!(answer.context, "python");
    assert_eq!(answer.results[0]["text/plain"], "42");
    let raised = session.run_code("1 / 0", "python").unwrap();
    let error = raised.cell.unwrap().error.expect("an error");
    assert_eq!(error.kind, "ZeroDivisionError");
    assert!(error.traceback.contains("Traceback"), "{error:?}");
    assert_eq!(raised.verdict.status, Status::NonzeroExit);

    // Contexts: their own state; listed, restarted (state lost), removed.
    let context = session
        .create_context(Language::Bash, Some("/tmp".into()))
        .unwrap();
    assert_eq!(
        (context.language, context.cwd.as_deref()),
        (Language::Bash, Some("/tmp"))
    );
    session.run_code("GREETING=hi", &context.id).unwrap();
    let said = session
        .run_code("echo $GREETING $PWD", &context.id)
        .unwrap();
    assert_eq!(said.stdout.as_deref(), Some("hi /tmp\n"));
    let context_ids = || -> Vec<String> {
        let contexts = session.contexts().unwrap();
        contexts.into_iter().map(|context| context.id).collect()
    };
    assert!(context_ids().contains(&context.id), "{:?}", context_ids());
    session.restart_context(&context.id).unwrap();
    let said = session
        .run_code("echo \"[$GREETING]\"", &context.id)
        .unwrap();
    assert_eq!(said.stdout.as_deref(), Some("[]\n"));
    session.remove_context(&context.id).unwrap();
    assert!(!context_ids().contains(&context.id), "{:?}", context_ids());

    session
        .set_timeout(brig::units::Span(std::time::Duration::from_secs(600)))
        .unwrap();
    session.close().unwrap();
}

fn files_and_watchers_come_back_typed(mode: Mode) {
    let server = Server::start(mode, &[]);
    let session = session(&server);
    let watcher = session.watch(".", true).unwrap();
    assert_eq!(session.put("a/b.txt", b"hello", false).unwrap(), 5);
    assert_eq!(session.put("a/b.txt", b" world", true).unwrap(), 11);
    assert_eq!(
        session.get("a/b.txt", 6, None).unwrap(),
        (b"world".to_vec(), 11)
    );
    assert!(session.exists("a/b.txt").unwrap());
    assert!(!session.exists("a/none").unwrap());
    let entry = session.stat("a/b.txt").unwrap();
    assert_eq!(
        (entry.kind.as_str(), entry.size, entry.path.as_deref()),
        ("file", 11, Some("a/b.txt"))
    );
    assert!(entry.uid.is_some() && entry.mtime.is_some(), "{entry:?}");
    assert!(session.mkdir("c/d").unwrap());
    assert!(!session.mkdir("c/d").unwrap());
    session.rename("a/b.txt", "c/d/e.txt").unwrap();
    let (events, overflow) = session.watch_events(&watcher).unwrap();
    assert!(!overflow);
    assert!(
        events
            .iter()
            .any(|event| event.kind == "create" && event.path == "c/d/e.txt"),
        "{events:?}"
    );
    session.unwatch(&watcher).unwrap();

    // Streamed both ways: bytes that are not text, whole.
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let written = session
        .write("bin/data", bytes.len() as u64, &mut &bytes[..])
        .unwrap();
    assert_eq!(written, bytes.len() as u64);
    let mut back = Vec::new();
    assert_eq!(
        session.read("bin/data", 0, None, &mut back).unwrap(),
        bytes.len() as u64
    );
    assert!(back == bytes, "the file came back changed");

    let (entries, truncated) = session.ls(".", Some(3)).unwrap();
    let paths: Vec<&str> = entries.iter().filter_map(|e| e.path.as_deref()).collect();
    assert!(paths.contains(&"c/d/e.txt") && !truncated, "{paths:?}");
    let (entries, _) = session.ls("c/d", None).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].name.as_str(), entries[0].path.as_deref()),
        ("e.txt", None)
    );
    assert_eq!(session.remove("c").unwrap(), 3);

    // A streamed watcher: its events as they happen, then its end at the unwatch.
    let (streamed, mut frames) = session.watch_stream(".", false).unwrap();
    session.put("new.txt", b"x", false).unwrap();
    let first = frames.next_reply().unwrap();
    assert!(
        matches!(&first, SessionReply::WatchEvent { kind, path, .. } if kind == "create" && path == "new.txt"),
        "{first:?}"
    );
    session.unwatch(&streamed).unwrap();
    let end = frames
        .find(|frame| !matches!(frame, Ok(SessionReply::WatchEvent { .. })))
        .expect("an end")
        .unwrap();
    assert!(
        matches!(&end, SessionReply::WatchEnd { why, .. } if why == "unwatched"),
        "{end:?}"
    );
    session.close().unwrap();
}

fn background_processes_come_back_typed(mode: Mode) {
    let server = Server::start(mode, &[]);
    let session = session(&server);
    let process = session
        .start(&Exec {
            tag: Some("echo".into()),
            ..Exec::command(["cat"])
        })
        .unwrap();
    assert!(process.background && process.running, "{process:?}");
    assert_eq!(process.tag.as_deref(), Some("echo"));
    let pid = process.pid.expect("its pid");
    let which = ProcessRef::Tag("echo".into());
    assert_eq!(session.stdin(&which, b"text ", false).unwrap(), 5);
    // Bytes that are not UTF-8 go as base64, and come back as themselves.
    assert_eq!(session.stdin(&which, b"\xff\xfe\n", true).unwrap(), 3);
    let mut output = Vec::new();
    let exited = session
        .attach(&ProcessRef::Pid(pid), |chunk| {
            output.extend(chunk.bytes()?);
            Ok(())
        })
        .unwrap();
    assert_eq!(output, b"text \xff\xfe\n");
    assert_eq!(exited.pid, Some(pid));
    let verdict = exited.verdict.expect("its verdict");
    assert_eq!((verdict.status, verdict.exit_code), (Status::Ok, Some(0)));

    // A reader blocked on a live process is ended by a hang-up from another thread;
    // the process goes on.
    let waiter = session.start(&Exec::command(["sleep", "302"])).unwrap();
    let waiter_ref = ProcessRef::Pid(waiter.pid.unwrap());
    let (_, mut frames) = session.connect(&waiter_ref).unwrap();
    let hang_up = frames.hang_up_handle().unwrap();
    let reader = std::thread::spawn(move || frames.next_frame().map(|frame| frame.is_none()));
    hang_up.shutdown(std::net::Shutdown::Both).unwrap();
    assert!(matches!(reader.join().unwrap(), Ok(true)));
    let still = session.ps().unwrap();
    assert!(
        still
            .iter()
            .any(|process| process.pid == waiter.pid && process.running),
        "{still:?}"
    );

    let sleeper = session.start(&Exec::command(["sleep", "300"])).unwrap();
    let sleeper_ref = ProcessRef::Pid(sleeper.pid.unwrap());
    assert_eq!(session.signal(&sleeper_ref, "TERM").unwrap(), "SIGTERM");
    let stopper = session.start(&Exec::command(["sleep", "301"])).unwrap();
    session
        .kill(&ProcessRef::Pid(stopper.pid.unwrap()))
        .unwrap();
    let ended = session.attach(&sleeper_ref, |_| Ok(())).unwrap();
    assert_eq!(
        ended.verdict.map(|verdict| verdict.signal),
        Some(Some(libc::SIGTERM))
    );
    let listed = session.ps().unwrap();
    let cat = listed
        .iter()
        .find(|process| process.pid == Some(pid))
        .expect("cat listed");
    assert!(!cat.running, "{cat:?}");
    let status = cat.status.as_ref().expect("its status");
    assert_eq!(
        (status.status, status.exit_code),
        (Some(Status::Ok), Some(0))
    );
    session.close().unwrap();
}

fn refusals_are_errors_of_the_servers_kind(mode: Mode) {
    let server = Server::start(mode, &[]);
    let session = session(&server);
    let err = session.stat("../etc/passwd").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    let err = session
        .exec(&Exec {
            tag: Some("x".into()),
            ..Exec::command(["true"])
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    assert!(err.to_string().contains("tag"), "{err}");
    session.close().unwrap();
    // A closed session is gone for every call.
    let err = session.exec(&Exec::command(["true"])).unwrap_err();
    assert!(err.to_string().contains(session.id()), "{err}");
    let err = client(&server).session("0123").ls(".", None).unwrap_err();
    assert!(err.to_string().contains("no session"), "{err}");
}

/// A listener of another uid is refused before anything is sent, unless trusted.
#[test]
fn the_library_trusts_only_the_listener_it_is_told_to() {
    let server = Server::start(Mode::Rootless, &[]);
    let err = Client::new(&server.socket)
        .list(&Default::default())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    assert!(
        err.to_string().contains(&format!(
            "the listener is uid {NOBODY}, neither root nor you"
        )),
        "{err}"
    );
    let trusted = Client::new(&server.socket).trusting(NOBODY);
    assert!(trusted.list(&Default::default()).unwrap().is_empty());
}
