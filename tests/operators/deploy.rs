//! The deployment files in deploy/, exercised as far as this machine allows: the systemd
//! units are verified and run under a real systemd in the qemu VM, the worker, both
//! clients and the CI step run against the built brig, and the AppArmor profile is parsed
//! where an AppArmor 4 parser exists.

use crate::common;

use common::{Mode, TempDir, describe, interpreter, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// A command for `program args...` (an interpreter: the system's, see
/// `common::interpreter`), run as root or (via setpriv) as uid 65534, with `BRIG` naming
/// the brig it should run.
fn command_as(mode: Mode, program: &str, args: &[&str]) -> Command {
    let mut command = common::command_as(mode, interpreter(program), args);
    command.env("BRIG", common::brig_for(mode));
    command
}

/// brig-serve.service verifies too, with the brig under test in place of
/// /usr/local/bin/brig (verify checks that the program exists).
#[test]
fn systemd_serve_unit_verifies() {
    if !common::require_program(
        "systemd-analyze",
        "tests/run.sh installs it (Debian package systemd)",
    ) {
        return;
    }
    let text = std::fs::read_to_string(deploy("systemd/brig-serve.service"))
        .unwrap()
        .replace("/usr/local/bin/brig", common::brig().to_str().unwrap());
    let dir = TempDir::new("serve-unit");
    let unit = dir.file("brig-serve.service", &text);
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("run systemd-analyze");
    assert!(output.status.success(), "{}", describe(&output));
    assert!(output.stderr.is_empty(), "{}", describe(&output));
    // The options of its ExecStart are brig serve's: `brig serve --status` parses them.
    let exec_start: String = text
        .lines()
        .skip_while(|line| !line.starts_with("ExecStart="))
        .take_while(|line| !line.is_empty())
        .map(|line| line.trim_end_matches('\\').trim_start_matches("ExecStart="))
        .collect::<Vec<_>>()
        .join(" ");
    let mut words: Vec<&str> = exec_start.split_whitespace().collect();
    words.push("--help");
    let output = Command::new(words[0]).args(&words[1..]).output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
}

#[test]
fn systemd_unit_verifies() {
    let unit = deploy("systemd/brig-worker.service");
    let verify = |path: &Path| {
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(path)
            .output()
    };
    if !common::require_program(
        "systemd-analyze",
        "tests/run.sh installs it (Debian package systemd)",
    ) {
        return;
    }
    let output = verify(&unit).expect("run systemd-analyze");
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        output.stderr.is_empty(),
        "systemd-analyze warns about the unit:\n{}",
        describe(&output)
    );
    // The check notices a mistake: a misspelt key is reported.
    let dir = TempDir::new("unit");
    let text = std::fs::read_to_string(&unit)
        .unwrap()
        .replace("Delegate=yes", "Delegat=yes");
    let bad = dir.file("brig-worker.service", &text);
    let output = verify(&bad).unwrap();
    assert!(
        common::stderr(&output).contains("Unknown key 'Delegat'"),
        "{}",
        describe(&output)
    );
}

#[test]
fn worker_runs_jobs_from_its_spool() {
    let spool = TempDir::new("spool");
    std::fs::create_dir(spool.path().join("inbox")).unwrap();
    let job = |name: &str, code: &str| {
        let path = spool.path().join("inbox").join(name);
        std::fs::write(&path, code).unwrap();
        common::set_mode(&path, 0o644);
    };
    job("hello.py", "import sys\nprint('hello from', sys.argv[0])\n");
    job("spin.py", "while True:\n    pass\n");
    let output = Command::new(interpreter("python3"))
        .arg(deploy("systemd/brig-worker.py"))
        .arg("--once")
        .arg(spool.path())
        .env("BRIG", common::brig())
        .env("BRIG_WORKER_ARGS", "--time-limit 1s --pids 32")
        .env_remove("INVOCATION_ID")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let record = |name: &str| -> serde_json::Value {
        let path = spool.path().join("outbox").join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let hello = record("hello.json");
    assert_eq!(hello["exit"], 0, "{hello}");
    assert_eq!(hello["stdout"], "hello from main.py\n", "{hello}");
    assert_eq!(hello["verdict"]["status"], "ok", "{hello}");
    assert_eq!(hello["verdict"]["limits"]["pids"], 32, "{hello}");
    let spin = record("spin.json");
    assert_eq!(spin["exit"], 124, "{spin}");
    assert_eq!(spin["verdict"]["status"], "timeout", "{spin}");
    for name in ["hello.py", "spin.py"] {
        assert!(spool.path().join("done").join(name).exists());
        assert!(!spool.path().join("inbox").join(name).exists());
    }
}

/// Runs a client (`interpreter client args...`) and returns its one JSON line.
fn run_client(mode: Mode, interpreter: &str, client: &str, args: &[&str]) -> serde_json::Value {
    let client = deploy(client);
    let mut argv = vec![client.to_str().unwrap()];
    argv.extend_from_slice(args);
    let output = command_as(mode, interpreter, &argv).output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    serde_json::from_str(stdout(&output).trim())
        .unwrap_or_else(|err| panic!("{err}: {}", describe(&output)))
}

fn python_client_reads_the_verdict(mode: Mode) {
    let client = "clients/python_client.py";
    let result = run_client(mode, "python3", client, &["print(6 * 7)"]);
    assert_eq!(result["exit"], 0, "{result}");
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(result["stdout"], "42\n", "{result}");
    assert_eq!(result["schema"], "brig-verdict/1", "{result}");
    let result = run_client(mode, "python3", client, &["while True: pass", "1s"]);
    assert_eq!(result["exit"], 124, "{result}");
    assert_eq!(result["status"], "timeout", "{result}");
}

fn node_client_reads_the_verdict(mode: Mode) {
    let client = "clients/node_client.js";
    let result = run_client(mode, "node", client, &["console.log(6 * 7)"]);
    assert_eq!(result["exit"], 0, "{result}");
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(result["stdout"], "42\n", "{result}");
    let result = run_client(mode, "node", client, &["process.exit(3)"]);
    assert_eq!(result["exit"], 3, "{result}");
    assert_eq!(result["status"], "nonzero_exit", "{result}");
    assert_eq!(result["exit_code"], 3, "{result}");
}

both_modes!(
    python_client_reads_the_verdict,
    node_client_reads_the_verdict
);

/// The workflow as JSON, parsed with the YAML parser brig uses for its configs.
fn workflow() -> serde_json::Value {
    let text = std::fs::read_to_string(deploy("ci/github-actions.yml")).unwrap();
    serde_saphyr::from_str(&text).expect("github-actions.yml is valid YAML")
}

#[test]
fn github_actions_job_parses() {
    let workflow = workflow();
    let jobs = workflow["jobs"].as_object().expect("jobs");
    let job = &jobs["run-untrusted"];
    assert!(job["runs-on"].as_str().unwrap().starts_with("ubuntu"));
    let steps = job["steps"].as_array().expect("steps");
    for step in steps {
        assert!(
            step["run"].is_string() || step["uses"].is_string(),
            "a step without run or uses: {step}"
        );
    }
    let runs: Vec<&str> = steps
        .iter()
        .filter_map(|step| step["run"].as_str())
        .collect();
    assert!(runs.iter().any(|run| run.contains("brig doctor")));
    assert!(runs.iter().any(|run| run.contains("apparmor_parser -r")));
    assert!(runs.iter().any(|run| run.contains("brig run")));
}

/// Runs the workflow's "Run the untrusted script under brig" step with bash as GitHub
/// does, in a workspace with an untrusted/main.py, against the built brig.
fn run_ci_step(script: &str) -> (std::process::Output, TempDir) {
    let workflow = workflow();
    let step = workflow["jobs"]["run-untrusted"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|step| step["name"] == "Run the untrusted script under brig")
        .expect("the step");
    let run = step["run"].as_str().unwrap();
    let workspace = TempDir::new("ci-workspace").writable_by_all();
    std::fs::create_dir(workspace.path().join("untrusted")).unwrap();
    common::set_mode(&workspace.path().join("untrusted"), 0o755);
    let main = workspace.path().join("untrusted/main.py");
    std::fs::write(&main, script).unwrap();
    common::set_mode(&main, 0o644);
    // `brig` and `sudo` for the step: the test already is root, so sudo only runs its
    // arguments.
    let bin = workspace.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(common::brig(), bin.join("brig")).unwrap();
    std::fs::write(bin.join("sudo"), "#!/bin/sh\nexec \"$@\"\n").unwrap();
    common::set_mode(&bin.join("sudo"), 0o755);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", run])
        .current_dir(workspace.path())
        .env("PATH", path)
        .output()
        .unwrap();
    (output, workspace)
}

#[test]
fn github_actions_step_runs_the_script_under_brig() {
    let (output, workspace) = run_ci_step(
        "import os\nprint('files:', sorted(os.listdir('/task')), 'uid', os.getuid())\n",
    );
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert!(text.contains("files: ['main.py'] uid 1000"), "{text}");
    assert!(text.contains("brig verdict: ok exit 0"), "{text}");
    let verdict: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.path().join("verdict.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(verdict["limits"]["memory_bytes"], 512u64 << 20);
    // A failing script fails the step with its status.
    let (output, _workspace) = run_ci_step("raise SystemExit(7)\n");
    assert_eq!(output.status.code(), Some(7), "{}", describe(&output));
    assert!(stdout(&output).contains("brig verdict: nonzero_exit exit 7"));
}

/// The AppArmor profile's structure, and a real parse by apparmor_parser. AppArmor 4 parses
/// the profile as it is. An older parser (Debian 12 ships 3.0.8, and AppArmor 4 cannot be
/// installed there) does not know `userns,` nor `abi <abi/4.0>`: it parses the rest of the
/// profile (its includes, header and flags), with those two lines made 3.0 ones. Either way
/// the parser must also reject a profile with a misspelt flag, to show that it checks.
#[test]
fn apparmor_profile_parses() {
    let profile = deploy("apparmor/brig");
    let text = std::fs::read_to_string(&profile).unwrap();
    // Structure, checked everywhere: one profile for brig's installed path, unconfined,
    // allowing user namespaces, with balanced braces.
    assert!(text.contains("profile brig /usr/local/bin/brig flags=(unconfined) {"));
    assert!(text.lines().any(|line| line.trim() == "userns,"));
    assert!(text.contains("abi <abi/4.0>,"));
    assert_eq!(text.matches('{').count(), text.matches('}').count());
    if !common::require_program(
        "apparmor_parser",
        "tests/run.sh installs it (Debian package apparmor)",
    ) {
        return;
    }
    let version = Command::new("apparmor_parser")
        .arg("--version")
        .output()
        .expect("run apparmor_parser --version");
    let version_text = stdout(&version);
    let major: u32 = version_text
        .split_whitespace()
        .find_map(|word| word.split('.').next()?.parse().ok())
        .unwrap_or(0);
    let dir = TempDir::new("apparmor");
    let parsed = if major >= 4 {
        text.clone()
    } else {
        eprintln!(
            "apparmor_parser {major}.x predates `userns,` (AppArmor 4): parsing the rest of the profile"
        );
        text.replace("abi <abi/4.0>,", "abi <abi/3.0>,")
            .lines()
            .filter(|line| line.trim() != "userns,")
            .map(|line| format!("{line}\n"))
            .collect()
    };
    let parse = |name: &str, text: &str| {
        let path = dir.file(name, text);
        Command::new("apparmor_parser")
            .args(["-Q", "-K"])
            .arg(path)
            .output()
            .expect("run apparmor_parser")
    };
    let output = parse("brig", &parsed);
    assert!(output.status.success(), "{}", describe(&output));
    let broken = parsed.replace("flags=(unconfined)", "flags=(unconfinde)");
    let output = parse("brig-broken", &broken);
    assert!(!output.status.success(), "{}", describe(&output));
    assert!(
        common::stderr(&output).contains("unconfinde"),
        "{}",
        describe(&output)
    );
}

/// Whether an ELF file asks for a program interpreter (PT_INTERP): every dynamically
/// linked executable does, a static or static-pie one does not.
fn has_interpreter(elf: &[u8]) -> bool {
    assert!(
        elf.starts_with(b"\x7fELF\x02\x01"),
        "not a 64-bit little-endian ELF file"
    );
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3 // PT_INTERP
    })
}

/// Runs the workflow's "Install brig" step with bash as GitHub does, in a workspace whose
/// tools/brig is this repository (a symlink to it: the build is the one `cargo build
/// --release` makes here, a no-op when that is fresh). `sudo` installs into a private
/// /usr/local/bin (a directory of the test bound over it in a mount namespace of its
/// own), and `cargo` is the real one recording what it built (--message-format=json).
/// The step must install the static binary that cargo built, from where it built it:
/// with `--manifest-path tools/brig/Cargo.toml` run from the workspace, cargo does not
/// read tools/brig/.cargo/config.toml, builds a dynamically linked brig into
/// target/release/, and the install copies another (stale) file or none.
#[test]
fn github_actions_install_step_installs_the_static_brig_it_built() {
    let workflow = workflow();
    let step = workflow["jobs"]["run-untrusted"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|step| step["name"] == "Install brig")
        .expect("the Install brig step");
    let run = step["run"].as_str().unwrap();
    let workspace = TempDir::new("ci-install");
    let tools = workspace.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_MANIFEST_DIR"), tools.join("brig")).unwrap();
    let bin = workspace.path().join("bin");
    let usr_local_bin = workspace.path().join("usr-local-bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir(&usr_local_bin).unwrap();
    let cargo_json = workspace.path().join("cargo.json");
    let shim = |name: &str, text: &str| {
        std::fs::write(bin.join(name), text).unwrap();
        common::set_mode(&bin.join(name), 0o755);
    };
    shim(
        "sudo",
        "#!/bin/sh\nexec unshare --mount --propagation private \
         sh -c 'mount --bind \"$USR_LOCAL_BIN\" /usr/local/bin && exec \"$@\"' sh \"$@\"\n",
    );
    shim(
        "cargo",
        "#!/bin/sh\nif [ \"$1\" = build ]; then\n    shift\n    \
         exec \"$REAL_CARGO\" build --message-format=json-render-diagnostics \"$@\" >>\"$BRIG_TEST_CARGO_JSON\"\n\
         fi\nexec \"$REAL_CARGO\" \"$@\"\n",
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", run])
        .current_dir(workspace.path())
        .env("PATH", path)
        .env("REAL_CARGO", env!("CARGO"))
        .env("BRIG_TEST_CARGO_JSON", &cargo_json)
        .env("USR_LOCAL_BIN", &usr_local_bin);
    // A runner's environment: nothing from the `cargo test` that runs this test (such as
    // CARGO_TARGET_DIR or RUSTFLAGS) steers the build.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO_") && key != "CARGO_HOME") || key.starts_with("RUSTFLAGS") {
            command.env_remove(&*key);
        }
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));

    // What cargo built: the brig executable it reported.
    let log = std::fs::read_to_string(&cargo_json).unwrap();
    let built: Vec<String> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| {
            message["reason"] == "compiler-artifact"
                && message["target"]["name"] == "brig"
                && message["target"]["kind"][0] == "bin"
        })
        .filter_map(|message| message["executable"].as_str().map(String::from))
        .collect();
    assert_eq!(built.len(), 1, "cargo built {built:?}:\n{log}");
    assert!(
        built[0].ends_with("/target/x86_64-unknown-linux-gnu/release/brig"),
        "cargo built {}",
        built[0]
    );
    let installed = std::fs::read(usr_local_bin.join("brig")).expect("brig installed");
    assert!(
        installed == std::fs::read(&built[0]).unwrap(),
        "the installed brig is not the one cargo built ({})",
        built[0]
    );
    assert!(
        !has_interpreter(&installed),
        "the installed brig is dynamically linked"
    );
    // The check tells the two apart: Debian's python3 is dynamically linked.
    let python = std::fs::canonicalize(interpreter("python3")).unwrap();
    assert!(has_interpreter(&std::fs::read(python).unwrap()));
    let version = Command::new(usr_local_bin.join("brig"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        stdout(&version).starts_with("brig "),
        "{}",
        describe(&version)
    );
}

/// How many `ok` lines tests/vm/systemd_units.sh prints when every check passes.
const SYSTEMD_CHECKS: usize = 2 * 21 + 5;

/// The systemd VM's own limit (boot included); run-in-vm.sh exits 124 when it is reached.
const SYSTEMD_VM_TIMEOUT_SECS: u64 = 600;

/// Both shipped units under a real systemd as PID 1 on pure cgroup v2: one VM
/// (`tests/vm/run-in-vm.sh --systemd`: the host's own root read-only under a tmpfs
/// overlay, so the host's systemd, python3 and this checkout) runs
/// `tests/vm/systemd_units.sh` as root there. brig-serve.service as shipped (rootless as
/// the user brig, `Delegate=yes`) and, at the same time, a copy as root (deploy/README.md's
/// drop-in, `User=root`): a request, a session, a memory kill, `brig doctor` as the
/// unit's user, no cgroups of exited processes left, `systemctl stop` draining a request,
/// start, restart, a request; brig-worker.service through one job, in parallel too. The
/// script prints `ok NAME` or `FAIL NAME: detail` per check.
#[test]
fn units_run_under_a_real_systemd_in_a_vm() {
    let Some(vm) = common::Vm::new("systemd-vm") else {
        return;
    };
    let script = vm.share().join("systemd_units.sh");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/systemd_units.sh");
    std::fs::copy(source, &script).expect("copy the script");
    common::copy_vm_checks(vm.share());
    // The units and the worker as shipped, where the script installs them from.
    let units = vm.share().join("deploy/systemd");
    std::fs::create_dir_all(&units).unwrap();
    for file in [
        "brig-serve.service",
        "brig-worker.service",
        "brig-worker.py",
    ] {
        std::fs::copy(deploy(&format!("systemd/{file}")), units.join(file)).expect("copy a unit");
    }

    let started = std::time::Instant::now();
    let output = Command::new(common::vm_runner())
        .args([
            "--quiet",
            "--systemd",
            "--cpus",
            "2",
            "--mem",
            "2G",
            "--timeout",
        ])
        .arg(SYSTEMD_VM_TIMEOUT_SECS.to_string())
        .arg("--share")
        .arg(vm.share())
        .arg("--")
        .arg("sh")
        .arg(&script)
        .arg(vm.brig())
        .arg(vm.share())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tests/vm/run-in-vm.sh");
    let elapsed = started.elapsed();
    eprintln!("systemd VM run took {elapsed:.1?}");

    common::assert_vm_checks("run-in-vm.sh --systemd", &output, elapsed, SYSTEMD_CHECKS);
}
