//! The sessions' persistent interpreters (src/serve/session_python.py and
//! src/serve/session_node.js), started without a jail but exactly as brig's runner starts
//! them inside one: `/usr/bin/python3 -c LAUNCH SCRIPT` or `/usr/bin/node -e SCRIPT`, with
//! descriptor 0 on /dev/null, 1 and 2 pipes, 3 a connected AF_UNIX stream socket that
//! carries the JSON lines. Each test drives one interpreter through that socket: its
//! `{"ready": true}`, cells and their replies, SIGINT during a cell and while idle, EOF.

use crate::common;

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";
const NODE: &str = "/usr/bin/node";
/// The runner's launch line for Python: the script's frames are named <brig-session>.
const PYTHON_LAUNCH: &str = "import sys; exec(compile(sys.argv[1], '<brig-session>', 'exec'))";
const PYTHON_SCRIPT: &str = include_str!("../../src/serve/session_python.py");
const NODE_SCRIPT: &str = include_str!("../../src/serve/session_node.js");

/// Only a guard against a hang: no test expects anything to take this long.
const HANG_GUARD: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Language {
    Python,
    Node,
}

/// One interpreter and its ends of the descriptors.
struct Interpreter {
    child: Child,
    control: BufReader<UnixStream>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    next_id: u64,
    _cwd: TempDir,
}

/// Collects all a pipe carries, in a thread.
fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buffer);
    thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    buffer
}

impl Interpreter {
    /// Starts the interpreter, or returns None when it is missing and skipping is allowed.
    fn start(language: Language) -> Option<Interpreter> {
        let program = match language {
            Language::Python => PYTHON,
            Language::Node => NODE,
        };
        let how = match language {
            Language::Python => "apt install python3",
            Language::Node => "apt install nodejs",
        };
        if !require(
            &format!("the program {program}"),
            how,
            Path::new(program).is_file(),
        ) {
            return None;
        }
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let cwd = TempDir::new("session-interpreter");
        let mut command = Command::new(program);
        match language {
            Language::Python => command.args(["-c", PYTHON_LAUNCH, PYTHON_SCRIPT]),
            Language::Node => command.args(["-e", NODE_SCRIPT]),
        };
        command
            .current_dir(cwd.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let fd = theirs.as_raw_fd();
        // SAFETY: between fork and exec the closure only calls dup2 and fcntl, which are
        // async-signal-safe, on descriptors that exist in the child; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                // The socket is close-on-exec (as std makes every descriptor); dup2 gives
                // descriptor 3 a copy without that flag, or, if it already is 3, clear it.
                if fd == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, 3) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("start the interpreter");
        drop(theirs);
        ours.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        let mut interpreter = Interpreter {
            child,
            control: BufReader::new(ours),
            stdout,
            stderr,
            next_id: 0,
            _cwd: cwd,
        };
        let ready = interpreter.read_line();
        assert_eq!(ready, json!({"ready": true}), "the first line");
        Some(interpreter)
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn read_line(&mut self) -> Value {
        let mut line = String::new();
        let n = self.control.read_line(&mut line).unwrap_or_else(|error| {
            panic!(
                "no line from the interpreter: {error}; stderr: {}",
                self.stderr_text()
            )
        });
        assert!(
            n > 0,
            "the interpreter closed descriptor 3; stderr: {}",
            self.stderr_text()
        );
        assert!(line.ends_with('\n'), "a line ends with a newline: {line:?}");
        serde_json::from_str(&line).unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"))
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.control
            .get_mut()
            .write_all(bytes)
            .expect("write a request");
    }

    /// Sends a cell; returns its id.
    fn send(&mut self, code: &str) -> u64 {
        self.next_id += 1;
        let mut line = json!({"id": self.next_id, "code": code}).to_string();
        line.push('\n');
        self.send_raw(line.as_bytes());
        self.next_id
    }

    /// The reply to the cell `id`, checked for the fields every reply has: data only (no
    /// CPU time or status: brig takes those from the kernel; the rich results are
    /// tests/serve/session_rich.rs's).
    fn reply(&mut self, id: u64) -> Value {
        let reply = self.read_line();
        assert_eq!(reply["id"], json!(id), "the reply's id: {reply}");
        let mut keys: Vec<&str> = reply
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["error", "id", "result", "results", "results_dropped"],
            "{reply}"
        );
        assert!(
            reply["result"].is_null() || reply["result"].is_string(),
            "{reply}"
        );
        assert!(reply["results"].is_array(), "{reply}");
        reply
    }

    /// Runs a cell and returns its reply.
    fn cell(&mut self, code: &str) -> Value {
        let id = self.send(code);
        self.reply(id)
    }

    /// Runs a cell that must succeed; returns its result.
    fn ok(&mut self, code: &str) -> Value {
        let reply = self.cell(code);
        assert!(
            reply["error"].is_null(),
            "the cell {code:?} failed: {reply}"
        );
        reply["result"].clone()
    }

    /// Runs a cell that must fail; returns its error object.
    fn error(&mut self, code: &str) -> Value {
        let reply = self.cell(code);
        assert!(reply["result"].is_null(), "{reply}");
        let error = reply["error"].clone();
        for key in ["type", "message", "traceback"] {
            assert!(error[key].is_string(), "error.{key} is a string: {reply}");
        }
        error
    }

    fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits (within the hang guard) until a pipe's collector has seen `text`.
    fn wait_for_output(&self, stderr: bool, text: &str) {
        let start = Instant::now();
        loop {
            let seen = if stderr {
                self.stderr_text()
            } else {
                self.stdout_text()
            };
            if seen.contains(text) {
                return;
            }
            assert!(
                start.elapsed() < HANG_GUARD,
                "{text:?} never came on {}: {seen:?}",
                if stderr { "stderr" } else { "stdout" }
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGINT and waits until the kernel has delivered it (no SIGINT pending for
    /// the process or any of its threads), so that it is known to have come now.
    fn interrupt_and_wait_delivery(&self) {
        kill(self.pid(), Signal::SIGINT).expect("send SIGINT");
        let start = Instant::now();
        while sigint_pending(self.child.id()) {
            assert!(start.elapsed() < HANG_GUARD, "SIGINT never delivered");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Closes descriptor 3 and returns the exit status.
    fn close(mut self) -> std::process::ExitStatus {
        self.control
            .get_ref()
            .shutdown(Shutdown::Both)
            .expect("shut the socket down");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if start.elapsed() > HANG_GUARD {
                panic!("the interpreter did not exit at EOF on descriptor 3");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether SIGINT is pending for the process (SigPnd of any thread, or ShdPnd).
fn sigint_pending(pid: u32) -> bool {
    let sigint_bit = 1u64 << (Signal::SIGINT as u32 - 1);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        status.lines().any(|line| {
            let (key, value) = line.split_once(':').unwrap_or(("", ""));
            (key == "SigPnd" || key == "ShdPnd")
                && u64::from_str_radix(value.trim(), 16).unwrap_or(0) & sigint_bit != 0
        })
    })
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"))
}

// ---------- Python ----------

#[test]
fn python_state_and_imports_persist_between_cells() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    assert_eq!(py.ok("x = 41"), Value::Null);
    assert_eq!(py.ok("x + 1"), json!("42"));
    assert_eq!(py.ok("def double(n):\n    return 2 * n"), Value::Null);
    assert_eq!(py.ok("import math"), Value::Null);
    assert_eq!(py.ok("math.sqrt(16)"), json!("4.0"));
    assert_eq!(py.ok("double(x)"), json!("82"));
    // As IPython: `_` is the last result.
    assert_eq!(py.ok("_ + 1"), json!("83"));
    assert_eq!(py.ok("__name__"), json!("'__main__'"));
    assert_eq!(
        py.ok("import sys; sys.modules['__main__'].__dict__ is globals()"),
        json!("True")
    );
    // Nothing of the interpreter's own among the cells' names.
    assert_eq!(
        py.ok("sorted(k for k in globals() if not k.startswith('__'))"),
        json!("['_', 'double', 'math', 'sys', 'x']")
    );
}

#[test]
fn python_result_is_the_final_expression_repr() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    assert_eq!(py.ok("'a'"), json!("'a'"));
    assert_eq!(py.ok("y = 'a'"), Value::Null);
    assert_eq!(py.ok("None"), Value::Null);
    assert_eq!(py.ok("for i in range(3):\n    pass"), Value::Null);
    assert_eq!(py.ok("z = [1]\nz + [2]"), json!("[1, 2]"));
    // A result too large for one reply line is cut, and says so; the interpreter goes on.
    let large = py.ok("'x' * 3_000_000");
    assert!(text(&large).ends_with("... [2960002 more characters]"));
    assert_eq!(
        text(&large).len(),
        40_000 + "... [2960002 more characters]".len()
    );
    assert_eq!(py.ok("1 + 1"), json!("2"));
}

#[test]
fn python_output_goes_to_the_stdout_and_stderr_pipes() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    assert_eq!(
        py.ok("import sys\nprint('to stdout')\nsys.stderr.write('to stderr\\n')\nNone"),
        Value::Null
    );
    py.wait_for_output(false, "to stdout\n");
    py.wait_for_output(true, "to stderr\n");
    // A child process writes straight to the same descriptors.
    py.ok("import os; os.system('echo from a child')");
    py.wait_for_output(false, "from a child\n");
}

#[test]
fn python_exception_is_the_cell_error_with_the_cells_traceback() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    py.ok("def inverse(n):\n    return 1 / n");
    let error = py.error("a = 1\ninverse(0)");
    assert_eq!(error["type"], json!("ZeroDivisionError"));
    assert_eq!(error["message"], json!("division by zero"));
    let traceback = text(&error["traceback"]);
    assert!(
        traceback.starts_with("Traceback (most recent call last):\n"),
        "{traceback}"
    );
    // The cell's line and the earlier cell's function, with their source lines.
    assert!(
        traceback.contains(", line 2, in <module>\n    inverse(0)\n"),
        "{traceback}"
    );
    assert!(
        traceback.contains(", line 2, in inverse\n    return 1 / n\n"),
        "{traceback}"
    );
    assert!(traceback.contains("File \"<cell-"), "{traceback}");
    assert!(
        traceback.ends_with("ZeroDivisionError: division by zero\n"),
        "{traceback}"
    );
    assert!(!traceback.contains("<brig-session>"), "{traceback}");
    // Only the error object has it: stderr has what the cell wrote, nothing.
    py.ok("import sys; sys.stderr.write('end\\n')");
    py.wait_for_output(true, "end\n");
    assert_eq!(py.stderr_text(), "end\n");
}

#[test]
fn python_syntax_error_is_the_cell_error() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    py.ok("kept = 1");
    let error = py.error("kept = 2\nx = (");
    assert_eq!(error["type"], json!("SyntaxError"));
    let traceback = text(&error["traceback"]);
    assert!(traceback.contains(", line 2\n    x = (\n"), "{traceback}");
    assert!(traceback.contains("SyntaxError: "), "{traceback}");
    assert!(!traceback.contains("<brig-session>"), "{traceback}");
    // Nothing of the cell ran.
    assert_eq!(py.ok("kept"), json!("1"));
}

#[test]
fn python_sigint_interrupts_a_busy_cell_and_keeps_the_namespace() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    py.ok("kept = 'still here'");
    let id = py.send("print('spinning', flush=True)\nwhile True: pass");
    py.wait_for_output(false, "spinning\n");
    kill(py.pid(), Signal::SIGINT).unwrap();
    let reply = py.reply(id);
    assert_eq!(
        reply["error"]["type"],
        json!("KeyboardInterrupt"),
        "{reply}"
    );
    let traceback = text(&reply["error"]["traceback"]);
    assert!(traceback.contains("while True: pass"), "{traceback}");
    assert!(!traceback.contains("<brig-session>"), "{traceback}");
    assert_eq!(py.ok("kept"), json!("'still here'"));
}

#[test]
fn python_sigint_while_idle_is_ignored() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    py.ok("kept = 7");
    for _ in 0..3 {
        py.interrupt_and_wait_delivery();
    }
    assert_eq!(py.ok("kept"), json!("7"));
    assert!(py.child.try_wait().unwrap().is_none());
}

#[test]
fn python_system_exit_is_an_error_and_the_interpreter_stays() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    py.ok("kept = 3");
    let error = py.error("import sys; sys.exit(4)");
    assert_eq!(error["type"], json!("SystemExit"));
    assert_eq!(error["message"], json!("4"));
    assert_eq!(py.error("exit()")["type"], json!("SystemExit"));
    assert_eq!(py.ok("kept"), json!("3"));
}

#[test]
fn python_malformed_line_is_a_protocol_error() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    protocol_errors(&mut py);
}

#[test]
fn python_exits_zero_at_eof() {
    let Some(mut py) = Interpreter::start(Language::Python) else {
        return;
    };
    // A thread a cell left running does not hold the exit.
    py.ok("import threading, time; threading.Thread(target=time.sleep, args=(600,)).start()");
    let status = py.close();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

// ---------- Node ----------

#[test]
fn node_state_declarations_and_requires_persist_between_cells() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    node.ok("x = 41");
    assert_eq!(node.ok("x + 1"), json!("42"));
    // Top-level let/const/function/class of one cell are seen by the next, as in the REPL.
    assert_eq!(
        node.ok("let l = 1; const c = 2; function f() { return 3 } class K { static v = 4 }"),
        Value::Null
    );
    assert_eq!(node.ok("[l, c, f(), K.v]"), json!("[ 1, 2, 3, 4 ]"));
    assert_eq!(node.ok("const path = require('path')"), Value::Null);
    assert_eq!(node.ok("path.join('a', 'b')"), json!("'a/b'"));
    assert_eq!(node.ok("Math.sqrt(16)"), json!("4"));
    // What a REPL has, and nothing of the interpreter's own.
    assert_eq!(
        node.ok("[console, require, process, Buffer, setTimeout, setInterval, clearTimeout, URL, TextEncoder, TextDecoder, structuredClone].every(Boolean)"),
        json!("true")
    );
    assert_eq!(
        node.ok("typeof __filename + ' ' + typeof compileCell + ' ' + typeof runCell"),
        json!("'undefined undefined undefined'")
    );
    // A value from a built-in module is of the cells' realm.
    assert_eq!(
        node.ok("try { fs.readFileSync('/nonexistent') } catch (e) { e instanceof Error }"),
        json!("true")
    );
}

#[test]
fn node_result_is_the_inspected_completion_value() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    assert_eq!(node.ok("'a'"), json!("'a'"));
    assert_eq!(node.ok("let y = 'a';"), Value::Null);
    assert_eq!(node.ok("undefined"), Value::Null);
    assert_eq!(node.ok("null"), json!("null"));
    assert_eq!(node.ok("({ a: [1, 2] })"), json!("{ a: [ 1, 2 ] }"));
    // A result too large for one reply line is cut, and says so; the interpreter goes on.
    let large = node.ok("Array.from({ length: 100 }, () => 'x'.repeat(9000))");
    assert!(text(&large).ends_with(" more characters]"));
    assert!(text(&large).len() < 40_100);
    assert_eq!(node.ok("1 + 1"), json!("2"));
    // A promise is awaited.
    assert_eq!(
        node.ok("new Promise((resolve) => setTimeout(() => resolve(8), 10))"),
        json!("8")
    );
    let error = node.error("Promise.reject(new TypeError('refused'))");
    assert_eq!(error["type"], json!("TypeError"));
    assert_eq!(error["message"], json!("refused"));
}

#[test]
fn node_top_level_await_keeps_declarations() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    assert_eq!(
        node.ok(
            "const v = await new Promise((resolve) => setTimeout(() => resolve(21), 10)); v * 2"
        ),
        json!("42")
    );
    assert_eq!(node.ok("v"), json!("21"));
}

#[test]
fn node_output_goes_to_the_stdout_and_stderr_pipes() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    node.ok("console.log('to stdout'); console.error('to stderr')");
    node.wait_for_output(false, "to stdout\n");
    node.wait_for_output(true, "to stderr\n");
}

#[test]
fn node_exception_is_the_cell_error_with_the_cells_stack() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    node.ok("function check(n) {\n  if (n === 0) throw new RangeError('zero');\n}");
    let error = node.error("const a = 1;\ncheck(0);");
    assert_eq!(error["type"], json!("RangeError"));
    assert_eq!(error["message"], json!("zero"));
    let traceback = text(&error["traceback"]);
    assert!(traceback.contains("RangeError: zero\n"), "{traceback}");
    // The function's frame (cell 1, line 2), then the cell's own (cell 2, line 2).
    assert!(
        traceback.contains("    at check (<cell-1>:2:"),
        "{traceback}"
    );
    assert!(traceback.contains("    at <cell-2>:2:"), "{traceback}");
    assert!(!traceback.contains("[eval]"), "{traceback}");
    assert!(!traceback.contains("node:vm"), "{traceback}");
    // A thrown non-Error.
    let error = node.error("throw 'plain'");
    assert_eq!(error["type"], json!("string"));
    assert_eq!(error["message"], json!("plain"));
    node.ok("console.error('end')");
    node.wait_for_output(true, "end\n");
    assert_eq!(node.stderr_text(), "end\n");
}

#[test]
fn node_syntax_error_is_the_cell_error() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    let error = node.error("let kept = 2;\nx = (");
    assert_eq!(error["type"], json!("SyntaxError"));
    assert!(
        text(&error["traceback"]).contains("SyntaxError: "),
        "{error}"
    );
    assert_eq!(node.ok("typeof kept"), json!("'undefined'"));
}

#[test]
fn node_sigint_interrupts_a_busy_cell_and_keeps_the_globals() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    node.ok("const kept = 'still here'");
    let id = node.send("require('fs').writeSync(1, 'spinning\\n'); while (true) {}");
    node.wait_for_output(false, "spinning\n");
    kill(node.pid(), Signal::SIGINT).unwrap();
    let reply = node.reply(id);
    assert_eq!(reply["error"]["type"], json!("Interrupted"), "{reply}");
    assert_eq!(node.ok("kept"), json!("'still here'"));
    // A cell waiting for a promise that never settles is interrupted too.
    let id = node.send("require('fs').writeSync(1, 'waiting\\n'); new Promise(() => {})");
    node.wait_for_output(false, "waiting\n");
    kill(node.pid(), Signal::SIGINT).unwrap();
    let reply = node.reply(id);
    assert_eq!(reply["error"]["type"], json!("Interrupted"), "{reply}");
    assert_eq!(node.ok("kept"), json!("'still here'"));
}

#[test]
fn node_sigint_while_idle_is_ignored() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    node.ok("const kept = 7");
    for _ in 0..3 {
        node.interrupt_and_wait_delivery();
    }
    assert_eq!(node.ok("kept"), json!("7"));
    assert!(node.child.try_wait().unwrap().is_none());
}

#[test]
fn node_async_throw_and_unhandled_rejection_keep_the_interpreter() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    node.ok("const kept = 5");
    node.ok("setTimeout(() => { throw new Error('timer boom') }, 1); Promise.reject(new Error('nobody waits')); 1");
    node.wait_for_output(true, "timer boom");
    node.wait_for_output(true, "nobody waits");
    assert_eq!(node.ok("kept"), json!("5"));
}

#[test]
fn node_malformed_line_is_a_protocol_error() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    protocol_errors(&mut node);
}

#[test]
fn node_exits_zero_at_eof() {
    let Some(mut node) = Interpreter::start(Language::Node) else {
        return;
    };
    // A pending timer does not hold the exit.
    node.ok("setTimeout(() => {}, 600000); 1");
    let status = node.close();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

// ---------- Both ----------

/// A line that is not JSON, and a JSON object without code: each gets a ProtocolError
/// reply, and the interpreter goes on.
fn protocol_errors(interpreter: &mut Interpreter) {
    interpreter.send_raw(b"this is not json\n");
    let reply = interpreter.read_line();
    assert_eq!(reply["id"], Value::Null, "{reply}");
    assert_eq!(reply["result"], Value::Null, "{reply}");
    assert_eq!(reply["error"]["type"], json!("ProtocolError"), "{reply}");
    interpreter.send_raw(b"{\"id\": 99}\n");
    let reply = interpreter.read_line();
    assert_eq!(reply["id"], json!(99), "{reply}");
    assert_eq!(reply["error"]["type"], json!("ProtocolError"), "{reply}");
    assert_eq!(interpreter.ok("1 + 1"), json!("2"));
}
