//! Every example in the documentation runs as written: the fenced blocks of README.md,
//! clients/python/README.md, clients/node/README.md and deploy/README.md.
//!
//! Each document's blocks run in order, as root, with the real brig on PATH, in a fresh
//! directory that holds the checkout's top-level entries (symlinks), so that the examples
//! "from the checkout" (`deploy/clients/...`, `./clients/python`) work there. Blocks of a
//! document share that directory (what one writes, the next finds), and `BRIG_SERVER` is
//! `$PWD/brig.sock`, the socket the documents' own `brig serve` examples listen on; a
//! process a block leaves running in the background (a server) lives until the
//! document's last block has run. `.venv/bin`, once a block has made it, comes first on
//! PATH, as for a user who activated it. Nothing is fetched: `PIP_NO_INDEX=1` and npm is
//! offline.
//!
//! - ```` ```sh ````, `bash`: run with `bash -e -o pipefail`; `python`: with `python3`;
//!   `js`: with `node`, from a file in the document's directory (`.mjs` when the block
//!   has an `import` line, else `.js`, CommonJS).
//! - `yaml`, `json`, `text`: data; after `<!-- file: NAME -->` written to NAME for the
//!   blocks that follow.
//! - `<!-- expect: TEXT -->` right before a block: its standard output must contain TEXT
//!   (key output only: wording that other changes may touch is not pinned).
//! - `<!-- not run: REASON -->` right before a block: not run (it needs what this machine
//!   lacks, e.g. systemd as PID 1, or installs into the system); the reason is required and
//!   the test lists every such block.
//!
//! A block that fails, runs longer than two minutes or has no language fails its test.

use crate::common;

use common::*;
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BLOCK_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, PartialEq)]
enum Kind {
    Shell,
    Python,
    Node,
    Data,
}

#[derive(Debug)]
struct Block {
    line: usize,
    kind: Kind,
    code: String,
    not_run: Option<String>,
    file: Option<String>,
    /// Text its standard output must contain.
    expect: Vec<String>,
}

fn kind_of(info: &str) -> Option<Kind> {
    match info.split_whitespace().next().unwrap_or("") {
        "sh" | "bash" => Some(Kind::Shell),
        "python" => Some(Kind::Python),
        "js" | "javascript" => Some(Kind::Node),
        "yaml" | "json" | "text" => Some(Kind::Data),
        _ => None,
    }
}

/// The fenced blocks of a Markdown text, each with the directive in an HTML comment right
/// before it. Panics on a block whose language says nothing about how to run it.
fn blocks(name: &str, text: &str) -> Vec<Block> {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut directives: Vec<String> = Vec::new();
    let mut current: Option<Block> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Html(html) | Event::InlineHtml(html) => {
                let html = html.trim();
                if let Some(inner) = html
                    .strip_prefix("<!--")
                    .and_then(|rest| rest.strip_suffix("-->"))
                {
                    directives.push(inner.trim().to_string());
                }
            }
            Event::Start(Tag::HtmlBlock) | Event::End(TagEnd::HtmlBlock) => {}
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let line = line_of(range.start);
                let kind = kind_of(&info).unwrap_or_else(|| {
                    panic!(
                        "{name}:{line}: a block with the language `{info}`: give it one of sh, \
                         python, js (run) or yaml, json, text (data)"
                    )
                });
                let mut block = Block {
                    line,
                    kind,
                    code: String::new(),
                    not_run: None,
                    file: None,
                    expect: Vec::new(),
                };
                for directive in directives.drain(..) {
                    if let Some(reason) = directive.strip_prefix("not run:") {
                        let reason = reason.trim();
                        assert!(
                            !reason.is_empty(),
                            "{name}:{line}: `not run:` needs a reason"
                        );
                        block.not_run = Some(reason.to_string());
                    } else if let Some(file) = directive.strip_prefix("file:") {
                        block.file = Some(file.trim().to_string());
                    } else if let Some(text) = directive.strip_prefix("expect:") {
                        block.expect.push(text.trim().to_string());
                    }
                }
                current = Some(block);
            }
            Event::Text(code) if current.is_some() => {
                current.as_mut().unwrap().code.push_str(&code);
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some(block) = current.take() {
                    found.push(block);
                }
            }
            // Anything between a comment and a block unties them.
            _ => directives.clear(),
        }
    }
    found
}

/// A fresh directory with symlinks to the checkout's top-level entries.
fn checkout_view(label: &str) -> TempDir {
    let dir = TempDir::new(label);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root).unwrap().flatten() {
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.path().join(&name)).unwrap();
    }
    dir
}

/// Kills what is left of a block's process group: SIGTERM (a server drains), then SIGKILL.
fn end_group(pgid: i32) {
    let alive = || send(-pgid, 0);
    if !alive() {
        return;
    }
    send(-pgid, libc::SIGTERM);
    if !wait_until(Duration::from_secs(15), || !alive()) {
        send(-pgid, libc::SIGKILL);
        wait_until(Duration::from_secs(5), || !alive());
    }
}

/// kill(2); true when the signal was delivered (or, for 0, the target exists).
fn send(pid: i32, signal: i32) -> bool {
    let signal = if signal == 0 {
        None
    } else {
        Some(nix::sys::signal::Signal::try_from(signal).unwrap())
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).is_ok()
}

struct Tally {
    ran: usize,
    not_run: Vec<String>,
    data: usize,
}

/// Runs every block of one document; panics with the first failure.
fn run_document(doc: &str) -> Tally {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let label = doc.replace(['/', '.'], "-").to_lowercase();
    let dir = checkout_view(&label);
    let home = TempDir::new(&format!("{label}-home"));
    let bin = TempDir::new(&format!("{label}-bin"));
    std::os::unix::fs::symlink(brig(), bin.path().join("brig")).unwrap();
    let mut tally = Tally {
        ran: 0,
        not_run: Vec::new(),
        data: 0,
    };
    let mut groups = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (index, block) in blocks(doc, &text).into_iter().enumerate() {
            let at = format!("{doc}:{}", block.line);
            if let Some(reason) = &block.not_run {
                tally.not_run.push(format!("{at}: {reason}"));
                continue;
            }
            if block.kind == Kind::Data {
                if let Some(file) = &block.file {
                    std::fs::write(dir.path().join(file), &block.code).unwrap();
                }
                tally.data += 1;
                continue;
            }
            let (program, script) = match block.kind {
                Kind::Shell => ("bash", format!(".docs-block-{index}.sh")),
                Kind::Python => ("python3", format!(".docs-block-{index}.py")),
                // A block that imports is an ES module (top-level `await` works there).
                Kind::Node if block.code.lines().any(|line| line.starts_with("import ")) => {
                    ("node", format!(".docs-block-{index}.mjs"))
                }
                Kind::Node => ("node", format!(".docs-block-{index}.js")),
                Kind::Data => unreachable!(),
            };
            std::fs::write(dir.path().join(&script), &block.code).unwrap();
            let mut path = format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                bin.str()
            );
            let venv = dir.path().join(".venv/bin");
            if venv.is_dir() {
                path = format!("{}:{path}", venv.display());
            }
            let out_path = dir.path().join(format!(".docs-block-{index}.out"));
            let err_path = dir.path().join(format!(".docs-block-{index}.err"));
            let mut command = Command::new(program);
            if block.kind == Kind::Shell {
                command.args(["-e", "-o", "pipefail"]);
            }
            command
                .arg(&script)
                .current_dir(dir.path())
                .env_clear()
                .env("PATH", path)
                .env("HOME", home.path())
                .env("LANG", "C.UTF-8")
                .env("BRIG_SERVER", dir.path().join("brig.sock"))
                // The checkout is shared: no __pycache__ written into it.
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("PIP_NO_INDEX", "1")
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
                .env("npm_config_offline", "true")
                .env("npm_config_update_notifier", "false")
                .stdin(Stdio::null())
                // Files, not pipes: a server a block leaves running keeps its output open.
                .stdout(std::fs::File::create(&out_path).unwrap())
                .stderr(std::fs::File::create(&err_path).unwrap())
                .process_group(0);
            let mut child = command
                .spawn()
                .unwrap_or_else(|err| panic!("{at}: start {program}: {err}"));
            let pgid = child.id() as i32;
            groups.push(pgid);
            let started = Instant::now();
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break Some(status);
                }
                if started.elapsed() > BLOCK_TIMEOUT {
                    send(-pgid, libc::SIGKILL);
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let read = |path: &PathBuf| std::fs::read_to_string(path).unwrap_or_default();
            let stdout = read(&out_path);
            let missing: Vec<&String> = block
                .expect
                .iter()
                .filter(|text| !stdout.contains(text.as_str()))
                .collect();
            match status {
                Some(status) if status.success() && missing.is_empty() => tally.ran += 1,
                _ => panic!(
                    "{at}: the example failed ({}; expected in its output and missing: {missing:?}):\n--- block ---\n{}--- stdout ---\n{}--- stderr ---\n{}",
                    status.map_or("ran past 2 minutes".to_string(), |s| s.to_string()),
                    block.code,
                    stdout,
                    read(&err_path),
                ),
            }
        }
    }));
    for pgid in groups {
        end_group(pgid);
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    eprintln!(
        "{doc}: {} examples ran, {} data blocks, {} not run:",
        tally.ran,
        tally.data,
        tally.not_run.len()
    );
    for line in &tally.not_run {
        eprintln!("  {line}");
    }
    tally
}

fn document_runs(doc: &str) {
    if !require_root() {
        return;
    }
    let tally = run_document(doc);
    assert!(tally.ran > 0, "{doc}: no example ran");
}

#[test]
fn readme_examples_run() {
    document_runs("README.md");
}

#[test]
fn python_client_examples_run() {
    document_runs("clients/python/README.md");
}

#[test]
fn node_client_examples_run() {
    document_runs("clients/node/README.md");
}

#[test]
fn deploy_examples_run() {
    document_runs("deploy/README.md");
}

/// The extractor: languages, directives, and a directive that does not touch its block.
#[test]
fn docs_blocks_are_classified() {
    let text = "x\n\n<!-- expect: 42 -->\n<!-- not run: needs systemd -->\n```sh\nsystemctl start x\n```\n\n<!-- file: a.yaml -->\n```yaml\nk: 1\n```\n\n<!-- not run: far away -->\n\ntext\n\n```python\nprint(1)\n```\n";
    let found = blocks("t.md", text);
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(found[0].kind, Kind::Shell);
    assert_eq!(found[0].not_run.as_deref(), Some("needs systemd"));
    assert_eq!(found[0].expect, ["42"]);
    assert_eq!(found[1].file.as_deref(), Some("a.yaml"));
    assert_eq!(found[2].kind, Kind::Python);
    assert_eq!(
        found[2].not_run, None,
        "a comment before a paragraph marks nothing"
    );
    let unmarked = std::panic::catch_unwind(|| blocks("t.md", "```\nls\n```\n"));
    assert!(unmarked.is_err(), "a block without a language must fail");
}
