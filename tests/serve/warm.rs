//! Warm Python and Node (`brig serve --warm-python N`, `--warm-node N`): a set of
//! programs run by a cold `python3` (`node`) in a one-shot jail and by a warm interpreter
//! of the server must print the same stdout and stderr and end with the same status, as
//! root and rootless (for Node, stack frames below the program's own differ: they are
//! left out of the comparison). And the warm run is reported as such.

use crate::common;

use common::limits::parse_verdict;
use common::serve::Server;
use common::*;
use std::io::Read;
use std::process::{Output, Stdio};

both_modes!(
    warm_python_behaves_as_a_cold_start,
    signals_reach_a_warm_python,
    a_warm_run_is_reported_as_warm,
    warm_node_behaves_as_a_cold_start,
    a_warm_node_is_stopped_and_signaled_as_a_cold_one,
    warm_jails_outlive_the_servers_time_limit_while_idle,
    a_warm_jail_that_dies_idle_is_replaced,
    a_warm_programs_own_usage_report_is_not_its_verdict,
);

const MAIN_PY: &str = r#"import os, sys, helper
print(__name__, __file__, sys.argv, sys.path[0], helper.where())
print("cwd", os.getcwd(), "HOME" in os.environ)
"#;

const HELPER_PY: &str = "import os\ndef where():\n    return os.path.basename(__file__)\n";

/// (arguments after `python3`, stdin): each must behave the same warm and cold.
fn programs() -> Vec<(Vec<&'static str>, &'static str)> {
    vec![
        (
            vec![
                "-c",
                "import sys; print(sys.argv, repr(sys.path[0]), __name__)",
                "a",
                "b",
            ],
            "",
        ),
        (
            vec![
                "-c",
                "import sys, os; print(sys.stdin.read().upper(), end=''); print(os.getcwd())",
            ],
            "from stdin\n",
        ),
        (vec!["-c", "raise ValueError('boom')"], ""),
        (vec!["-c", "x = ("], ""),
        (vec!["-c", "import sys; sys.exit(3)"], ""),
        (vec!["-c", "import sys; sys.exit('a message')"], ""),
        (
            vec![
                "-c",
                "import os, signal; os.kill(os.getpid(), signal.SIGINT)",
            ],
            "",
        ),
        (
            vec![
                "-c",
                "import atexit; atexit.register(print, 'bye'); print('no newline', end='')",
            ],
            "",
        ),
        (vec!["-c", "def f():\n    g()\ndef g():\n    1/0\nf()"], ""),
        (vec!["/task/main.py", "x", "--y"], ""),
        (
            vec!["-", "arg"],
            "import sys\nprint('from stdin script', sys.argv)\nraise SystemExit(4)\n",
        ),
        (vec![], "print('no arguments at all')\n"),
    ]
}

fn task_dir() -> TempDir {
    let dir = TempDir::new("warm-task");
    dir.file("main.py", MAIN_PY);
    dir.file("helper.py", HELPER_PY);
    dir
}

fn run_with_stdin(mode: Mode, args: &[&str], stdin: &str) -> Output {
    let mut command = command(mode, args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start brig");
    let mut input = child.stdin.take().expect("stdin");
    let stdin = stdin.to_string();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = input.write_all(stdin.as_bytes());
    });
    let output = child.wait_with_output().expect("wait");
    writer.join().unwrap();
    output
}

fn warm_python_behaves_as_a_cold_start(mode: Mode) {
    let task = task_dir();
    let bind = format!("{}:/task", task.str());
    let server = Server::start(
        mode,
        &["--pool", "0", "--warm-python", "2", "--ro-bind", &bind],
    );
    let warm_runs =
        compare_cold_and_warm(mode, &server, &bind, "python3", programs(), str::to_string);
    let status = server.status();
    assert_eq!(
        status["warm_runs"], warm_runs,
        "every run was warm: {status}"
    );
}

/// Runs each of `programs` (arguments after `interpreter`, stdin) in a one-shot jail and
/// through `server`'s warm interpreter, and compares their status, stdout and stderr (as
/// `stderr_of` keeps it); how many ran.
fn compare_cold_and_warm(
    mode: Mode,
    server: &Server,
    bind: &str,
    interpreter: &str,
    programs: Vec<(Vec<&str>, &str)>,
    stderr_of: fn(&str) -> String,
) -> usize {
    let mut runs = 0;
    for (args, stdin) in programs {
        let mut cold = vec![
            "run",
            "--quiet-limits",
            "--ro-bind",
            bind,
            "--",
            interpreter,
        ];
        cold.extend(&args);
        let mut warm = vec!["run", "--server", server.socket(), "--", interpreter];
        warm.extend(&args);
        let (cold_output, warm_output) = (
            run_with_stdin(mode, &cold, stdin),
            run_with_stdin(mode, &warm, stdin),
        );
        let what = format!("{interpreter} {args:?}");
        assert_eq!(
            warm_output.status.code(),
            cold_output.status.code(),
            "{what}: {}",
            describe(&warm_output)
        );
        assert_eq!(stdout(&warm_output), stdout(&cold_output), "{what}");
        assert_eq!(
            stderr_of(&stderr(&warm_output)),
            stderr_of(&stderr(&cold_output)),
            "{what}"
        );
        runs += 1;
    }
    runs
}

fn signals_reach_a_warm_python(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--warm-python", "1"]);
    let program = "import time; print('ready', flush=True); time.sleep(30)";
    for args in [
        vec!["run", "--quiet-limits", "--", "python3", "-c", program],
        vec![
            "run",
            "--server",
            server.socket(),
            "--",
            "python3",
            "-c",
            program,
        ],
    ] {
        let output = sigterm_once_ready(mode, &args);
        assert_eq!(
            output.status.code(),
            Some(128 + libc::SIGTERM),
            "{args:?}: {}",
            describe(&output)
        );
    }
    assert_eq!(server.status()["warm_runs"], 1);
}

/// Runs brig with `args`, waits for the program's `ready` line, sends the client SIGTERM.
fn sigterm_once_ready(mode: Mode, args: &[&str]) -> Output {
    let mut client = command(mode, args);
    client.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut client = Running::spawn(client);
    let mut ready = [0u8; 6];
    client
        .child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    kill(client.pid(), libc::SIGTERM);
    client.wait()
}

fn a_warm_run_is_reported_as_warm(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1", "--warm-python", "1"]);
    let warm_ready = || server.status()["warm_ready"] == 1;
    assert!(wait_until(std::time::Duration::from_secs(10), warm_ready));
    let dir = TempDir::new("warm-verdict").writable_by_all();
    let report = dir.path().join("v.json");
    let report = report.to_str().unwrap();
    let output = server.run(
        &["--report", report],
        &["python3", "-c", "sum(range(10**6))"],
    );
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let verdict = parse_verdict(&std::fs::read_to_string(report).unwrap());
    assert_eq!(verdict["warm"], true, "{verdict}");
    assert_eq!(verdict["status"], "ok");
    // Not Python: the cold pooled jail serves it, and says so.
    let output = server.run(&["--report", report], &["sh", "-c", "exit 0"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let verdict = parse_verdict(&std::fs::read_to_string(report).unwrap());
    assert_eq!(verdict["warm"], false, "{verdict}");
    // A time limit holds in a warm jail too.
    assert!(wait_until(std::time::Duration::from_secs(10), warm_ready));
    let output = server.run(
        &["--time-limit", "1s", "--report", report],
        &["python3", "-c", "while True: pass"],
    );
    assert_eq!(code(&output), 124, "{}", describe(&output));
    let verdict = parse_verdict(&std::fs::read_to_string(report).unwrap());
    assert_eq!(
        (verdict["status"].as_str(), verdict["warm"].as_bool()),
        (Some("timeout"), Some(true)),
        "{verdict}"
    );
}

const MAIN_JS: &str = "const helper = require('./helper');\nconsole.log(require.main === module, __filename, __dirname, process.argv.slice(1), helper.where());\nconsole.log('cwd', process.cwd(), 'HOME' in process.env, process.execArgv);\n";

const HELPER_JS: &str = "exports.where = () => require('path').basename(__filename);\n";

/// (arguments after `node`, stdin): each must behave the same warm and cold.
fn node_programs() -> Vec<(Vec<&'static str>, &'static str)> {
    vec![
        (
            vec![
                "-e",
                "console.log(process.argv, require.main, typeof require, __filename, process.execArgv.length)",
                "a",
                "b",
            ],
            "",
        ),
        (
            vec![
                "-e",
                "process.exitCode = 3; setTimeout(() => console.log('later'), 10)",
            ],
            "",
        ),
        (vec!["-e", "throw new Error('boom')"], ""),
        (vec!["-e", "Promise.reject(new TypeError('nope'))"], ""),
        (vec!["-e", "x = ("], ""),
        (vec!["-e", "process.exit(5)"], ""),
        (
            vec![
                "-e",
                "process.stdin.on('data', d => process.stdout.write(d.toString().toUpperCase()))",
            ],
            "from stdin\n",
        ),
        (
            vec![
                "-e",
                "process.on('exit', c => console.log('bye', c)); console.error('to stderr')",
            ],
            "",
        ),
        (
            vec!["-e", "function f() { g() }\nfunction g() { null.x }\nf()"],
            "",
        ),
        (
            vec!["-e", "import('path').then(m => console.log(typeof m.join))"],
            "",
        ),
        (vec!["/task/main.js", "x", "--y"], ""),
        (
            vec!["-", "arg"],
            "console.log('stdin script', process.argv.slice(1)); process.exitCode = 4\n",
        ),
        (vec![], "console.log('no arguments at all')\n"),
    ]
}

/// stderr without stack frames (`    at ...`), which differ below the program's own.
fn without_frames(text: &str) -> String {
    text.lines()
        .filter(|line| !line.starts_with("    at "))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn warm_node_behaves_as_a_cold_start(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let task = TempDir::new("warm-node-task");
    task.file("main.js", MAIN_JS);
    task.file("helper.js", HELPER_JS);
    let bind = format!("{}:/task", task.str());
    let server = Server::start(
        mode,
        &["--pool", "0", "--warm-node", "2", "--ro-bind", &bind],
    );
    let warm_runs = compare_cold_and_warm(
        mode,
        &server,
        &bind,
        "node",
        node_programs(),
        without_frames,
    );
    let status = server.status();
    assert_eq!(
        status["warm_runs"], warm_runs,
        "every run was warm: {status}"
    );
}

fn a_warm_node_is_stopped_and_signaled_as_a_cold_one(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0", "--warm-node", "1"]);
    let warm_ready = || server.status()["warm_node_ready"] == 1;
    assert!(wait_until(std::time::Duration::from_secs(10), warm_ready));
    let dir = TempDir::new("warm-node-verdict").writable_by_all();
    let report = dir.path().join("v.json");
    let report = report.to_str().unwrap();
    let output = server.run(
        &["--time-limit", "1s", "--report", report],
        &["node", "-e", "while (true) {}"],
    );
    assert_eq!(code(&output), 124, "{}", describe(&output));
    let verdict = parse_verdict(&std::fs::read_to_string(report).unwrap());
    assert_eq!(
        (verdict["status"].as_str(), verdict["warm"].as_bool()),
        (Some("timeout"), Some(true)),
        "{verdict}"
    );
    assert!(wait_until(std::time::Duration::from_secs(10), warm_ready));
    let program = "console.log('ready'); setTimeout(() => {}, 30000)";
    let args = [
        "run",
        "--server",
        server.socket(),
        "--",
        "node",
        "-e",
        program,
    ];
    let output = sigterm_once_ready(mode, &args);
    assert_eq!(
        output.status.code(),
        Some(128 + libc::SIGTERM),
        "{}",
        describe(&output)
    );
    assert_eq!(server.status()["warm_runs"], 2);
}

/// The server's --time-limit starts with a request, not when the warm jail was filled:
/// idle past the limit, a warm Python and a warm Node still serve; a program that runs
/// past the limit is still stopped at it (124).
fn warm_jails_outlive_the_servers_time_limit_while_idle(mode: Mode) {
    let server = Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--warm-python",
            "1",
            "--warm-node",
            "1",
            "--time-limit",
            "2s",
        ],
    );
    let both_ready = || {
        let status = server.status();
        status["warm_ready"] == 1 && status["warm_node_ready"] == 1
    };
    assert!(wait_until(std::time::Duration::from_secs(20), both_ready));
    std::thread::sleep(std::time::Duration::from_secs(3));
    let output = server.run(&[], &["python3", "-c", "print(1)"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1\n");
    let output = server.run(&[], &["node", "-e", "console.log(1)"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1\n");
    let status = server.status();
    assert_eq!(status["warm_runs"], 2, "both runs were warm: {status}");
    assert_eq!(status["failures"], 0, "{status}");
    // Refilled, idle past the limit again, then a program that outruns it.
    assert!(wait_until(std::time::Duration::from_secs(20), both_ready));
    std::thread::sleep(std::time::Duration::from_secs(3));
    let dir = TempDir::new("warm-limit").writable_by_all();
    let report = dir.path().join("v.json");
    let report = report.to_str().unwrap();
    for program in [
        ["python3", "-c", "while True: pass"],
        ["node", "-e", "for (;;) {}"],
    ] {
        let output = server.run(&["--report", report], &program);
        assert_eq!(code(&output), 124, "{program:?}: {}", describe(&output));
        let verdict = parse_verdict(&std::fs::read_to_string(report).unwrap());
        assert_eq!(
            (verdict["status"].as_str(), verdict["warm"].as_bool()),
            (Some("timeout"), Some(true)),
            "{verdict}"
        );
        // The request's own limit, and the CPU the kernel counted for the request (the
        // loop spun): the supervisor's one deadline ended it.
        assert_eq!(verdict["limits"]["time_limit_ms"], 2000, "{verdict}");
        assert_eq!(verdict["brig_exit_code"], 124, "{verdict}");
        assert!(
            verdict["cpu_user_ms"].as_u64().is_some_and(|ms| ms > 0),
            "{verdict}"
        );
        assert!(
            verdict["explanation"]
                .as_str()
                .is_some_and(|line| line.starts_with("time limit of 2s reached")),
            "{verdict}"
        );
        assert!(wait_until(std::time::Duration::from_secs(20), both_ready));
    }
}

/// The pids of processes below `root` whose command line contains `text`.
fn descendants_running(root: u32, text: &str) -> Vec<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let below = |mut pid: u32| {
        while let Some(up) = parent(pid) {
            if up == root {
                return true;
            }
            if up <= 1 {
                return false;
            }
            pid = up;
        }
        false
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(text))
        })
        .filter(|pid| below(*pid))
        .collect()
}

/// A warm interpreter that dies while it waits for a request is no longer counted
/// ready, counts as a failure, is logged in one line and replaced; the next request is
/// served warm.
fn a_warm_jail_that_dies_idle_is_replaced(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "0", "--warm-python", "1"]);
    let ready = || server.status()["warm_ready"] == 1;
    assert!(wait_until(std::time::Duration::from_secs(20), ready));
    let interpreters = descendants_running(server.pid(), "brig-warm");
    assert_eq!(interpreters.len(), 1, "one warm Python: {interpreters:?}");
    kill(interpreters[0], libc::SIGKILL);
    let replaced = || {
        let status = server.status();
        status["failures"] == 1 && status["warm_ready"] == 1
    };
    assert!(
        wait_until(std::time::Duration::from_secs(20), replaced),
        "{}",
        server.status()
    );
    assert_ne!(descendants_running(server.pid(), "brig-warm"), interpreters);
    let output = server.run(&[], &["python3", "-c", "print(1)"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "1\n");
    assert_eq!(server.status()["warm_runs"], 1);
    let stopped = server.stop();
    let log = String::from_utf8_lossy(&stopped.stderr);
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("warm Python"))
        .collect();
    assert_eq!(
        lines,
        [
            "brig serve: a warm Python ended while it waited for a request (killed by SIGKILL); another is built"
        ],
        "{log}"
    );
}

/// The attack of issue 21: a warm program writes its own usage report on the
/// interpreter's descriptor 3 (where the bootstrap used to report the request's CPU time)
/// and ends before the bootstrap can. The verdict's CPU time is the kernel's all the same:
/// a program burning a second of CPU while claiming 0 ms is charged at least half a
/// second; an idle one claiming 999 s is charged next to nothing. Python and Node.
fn a_warm_programs_own_usage_report_is_not_its_verdict(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(
        mode,
        &["--pool", "0", "--warm-python", "1", "--warm-node", "1"],
    );
    let dir = TempDir::new("warm-forged-usage").writable_by_all();
    let report = dir.path().join("v.json");
    let report = report.to_str().unwrap();
    let python_burn = "import os, time\nend = time.process_time() + 1\nwhile time.process_time() < end:\n    pass\nos.write(3, b'{\"cpu_user_ms\": 0, \"cpu_sys_ms\": 0}')\nos._exit(0)";
    let python_idle =
        "import os\nos.write(3, b'{\"cpu_user_ms\": 999999, \"cpu_sys_ms\": 999999}')\nos._exit(0)";
    let node_burn = "const fs = require('fs'); const end = process.cpuUsage().user + 1e6; while (process.cpuUsage().user < end) {} fs.writeSync(3, '{\"cpu_user_ms\": 0, \"cpu_sys_ms\": 0}'); fs.closeSync(3)";
    let node_idle = "const fs = require('fs'); fs.writeSync(3, '{\"cpu_user_ms\": 999999, \"cpu_sys_ms\": 999999}'); fs.closeSync(3)";
    let cases = [
        ("python3", "-c", python_burn, "warm_ready", true),
        ("python3", "-c", python_idle, "warm_ready", false),
        ("node", "-e", node_burn, "warm_node_ready", true),
        ("node", "-e", node_idle, "warm_node_ready", false),
    ];
    for (interpreter, option, code_text, ready, burns) in cases {
        let warm_ready = || server.status()[ready] == 1;
        assert!(wait_until(std::time::Duration::from_secs(20), warm_ready));
        let output = server.run(&["--report", report], &[interpreter, option, code_text]);
        assert_eq!(code(&output), 0, "{}", describe(&output));
        let verdict = parse_verdict(&std::fs::read_to_string(report).unwrap());
        assert_eq!(verdict["warm"], true, "{verdict}");
        let user = verdict["cpu_user_ms"].as_u64().expect("cpu_user_ms");
        let sys = verdict["cpu_sys_ms"].as_u64().expect("cpu_sys_ms");
        if burns {
            assert!(
                user + sys >= 500,
                "{interpreter}: a second of CPU burnt, the verdict says {verdict}"
            );
        } else {
            assert!(
                user < 500 && sys < 500,
                "{interpreter}: an idle program claimed 999999 ms, the verdict says {verdict}"
            );
        }
    }
}
