//! E2B's templates as hermetic roots, as root and rootless: the shipped manifests
//! `e2b-base` and `e2b-code-interpreter` built by `brig rootfs build` (as root, once per
//! run of this test binary, into a directory every user can read, removed at exit), then
//!
//! - served by `brig gateway --template-roots DIR` (the built-in `base` and
//!   `code-interpreter-v1` in `DIR/base`, `DIR/code-interpreter-v1`) and by a template of
//!   `--templates FILE` naming a root (`rootfs:`), in front of a `brig serve
//!   --allow-bind-under DIR`, driven by E2B's code-interpreter SDK (pinned, unmodified):
//!   git, curl, node and python3 run, files and a terminal work; `run_code` with numpy
//!   and pandas, a matplotlib chart as PNG, javascript and bash cells; and the jail sees
//!   exactly its root's /usr/bin, not the host's: the host's perl is `command not found`
//!   (127), `base` has no numpy; a server that lets clients name no root refuses the
//!   template's (the SDK's error naming `--allow-bind-under`), and a `--template-roots`
//!   holding no root stops the gateway at start (125, one line naming the builds);
//! - a plain `brig session` in the code interpreter's root: cells in python (numpy,
//!   pandas), node and bash with `--user user` (the root's user), and without it one
//!   line naming the option (the root has /home/user, not the default /home/sandbox).

use crate::common;
use crate::gateway::{Gateway, KEY_A, assert_passed};
use crate::gateway_interpreter::sdk_python;

use common::serve::Server;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

both_modes!(
    e2b_templates_run_in_hermetic_roots,
    a_template_root_must_be_one_the_server_allows,
    a_session_runs_in_a_hermetic_root,
);

/// The built-in templates and the shipped manifest each one's root is built from.
const ROOTS: [(&str, &str); 2] = [
    ("base", "e2b-base"),
    ("code-interpreter-v1", "e2b-code-interpreter"),
];

/// The host has what the manifests copy: Debian's python3 with numpy, pandas and
/// matplotlib, node, git and curl (and perl, the program the jail must not see).
fn host_has_the_templates_tools() -> bool {
    let python_modules = Command::new("/usr/bin/python3")
        .args(["-c", "import numpy, pandas, matplotlib"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    require(
        "Debian's python3 with numpy, pandas and matplotlib, node, git, curl and perl in /usr/bin",
        "apt-get install python3-numpy python3-pandas python3-matplotlib nodejs git curl perl",
        python_modules
            && ["node", "git", "curl", "perl"]
                .iter()
                .all(|program| Path::new("/usr/bin").join(program).exists()),
    )
}

/// The directory holding `base` and `code-interpreter-v1`, built once for this test binary
/// (as root: `brig rootfs build` reads the host's files as the test's user) and removed
/// at its exit.
fn template_roots() -> &'static Path {
    static ROOTS_DIR: OnceLock<PathBuf> = OnceLock::new();
    ROOTS_DIR.get_or_init(|| {
        // Not a TempDir: the roots outlive every test of the binary.
        let dir = std::env::temp_dir().join(format!("bt-e2b-roots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the roots' directory");
        set_mode(&dir, 0o755);
        // SAFETY: registers a plain `extern "C" fn()` to run at process exit.
        unsafe {
            libc::atexit(remove_template_roots);
        }
        for (name, manifest) in ROOTS {
            let root = dir.join(name);
            let mut build = Command::new(common::brig());
            build.args(["rootfs", "build", manifest]).arg(&root);
            let printed = assert_success(&output_of(build));
            assert!(printed.starts_with("sha256:"), "{printed}");
        }
        dir
    })
}

extern "C" fn remove_template_roots() {
    let dir = std::env::temp_dir().join(format!("bt-e2b-roots-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
}

/// What the root `name` has in /usr/bin, sorted: all the jail may see there.
fn root_programs(name: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(template_roots().join(name).join("usr/bin"))
        .expect("the root's /usr/bin")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const HERMETIC: &str = r#"
import base64, json, sys
from e2b_code_interpreter import Sandbox
from e2b import CommandExitException
base_bin, ci_bin = json.loads(sys.argv[2]), json.loads(sys.argv[3])

base = Sandbox.create(template="base")
run = lambda sbx, command: sbx.commands.run(command).stdout
assert run(base, "git --version").startswith("git version "), run(base, "git --version")
assert run(base, "curl --version").startswith("curl "), run(base, "curl --version")
assert run(base, "node -e 'console.log(6*7)'") == "42\n"
assert run(base, "python3 -c 'print(6*7)'") == "42\n"
assert run(base, "whoami; pwd") == "user\n/home/user\n"

# git keeps a repository in the workspace; curl fetches from a server the sandbox runs
# on its own loopback; python finds the CA certificates curl and git use.
assert run(base, "git init -q repo && cd repo && echo x > f && git add f && git -c user.name=u -c user.email=u@e commit -qm first && git log --format=%s") == "first\n"
base.commands.run("cd repo && python3 -m http.server 8000 --bind 127.0.0.1", background=True)
assert run(base, "until curl -s -o /dev/null http://127.0.0.1:8000/; do sleep 0.05; done; curl -sS http://127.0.0.1:8000/f") == "x\n"
assert run(base, "python3 -c 'import ssl; print(ssl.create_default_context().cert_store_stats()[\"x509_ca\"] > 0)'") == "True\n"
# git's https helper is there: a remote nobody serves is a connection refused (not
# "'remote-https' is not a git command").
try:
    base.commands.run("git ls-remote https://127.0.0.1:9/x.git")
    raise SystemExit("git reached a server on port 9")
except CommandExitException as err:
    assert err.exit_code == 128 and "Failed to connect to 127.0.0.1 port 9" in err.stderr, err

# Files in the workspace, and a terminal (bash on a pty, from the root).
base.files.write("/home/user/note.txt", "from files\n")
assert run(base, "cat note.txt") == "from files\n"
assert base.files.read("/home/user/repo/f") == "x\n"
from e2b.sandbox.commands.command_handle import PtySize
terminal = base.pty.create(PtySize(rows=24, cols=80))
base.pty.send_stdin(terminal.pid, b"stty size; echo marker-$((6*7)); exit\n")
screen = b"".join(chunk or b"" for _, _, chunk in terminal).decode(errors="replace")
assert "24 80\r\nmarker-42\r\n" in screen, screen

# Hermetic: the jail's /usr/bin is its root's, and the host's perl is not there.
assert sorted(run(base, "ls /usr/bin").split()) == base_bin, run(base, "ls /usr/bin")
try:
    base.commands.run("perl -e 'print 1'")
    raise SystemExit("the host's perl ran in the base template")
except CommandExitException as err:
    assert (err.exit_code, err.stderr) == (127, "/bin/bash: line 1: perl: command not found\n"), err
missing = base.run_code("import numpy")
assert (missing.error.name, missing.error.value) == ("ModuleNotFoundError", "No module named 'numpy'"), missing.error
base.kill()

# The code interpreter's root, built in (--template-roots) and by a template naming it.
for template in ["code-interpreter-v1", "ci-small"]:
    ci = Sandbox.create(template=template)
    assert sorted(run(ci, "ls /usr/bin").split()) == ci_bin, run(ci, "ls /usr/bin")
    assert run(ci, "echo ${TIER-none}") == ("small\n" if template == "ci-small" else "none\n")
    assert run(ci, "python3 -c 'import numpy, pandas, matplotlib; print(pandas.__version__ > \"1\")'") == "True\n"
    frame = ci.run_code("import numpy as np, pandas as pd\ndf = pd.DataFrame({'a': np.arange(5)})\nint(df.a.sum())")
    assert frame.text == "10" and frame.error is None, frame
    chart = ci.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    assert chart.error is None and len(chart.results) == 1, chart
    assert base64.b64decode(chart.results[0].png).startswith(b"\x89PNG\r\n\x1a\n"), chart.results[0]
    assert ci.run_code("console.log(6*7)", language="js").logs.stdout == ["42\n"]
    assert ci.run_code("echo $((6*7))", language="bash").logs.stdout == ["42\n"]
    try:
        ci.commands.run("perl -e 'print 1'")
        raise SystemExit("the host's perl ran in " + template)
    except CommandExitException as err:
        assert err.exit_code == 127, err
    ci.kill()
print("PASS")
"#;

fn e2b_templates_run_in_hermetic_roots(mode: Mode) {
    if !host_has_the_templates_tools() {
        return;
    }
    let Some(python) = sdk_python() else { return };
    let roots = template_roots();
    let roots_dir = roots.to_str().unwrap();
    let server = Server::start(mode, &["--allow-bind-under", roots_dir]);
    let templates = TempDir::new("e2b-templates");
    let file = templates.file(
        "templates.yaml",
        &format!(
            "ci-small:\n  rootfs: {}\n  env: [TIER=small]\n",
            roots.join("code-interpreter-v1").display()
        ),
    );
    let gateway = Gateway::start_with(
        mode,
        &server,
        &[
            "--template-roots",
            roots_dir,
            "--templates",
            file.to_str().unwrap(),
        ],
    );
    let listing = |name| serde_json::to_string(&root_programs(name)).unwrap();
    let script = format!(
        "import sys\nsys.argv[2:] = [{:?}, {:?}]\n{HERMETIC}",
        listing("base"),
        listing("code-interpreter-v1")
    );
    assert_passed(Some(gateway.sdk_of(python, KEY_A, &script)));
}

const REFUSED: &str = r#"
from e2b_code_interpreter import Sandbox
from e2b import SandboxException
try:
    Sandbox.create(template="base")
    raise SystemExit("a root the server does not allow was used")
except SandboxException as err:
    assert "outside what this server lets clients bind" in str(err) and "--allow-bind-under" in str(err), err
print("PASS")
"#;

/// A server that lets clients name no root refuses the template's (the SDK's error, one
/// line naming the server's option), and a `--template-roots` without a root of a
/// built-in template stops the gateway at start naming the builds.
fn a_template_root_must_be_one_the_server_allows(mode: Mode) {
    if !host_has_the_templates_tools() {
        return;
    }
    let Some(python) = sdk_python() else { return };
    let roots = template_roots().to_str().unwrap();
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start_with(mode, &server, &["--template-roots", roots]);
    assert_passed(Some(gateway.sdk_of(python, KEY_A, REFUSED)));

    let empty = TempDir::new("e2b-no-roots");
    let keys = empty.file("keys", &format!("{KEY_A} alice\n"));
    let output = run(
        mode,
        &[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--server",
            server.socket(),
            "--api-keys",
            keys.to_str().unwrap(),
            "--template-roots",
            empty.str(),
        ],
    );
    assert_one_line_error(
        &output,
        &[
            "--template-roots",
            "holds no root of a built-in template",
            "brig rootfs build e2b-base",
            "brig rootfs build e2b-code-interpreter",
        ],
    );
}

fn a_session_runs_in_a_hermetic_root(mode: Mode) {
    if !host_has_the_templates_tools() {
        return;
    }
    let roots = template_roots();
    let root = roots.join("code-interpreter-v1");
    let root = root.to_str().unwrap();
    let server = Server::start(mode, &["--allow-bind-under", roots.to_str().unwrap()]);
    let socket = server.socket();

    // The root is E2B's user's: the default user `sandbox` has no home in it.
    let refused = run(
        mode,
        &["session", "create", "--server", socket, "--rootfs", root],
    );
    assert_one_line_error(
        &refused,
        &[
            "the root has no /home/sandbox",
            "it has /home/user: give --user user",
        ],
    );

    let created = run(
        mode,
        &[
            "session", "create", "--server", socket, "--rootfs", root, "--user", "user",
        ],
    );
    let id = assert_success(&created).trim().to_string();
    let exec = |args: &[&str]| {
        let mut all = vec!["session", "exec", "--server", socket, "--session", &id];
        all.extend_from_slice(args);
        run(mode, &all)
    };
    let cells = TempDir::new("e2b-root-cells");
    let cell = |language: &str, code: &str| {
        let file = cells.file(&format!("cell.{language}"), code);
        assert_success(&exec(&[
            "--language",
            language,
            "--code",
            file.to_str().unwrap(),
        ]))
    };
    assert_eq!(
        cell(
            "python",
            "import numpy as np, pandas as pd\nprint(int(pd.Series(np.arange(5)).sum()))\n"
        ),
        "10\n"
    );
    assert_eq!(cell("node", "console.log(6*7)\n"), "42\n");
    assert_eq!(
        cell("bash", "echo \"$(whoami) $HOME\"\n"),
        "user /home/user\n"
    );
    // The host's programs are not there: bash's own words, status 127.
    let perl = exec(&["--", "bash", "-c", "perl -e 1"]);
    assert_eq!(code(&perl), 127, "{}", describe(&perl));
    assert_eq!(stderr(&perl), "bash: line 1: perl: command not found\n");
    let closed = run(
        mode,
        &["session", "close", "--server", socket, "--session", &id],
    );
    assert_success(&closed);
}
