//! brig inside a container, for real, with podman: a root built from this host with
//! deploy/container/build-root.sh (brig and python3, as in deploy/container/Containerfile)
//! runs with `podman run --rootfs`.
//!
//! - With the settings a default Kubernetes pod gets (the runtime's seccomp profile, the
//!   masked /proc, a read-only /sys/fs/cgroup, no capabilities, an unprivileged user),
//!   brig fails with its one-line error (125) and `brig doctor` exits 1 naming the fix.
//! - With `seccomp=unconfined` and `unmask=/proc/*`, a real jail runs; each of the two
//!   alone is not enough.
//! - deploy/kubernetes/brig-seccomp-profile.py makes a profile that works in place of
//!   Unconfined, from podman's default and from one that, like Docker's and containerd's,
//!   allows namespaces and mounts only with CAP_SYS_ADMIN.
//! - deploy/kubernetes/brig-job.yaml parses (kubernetes.rs validates it against
//!   Kubernetes' schemas), and its Job's container runs under podman with the pod's
//!   settings translated to podman's options.
//!
//! Needs podman (and runc where crun cannot run, e.g. on hybrid cgroup hosts); without
//! podman these tests fail unless BRIG_TEST_ALLOW_SKIP=1. The containers run with
//! `--network none` (the jail has its own network namespace anyway), with explicit ulimits
//! no higher than the caller's (podman as root asks for higher ones, which needs
//! CAP_SYS_RESOURCE) and in a cgroup parent of this test process's own, removed at exit.

use crate::common;

use common::{TempDir, describe, stderr, stdout};
use serde_json::Value;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// brig's path in the container's root.
pub(crate) const BRIG_IN_CONTAINER: &str = "/usr/local/bin/brig";

/// The image's user (deploy/container/Containerfile's USER), as a Kubernetes pod's
/// runAsUser would set it.
pub(crate) const USER: &str = "--user=1000:1000";

/// The least podman needs so that brig can build its jail (see deploy/README.md).
pub(crate) const WORKING: [&str; 2] = [
    "--security-opt=seccomp=unconfined",
    "--security-opt=unmask=/proc/*",
];

pub(crate) fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Whether podman is here. Without it the tests fail, unless BRIG_TEST_ALLOW_SKIP=1.
pub(crate) fn have_podman() -> bool {
    common::require_program(
        "podman",
        "tests/run.sh installs it (Debian packages podman and runc)",
    ) && common::require_program("runc", "tests/run.sh installs it (Debian package runc)")
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The cgroup under which podman puts this test process's containers (cgroupfs manager);
/// its directories are removed when the test process exits.
pub(crate) fn cgroup_parent() -> &'static str {
    static PARENT: OnceLock<String> = OnceLock::new();
    PARENT.get_or_init(|| {
        // SAFETY: registers a plain `extern "C" fn()` to run at process exit.
        unsafe {
            libc::atexit(remove_cgroup_parent);
        }
        format!("/bt-podman-{}", std::process::id())
    })
}

extern "C" fn remove_cgroup_parent() {
    let name = format!("bt-podman-{}", std::process::id());
    let mut dirs = vec![Path::new("/sys/fs/cgroup").join(&name)];
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        dirs.extend(entries.flatten().map(|entry| entry.path().join(&name)));
    }
    for dir in dirs {
        remove_cgroup_tree(&dir);
    }
}

/// Removes a cgroup and the cgroups below it (podman leaves conmon's), deepest first;
/// only empty ones can go, and podman --rm emptied them.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// A container root built by deploy/container/build-root.sh with the brig under test.
pub(crate) fn container_root() -> TempDir {
    let dir = TempDir::new("container");
    let root = dir.path().join("root");
    let output = Command::new(repo("deploy/container/build-root.sh"))
        .arg(&root)
        .arg(common::brig())
        .stdin(Stdio::null())
        .output()
        .expect("run deploy/container/build-root.sh");
    assert!(output.status.success(), "{}", describe(&output));
    dir
}

/// `podman run` of `command` in the root of `dir` with `options`. The root is mounted as
/// an overlay (`--rootfs DIR:O`), as an image's layers are: the container writes to a
/// layer of its own (mount points included, which a container in a user namespace could
/// not create in a directory of the host's root) and the directory stays as built.
pub(crate) fn podman_run(dir: &TempDir, options: &[&str], command: &[&str]) -> Output {
    let mut podman = podman_command(dir, &["--rm"], options, command);
    podman.stdin(Stdio::null());
    common::output_of(podman)
}

/// `podman run RUN_OPTIONS` (`--rm`, or `--detach`) of `command` in the root of `dir`,
/// with the options every container here gets and then `options`.
pub(crate) fn podman_command(
    dir: &TempDir,
    run_options: &[&str],
    options: &[&str],
    command: &[&str],
) -> Command {
    podman_command_on("none", dir, run_options, options, command)
}

/// `podman_command` on the podman network `network` (`none`: no network but lo).
pub(crate) fn podman_command_on(
    network: &str,
    dir: &TempDir,
    run_options: &[&str],
    options: &[&str],
    command: &[&str],
) -> Command {
    let mut podman = Command::new("podman");
    podman.args(["--cgroup-manager=cgroupfs", "run"]);
    podman.args(run_options);
    podman.arg(format!("--network={network}"));
    podman.args(["--ulimit=nofile=1024:1024", "--ulimit=nproc=4096:4096"]);
    podman.arg(format!("--cgroup-parent={}", cgroup_parent()));
    // crun refuses hybrid cgroup hosts whose cgroup2 has controllers; runc runs anywhere.
    if on_path("runc") {
        podman.arg("--runtime=runc");
    }
    podman
        .args(options)
        .arg("--rootfs")
        .arg(format!("{}:O", dir.path().join("root").display()))
        .args(command)
        .current_dir("/");
    podman
}

/// The command line of `brig run` with `args`, in the container.
pub(crate) fn brig<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut command = vec![BRIG_IN_CONTAINER];
    command.extend_from_slice(args);
    command
}

const PYTHON: &str = "import os; print('jail', os.getuid(), os.uname().nodename, os.getpid())";

#[test]
fn default_pod_settings_stop_brig_with_a_one_line_error() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let output = podman_run(
        &root,
        &[USER],
        &brig(&["run", "--", "python3", "-c", PYTHON]),
    );
    // podman's default seccomp profile allows sethostname only with CAP_SYS_ADMIN; the
    // line names the container settings that fix it.
    let line = common::assert_one_line_error(
        &output,
        &[
            "set the jail's hostname",
            "EPERM",
            "brig runs inside a container (podman) whose settings forbid this: run the container with `--security-opt seccomp=unconfined --security-opt unmask=/proc/*`",
            "brig-seccomp-profile.py",
        ],
    );
    eprintln!("default settings: {line}");

    let doctor = podman_run(&root, &[USER], &brig(&["doctor"]));
    let report = stdout(&doctor);
    assert_eq!(doctor.status.code(), Some(1), "{}", describe(&doctor));
    // doctor assembles a real jail: the first step the container refuses is the hostname.
    assert!(
        report.contains("FAIL  jail assembly (rootless, uid 1000)")
            && report.contains("set the jail's hostname")
            && report.contains("seccomp=unconfined")
            && report.contains("brig-seccomp-profile.py"),
        "brig doctor does not name the seccomp fix: {}",
        describe(&doctor)
    );
    assert!(
        report.contains("inside a container (podman)"),
        "{}",
        describe(&doctor)
    );
    assert!(
        report.contains("FAIL  end to end (rootless, uid 1000)")
            && report.contains("set the jail's hostname"),
        "{}",
        describe(&doctor)
    );
    // With the seccomp filter lifted, the masked /proc is next, and doctor names its fix.
    let options = [USER, "--security-opt=seccomp=unconfined"];
    let doctor = podman_run(&root, &options, &brig(&["doctor"]));
    let report = stdout(&doctor);
    assert!(
        report.contains("FAIL  fresh /proc (rootless, uid 1000)")
            && report.contains("--security-opt unmask=/proc/*")
            && report.contains("procMount: Unmasked")
            && report.contains("--proc host"),
        "brig doctor does not name the /proc fix: {}",
        describe(&doctor)
    );
}

#[test]
fn working_settings_run_a_real_jail() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    // The root holds the brig under test, and the image's user.
    assert_eq!(
        std::fs::read(root.path().join("root/usr/local/bin/brig")).unwrap(),
        std::fs::read(common::brig()).unwrap()
    );
    let passwd = std::fs::read_to_string(root.path().join("root/etc/passwd")).unwrap();
    assert!(passwd.contains("sandbox:x:1000:1000:"), "{passwd}");

    let mut options = vec![USER];
    options.extend(WORKING);
    let output = podman_run(
        &root,
        &options,
        &brig(&[
            "run",
            "--profile",
            "python",
            "--report-fd",
            "2",
            "--",
            "python3",
            "-c",
            PYTHON,
        ]),
    );
    assert_eq!(
        stdout(&output),
        "jail 1000 brig 2\n",
        "{}",
        describe(&output)
    );
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let verdict: Value = serde_json::from_str(verdict_line(&output))
        .unwrap_or_else(|err| panic!("{err}: {}", describe(&output)));
    assert_eq!(verdict["status"], "ok", "{verdict}");
    assert_eq!(verdict["protections"]["rootless"], true, "{verdict}");
    assert_eq!(verdict["protections"]["seccomp_profile"], "default");
    // No cgroup brig may write in a container: the default limits are not enforced.
    assert_eq!(verdict["limits"]["cgroup_enforced"], false, "{verdict}");

    let doctor = podman_run(&root, &options, &brig(&["doctor"]));
    assert_eq!(doctor.status.code(), Some(0), "{}", describe(&doctor));
    assert!(stdout(&doctor).contains("brig can run a default jail here."));
    assert!(!stdout(&doctor).contains("FAIL"), "{}", describe(&doctor));
}

/// In the container, a server on the container's loopback and brig reaching it through
/// `--allow-net`: the script serves, then runs brig and prints what the jail fetched.
const SERVE_AND_FETCH: &str = r#"
import http.server, subprocess, sys, threading
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]
fetch = f"import urllib.request; print(urllib.request.urlopen('http://web.test:{port}/etc/hostname').status)"
brig = ["/usr/local/bin/brig", "run", "--quiet-limits", "--allow-net", f"web.test:{port}",
        "--add-host", "web.test:127.0.0.1", "--", "python3", "-c", fetch]
sys.exit(subprocess.run(brig).returncode)
"#;

/// `--allow-net` in a container needs the TUN device passed in: without it, one line that
/// names `--device /dev/net/tun`; with it, the jail reaches the allowed server.
#[test]
fn allow_net_in_a_container_needs_the_tun_device() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let mut options = vec![USER, "--workdir=/"];
    options.extend(WORKING);
    let command = ["python3", "-c", SERVE_AND_FETCH];
    let output = podman_run(&root, &options, &command);
    common::assert_one_line_error(&output, &["TUN device", "--device /dev/net/tun"]);

    options.push("--device=/dev/net/tun");
    let output = podman_run(&root, &options, &command);
    assert_eq!(stdout(&output), "200\n", "{}", describe(&output));
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
}

#[test]
fn each_working_setting_is_needed() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let run = brig(&["run", "--", "python3", "-c", "pass"]);
    // The runtime's seccomp profile alone out of the way: the masked /proc stops brig.
    let output = podman_run(&root, &[USER, WORKING[0]], &run);
    common::assert_one_line_error(&output, &["mount a fresh /proc", "EPERM"]);
    // /proc unmasked alone: the seccomp profile stops brig.
    let output = podman_run(&root, &[USER, WORKING[1]], &run);
    common::assert_one_line_error(&output, &["set the jail's hostname", "EPERM"]);
}

/// A seccomp profile that treats what brig needs as Docker's default profile (and
/// containerd's, which follows it) does: allowed only with CAP_SYS_ADMIN, which the
/// container does not have; without it clone3 fails with ENOSYS (so libc falls back to
/// clone) and the others with EPERM. Made from podman's profile.
pub(crate) fn cap_gated_profile(runtime_default: &Value) -> Value {
    const GATED: [&str; 9] = [
        "clone",
        "clone3",
        "unshare",
        "setns",
        "mount",
        "mount_setattr",
        "pivot_root",
        "umount2",
        "sethostname",
    ];
    let mut profile = runtime_default.clone();
    let rules = profile["syscalls"].as_array_mut().unwrap();
    for rule in rules.iter_mut() {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|name| !GATED.contains(&name.as_str().unwrap_or("")));
        }
    }
    rules.retain(|rule| {
        rule["names"]
            .as_array()
            .is_none_or(|names| !names.is_empty())
    });
    let without_clone3: Vec<&str> = GATED.into_iter().filter(|&name| name != "clone3").collect();
    rules.extend([
        serde_json::json!({
            "names": GATED,
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_ADMIN"]},
        }),
        serde_json::json!({
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": libc::ENOSYS,
            "excludes": {"caps": ["CAP_SYS_ADMIN"]},
        }),
        serde_json::json!({
            "names": without_clone3,
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": libc::EPERM,
            "excludes": {"caps": ["CAP_SYS_ADMIN"]},
        }),
    ]);
    profile
}

/// A container whose seccomp filter refuses Landlock's calls with EPERM (as
/// systemd-nspawn's did): brig tells that from a kernel without Landlock, in the plan's
/// warning, in `--landlock require`'s error and in doctor, and names the filter's fix.
#[test]
fn a_seccomp_filter_refusing_landlock_is_not_blamed_on_the_kernel() {
    if !have_podman() {
        return;
    }
    const LANDLOCK: [&str; 3] = [
        "landlock_create_ruleset",
        "landlock_add_rule",
        "landlock_restrict_self",
    ];
    let root = container_root();
    let dir = TempDir::new("seccomp-landlock");
    let mut profile: Value = serde_json::from_str(
        &std::fs::read_to_string("/usr/share/containers/seccomp.json")
            .expect("podman's default seccomp profile (containers-common)"),
    )
    .unwrap();
    let rules = profile["syscalls"].as_array_mut().unwrap();
    for rule in rules.iter_mut() {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|name| !LANDLOCK.contains(&name.as_str().unwrap_or("")));
        }
    }
    rules.retain(|rule| {
        rule["names"]
            .as_array()
            .is_none_or(|names| !names.is_empty())
    });
    rules.push(serde_json::json!({
        "names": LANDLOCK,
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": libc::EPERM,
    }));
    let file = dir.file("no-landlock.json", &profile.to_string());
    let seccomp = format!("--security-opt=seccomp={}", file.display());
    let options = [USER, WORKING[1], seccomp.as_str()];
    let reason = "Landlock is the seccomp filter of the container (podman) refuses it, not the kernel (landlock_create_ruleset: EPERM)";
    let fix = "run the container with a seccomp profile that allows landlock_create_ruleset landlock_add_rule landlock_restrict_self";
    let required = podman_run(
        &root,
        &options,
        &brig(&[
            "run",
            "--landlock",
            "require",
            "--",
            "python3",
            "-c",
            "pass",
        ]),
    );
    common::assert_one_line_error(&required, &["--landlock require: ", reason, fix]);
    let check = podman_run(&root, &options, &brig(&["check", "--", "python3"]));
    let plan = stdout(&check);
    assert!(
        plan.contains(reason) && plan.contains(fix),
        "{}",
        describe(&check)
    );
    let doctor = podman_run(&root, &options, &brig(&["doctor"]));
    let report = stdout(&doctor);
    assert!(
        report.contains("warn  Landlock: not available: the seccomp filter of the container (podman) refuses it, not the kernel"),
        "{}",
        describe(&doctor)
    );
}

/// deploy/kubernetes/brig-seccomp-profile.py on `profile`, written to a file in `dir`.
fn brig_profile(dir: &TempDir, name: &str, profile: &Value) -> PathBuf {
    let input = dir.file(&format!("{name}.json"), &profile.to_string());
    let output = Command::new("python3")
        .arg(repo("deploy/kubernetes/brig-seccomp-profile.py"))
        .arg(&input)
        .output()
        .expect("run brig-seccomp-profile.py");
    assert!(output.status.success(), "{}", describe(&output));
    dir.file(&format!("{name}-brig.json"), &stdout(&output))
}

#[test]
fn seccomp_profile_for_brig_works_instead_of_unconfined() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let dir = TempDir::new("seccomp");
    let podman_default: Value = serde_json::from_str(
        &std::fs::read_to_string("/usr/share/containers/seccomp.json")
            .expect("podman's default seccomp profile (containers-common)"),
    )
    .unwrap();
    let gated = cap_gated_profile(&podman_default);
    let gated_file = dir.file("gated.json", &gated.to_string());
    let run = brig(&["run", "--", "python3", "-c", PYTHON]);
    let with = |profile: &Path| {
        let seccomp = format!("--security-opt=seccomp={}", profile.display());
        podman_run(&root, &[USER, WORKING[1], &seccomp], &run)
    };

    // Docker-style: the jail's namespaces are refused.
    // The line names the container's settings, not the host's user-namespace sysctls.
    let output = with(&gated_file);
    let line = common::assert_one_line_error(
        &output,
        &[
            "create the jail's namespaces",
            "EPERM",
            "inside a container (podman) whose settings forbid this",
            "--security-opt seccomp=unconfined",
        ],
    );
    assert!(!line.contains("max_user_namespaces"), "{line}");

    for (name, profile) in [("podman", &podman_default), ("gated", &gated)] {
        let output = with(&brig_profile(&dir, name, profile));
        assert_eq!(
            stdout(&output),
            "jail 1000 brig 2\n",
            "{name}: {}",
            describe(&output)
        );
        assert_eq!(
            output.status.code(),
            Some(0),
            "{name}: {}",
            describe(&output)
        );
    }
}

/// The documents of deploy/kubernetes/brig-job.yaml.
fn kubernetes_documents() -> Vec<Value> {
    let text = std::fs::read_to_string(repo("deploy/kubernetes/brig-job.yaml")).unwrap();
    serde_saphyr::from_multiple(&text).expect("brig-job.yaml is valid YAML")
}

fn document<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|doc| doc["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in brig-job.yaml"))
}

#[test]
fn kubernetes_job_parses_with_the_settings_brig_needs() {
    let documents = kubernetes_documents();
    for doc in &documents {
        assert!(doc["apiVersion"].is_string(), "{doc}");
        assert!(doc["metadata"]["name"].is_string(), "{doc}");
    }
    let namespace = document(&documents, "Namespace")["metadata"]["name"].clone();
    let config_map = document(&documents, "ConfigMap");
    let job = document(&documents, "Job");
    assert_eq!(config_map["metadata"]["namespace"], namespace);
    assert_eq!(job["metadata"]["namespace"], namespace);
    assert_eq!(job["apiVersion"], "batch/v1");
    assert!(config_map["data"]["main.py"].is_string());

    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    // procMount: Unmasked is only accepted with a user namespace.
    assert_eq!(pod["hostUsers"], false, "{pod}");
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_ne!(security["runAsUser"], 0);
    let seccomp = security["seccompProfile"]["type"].as_str().unwrap();
    assert!(
        ["Unconfined", "Localhost"].contains(&seccomp),
        "seccompProfile {seccomp}"
    );
    assert!(security["appArmorProfile"]["type"].is_string());

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    assert_eq!(container["securityContext"]["procMount"], "Unmasked");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "run", "{args:?}");
    assert!(args.contains(&"--"), "{args:?}");
    // The ConfigMap is the volume the container mounts.
    let volume = &pod["volumes"][0];
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    assert_eq!(container["volumeMounts"][0]["name"], volume["name"]);
    // Kubernetes' own schemas: tests/operators/kubernetes.rs validates every manifest.
}

/// A Kubernetes quantity (`1Gi`, `256Mi`, `1`) as podman takes it.
fn podman_quantity(quantity: &str) -> String {
    for (suffix, unit) in [("Gi", "g"), ("Mi", "m"), ("Ki", "k")] {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return format!("{number}{unit}");
        }
    }
    quantity.to_string()
}

/// The podman options for a pod's and one of its containers' settings (the Job's, and
/// deploy/kubernetes/hosts.yaml's). A setting this does not know fails the test, so that
/// what runs here stays what the file says. The container's settings win over the pod's,
/// as in Kubernetes.
pub(crate) fn podman_options(pod: &Value, container: &Value) -> Vec<String> {
    let mut options = Vec::new();
    if pod["hostUsers"] == false {
        // The kubelet maps the pod's 65536 ids to a range of its own on the node.
        options.push("--uidmap=0:200000:65536".to_string());
        options.push("--gidmap=0:200000:65536".to_string());
    }
    let pod_security = &pod["securityContext"];
    let container_security = &container["securityContext"];
    // The user: the container's runAsUser/runAsGroup, else the pod's.
    let id = |key: &str| {
        let value = &container_security[key];
        if value.is_null() {
            pod_security[key].clone()
        } else {
            value.clone()
        }
    };
    if !id("runAsUser").is_null() {
        options.push(format!("--user={}:{}", id("runAsUser"), id("runAsGroup")));
    }
    // runAsNonRoot is a check, not a setting: the user given must agree with it.
    if id("runAsNonRoot") == true {
        assert_ne!(id("runAsUser"), 0, "runAsNonRoot with runAsUser 0");
    }
    let seccomp = if container_security["seccompProfile"].is_null() {
        &pod_security["seccompProfile"]
    } else {
        &container_security["seccompProfile"]
    };
    match seccomp["type"].as_str() {
        Some("Unconfined") => options.push("--security-opt=seccomp=unconfined".into()),
        // podman's default profile is CRI-O's, the runtime's default.
        Some("RuntimeDefault") | None => {}
        // The kubelet's seccomp directory on a node holds what deploy/kubernetes/ ships.
        Some("Localhost") => {
            let profile = seccomp["localhostProfile"].as_str().unwrap();
            let file = repo("deploy/kubernetes").join(profile);
            assert!(
                file.is_file(),
                "localhostProfile {profile}: no {}",
                file.display()
            );
            options.push(format!("--security-opt=seccomp={}", file.display()));
        }
        other => panic!("seccompProfile {other:?}: no translation to podman here"),
    }
    for (key, _) in pod_security.as_object().into_iter().flatten() {
        match key.as_str() {
            "runAsUser" | "runAsGroup" | "runAsNonRoot" | "seccompProfile" => {}
            // The test machine has no AppArmor; podman would ignore it too.
            "appArmorProfile" => {}
            other => panic!("pod securityContext.{other}: no translation to podman here"),
        }
    }
    for (key, value) in container_security.as_object().into_iter().flatten() {
        match (key.as_str(), value) {
            ("runAsUser" | "runAsGroup" | "runAsNonRoot" | "seccompProfile", _) => {}
            ("procMount", Value::String(mount)) if mount == "Unmasked" => {
                options.push("--security-opt=unmask=/proc/*".into())
            }
            ("allowPrivilegeEscalation", Value::Bool(false)) => {
                options.push("--security-opt=no-new-privileges".into())
            }
            ("readOnlyRootFilesystem", Value::Bool(true)) => options.push("--read-only".into()),
            ("capabilities", caps) => {
                for cap in caps["drop"].as_array().into_iter().flatten() {
                    options.push(format!("--cap-drop={}", cap.as_str().unwrap()));
                }
                assert!(caps["add"].is_null(), "capabilities.add: {caps}");
            }
            (other, value) => {
                panic!("container securityContext.{other}: {value}: no translation here")
            }
        }
    }
    let limits = &container["resources"]["limits"];
    if let Some(memory) = limits["memory"].as_str() {
        options.push(format!("--memory={}", podman_quantity(memory)));
    }
    if let Some(cpus) = limits["cpu"].as_str() {
        options.push(format!("--cpus={cpus}"));
    }
    options
}

/// A ConfigMap volume as the kubelet lays it out: the files in a timestamped directory,
/// `..data` pointing at it, and one symlink per key through `..data`.
pub(crate) fn config_map_volume(dir: &Path, data: &Value) {
    let stamp = "..2026_01_01_00_00_00.000000001";
    std::fs::create_dir(dir.join(stamp)).unwrap();
    common::set_mode(&dir.join(stamp), 0o755);
    symlink(stamp, dir.join("..data")).unwrap();
    for (key, value) in data.as_object().unwrap() {
        let file = dir.join(stamp).join(key);
        std::fs::write(&file, value.as_str().unwrap()).unwrap();
        common::set_mode(&file, 0o444);
        symlink(format!("..data/{key}"), dir.join(key)).unwrap();
    }
}

#[test]
fn kubernetes_job_runs_under_podman() {
    if !have_podman() {
        return;
    }
    let documents = kubernetes_documents();
    let job = document(&documents, "Job");
    let pod = &job["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let config_map = document(&documents, "ConfigMap");

    let root = container_root();
    let mut options = podman_options(pod, container);
    let volume_dir = TempDir::new("configmap");
    config_map_volume(volume_dir.path(), &config_map["data"]);
    let mount_path = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    options.push(format!("--volume={}:{mount_path}:ro", volume_dir.str()));
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    // The image's ENTRYPOINT, then the container's args.
    let mut command = vec![BRIG_IN_CONTAINER];
    command.extend(
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap()),
    );
    let output = podman_run(&root, &options, &command);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{options:?}: {}",
        describe(&output)
    );
    assert!(
        stdout(&output).starts_with("hello from the jail: uid 1000 pid 2 hostname brig\n"),
        "{}",
        describe(&output)
    );
    let verdict: Value = serde_json::from_str(verdict_line(&output))
        .unwrap_or_else(|err| panic!("the verdict on stderr: {err}: {}", describe(&output)));
    assert_eq!(verdict["status"], "ok", "{verdict}");
    assert_eq!(verdict["limits"]["output_limit_bytes"], 1 << 20);
}

#[test]
fn containerfile_builds_the_same_root_as_the_script() {
    let text = std::fs::read_to_string(repo("deploy/container/Containerfile")).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect();
    let body = lines.join("\n");
    // brig is built from the repository's root (so that .cargo/config.toml applies: a
    // static binary) and installed where the manifest takes it from.
    assert!(body.contains("cargo build --release --locked"), "{body}");
    assert!(!body.contains("--manifest-path"), "{body}");
    assert!(body.contains(
        "install -m 755 target/x86_64-unknown-linux-gnu/release/brig /usr/local/bin/brig"
    ));
    assert!(body.contains("brig rootfs build deploy/container/rootfs.yaml /rootfs"));
    // The last stage is that root alone, run as the image's user, entered at brig.
    let last = body.rsplit("\nFROM ").next().unwrap();
    assert!(last.starts_with("scratch"), "{last}");
    assert!(last.contains("COPY --from=build /rootfs/ /"));
    assert!(last.contains(&format!("USER {}", USER.trim_start_matches("--user="))));
    assert!(last.contains(&format!("ENTRYPOINT [\"{BRIG_IN_CONTAINER}\"]")));
    // The script builds from the same manifest.
    let script = std::fs::read_to_string(repo("deploy/container/build-root.sh")).unwrap();
    assert!(script.contains("$here/rootfs.yaml"));
    let manifest = std::fs::read_to_string(repo("deploy/container/rootfs.yaml")).unwrap();
    assert!(manifest.contains(&format!("\n  - {BRIG_IN_CONTAINER}\n")));
}

/// As root in a container, /sys/fs/cgroup is read-only: the default limits run without a
/// cgroup and are reported as not enforced, as they are for an unprivileged user; an
/// explicit limit still fails closed.
#[test]
fn root_in_a_container_runs_without_a_cgroup() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let mut options = vec!["--user=0:0"];
    options.extend(WORKING);
    let output = podman_run(
        &root,
        &options,
        &brig(&["run", "--report-fd", "2", "--", "python3", "-c", PYTHON]),
    );
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let verdict: Value = serde_json::from_str(stderr(&output).trim().lines().last().unwrap())
        .unwrap_or_else(|err| panic!("{err}: {}", describe(&output)));
    assert_eq!(verdict["limits"]["cgroup_enforced"], false, "{verdict}");
    let explicit = podman_run(
        &root,
        &options,
        &brig(&["run", "--memory", "64M", "--", "true"]),
    );
    common::assert_one_line_error(&explicit, &["--memory/--pids/--cpus need a cgroup"]);
}

/// Where the container masks /proc and nothing can be changed but the seccomp profile,
/// `--proc host` runs the jail with brig's own /proc, read-only, and says so.
#[test]
fn proc_host_runs_where_proc_is_masked() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let options = [USER, "--security-opt=seccomp=unconfined"];
    let fresh = podman_run(&root, &options, &brig(&["run", "--", "true"]));
    common::assert_one_line_error(&fresh, &["fresh /proc"]);
    let host = podman_run(
        &root,
        &options,
        &brig(&[
            "run",
            "--proc",
            "host",
            "--report-fd",
            "2",
            "--",
            "python3",
            "-c",
            PYTHON,
        ]),
    );
    assert_eq!(output_code(&host), 0, "{}", describe(&host));
    let verdict: Value = serde_json::from_str(stderr(&host).trim().lines().last().unwrap())
        .unwrap_or_else(|err| panic!("{err}: {}", describe(&host)));
    let warnings = verdict["warnings"].to_string();
    assert!(warnings.contains("--proc host"), "{verdict}");
}

/// The container's own memory limit (`podman run --memory`, a pod's limits.memory) kills
/// the program: brig has no cgroup of its own there, and tells the kernel's OOM kill from
/// another SIGKILL by the container cgroup's OOM-kill counter: status `oom`, exit 137, and
/// the `brig:` line that says so. As the image's user and as root.
#[test]
fn a_kill_by_the_containers_memory_limit_is_oom() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    // `code` run by brig as `user` in a container of 256 MiB: the output and the verdict.
    let run = |user: &str, code: &str| {
        let mut options = vec![user, "--memory=256m", "--memory-swap=256m"];
        options.extend(WORKING);
        let command = [
            "run",
            "--quiet-limits",
            "--report-fd",
            "2",
            "--",
            "python3",
            "-c",
        ];
        let mut args = command.to_vec();
        args.push(code);
        let output = podman_run(&root, &options, &brig(&args));
        let verdict: Value = serde_json::from_str(verdict_line(&output))
            .unwrap_or_else(|err| panic!("{err}: {}", describe(&output)));
        (output, verdict)
    };
    for user in [USER, "--user=0:0"] {
        let (output, verdict) = run(
            user,
            "chunks = []\nwhile True: chunks.append(b'x' * (16 << 20))",
        );
        assert_eq!(output_code(&output), 137, "{user}: {}", describe(&output));
        assert_eq!(verdict["status"], "oom", "{user}: {verdict}");
        assert_eq!(verdict["signal"], 9, "{user}: {verdict}");
        assert_eq!(verdict["limits"]["cgroup_enforced"], false, "{verdict}");
        let errors = stderr(&output);
        assert!(
            errors.lines().any(|line| line
                == "brig: the jail ran out of memory (the limit of the cgroup brig runs in, such as its container's); the kernel killed it"),
            "{user}: {}",
            describe(&output)
        );
    }
    // A SIGKILL that is not the OOM killer's stays `signaled`.
    let (output, verdict) = run(
        USER,
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    );
    assert_eq!(output_code(&output), 137, "{}", describe(&output));
    assert_eq!(verdict["status"], "signaled", "{verdict}");
}

pub(crate) fn output_code(output: &std::process::Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// The verdict brig wrote to stderr (`--report-fd 2`): its last JSON line, after any line
/// of brig's own (such as the notice that the default memory limit is not enforced).
pub(crate) fn verdict_line(output: &std::process::Output) -> &str {
    std::str::from_utf8(&output.stderr)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .unwrap_or_default()
}

/// A container started with `podman run --detach`, removed (`podman rm --force`) on drop.
pub(crate) struct Detached(pub(crate) String);

impl Drop for Detached {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "0", &self.0])
            .stdin(Stdio::null())
            .output();
    }
}

/// `brig serve` in a container, the run line of deploy/README.md: the image's user, the
/// two working settings, the socket's directory bound out of the container. Through the
/// socket, from the host (brig as the client) and from inside (`podman exec`): a request,
/// a session (a command, two Python cells sharing a variable, close); `--memory` is
/// refused with its one-line error (the container has no cgroup brig may write); `podman
/// stop` drains the server and it exits 0.
#[test]
fn brig_serve_in_a_container_answers_through_its_socket() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let run_dir = root.path().join("run-brig");
    std::fs::create_dir(&run_dir).unwrap();
    // The server runs as the image's user, who must create the socket there.
    nix::unistd::chown(&run_dir, Some(1000.into()), Some(1000.into())).unwrap();
    let socket = run_dir.join("brig.sock");
    let name = format!("brig-serve-test-{}", std::process::id());
    let volume = format!("--volume={}:/run/brig", run_dir.display());
    let name_option = format!("--name={name}");
    let mut options = vec![USER, volume.as_str()];
    options.extend(WORKING);
    let started = podman_command(
        &root,
        &["--detach", name_option.as_str()],
        &options,
        &brig(&[
            "serve",
            "--socket",
            "/run/brig/brig.sock",
            "--pool",
            "1",
            "--session-pool",
            "1",
        ]),
    )
    .stdin(Stdio::null())
    .output()
    .expect("run podman");
    let container = Detached(name.clone());
    assert!(started.status.success(), "{}", describe(&started));
    let logs = || container_logs(&name);
    // Bounded wait until the server answers (`brig serve --status`): the socket's file
    // appears at bind(2), before listen(2), and a connection in between is refused.
    let status = || {
        Command::new(common::brig())
            .env("BRIG_SERVER_UID", "1000")
            .args(["serve", "--status", "--socket"])
            .arg(&socket)
            .stdin(Stdio::null())
            .output()
            .expect("run brig serve --status")
    };
    for _ in 0..600 {
        if status().status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let answer = status();
    assert!(answer.status.success(), "{}\n{}", describe(&answer), logs());
    let server = socket.to_str().unwrap();

    let client = |args: &[&str], stdin: &str| {
        // The server is the image's user: the client is told to trust it.
        let mut child = Command::new(common::brig())
            .env("BRIG_SERVER_UID", "1000")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run brig");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().expect("wait for brig")
    };
    let python = "import os; print(6 * 7, os.getuid())";
    let run = client(
        &["run", "--server", server, "--", "python3", "-c", python],
        "",
    );
    assert_eq!(stdout(&run), "42 1000\n", "{}\n{}", describe(&run), logs());

    let create = client(&["session", "create", "--server", server], "");
    assert!(create.status.success(), "{}\n{}", describe(&create), logs());
    let session = stdout(&create).trim().to_string();
    let exec = |args: &[&str], stdin: &str| {
        let mut all = vec!["session", "exec", "--server", server, "--session", &session];
        all.extend_from_slice(args);
        client(&all, stdin)
    };
    let command = exec(&["--", "python3", "-c", "print('in the session')"], "");
    assert_eq!(
        stdout(&command),
        "in the session\n",
        "{}",
        describe(&command)
    );
    let cell = exec(&["--code", "-"], "x = 6 * 7\n");
    assert!(cell.status.success(), "{}", describe(&cell));
    let cell = exec(&["--code", "-"], "print(x)\n");
    assert_eq!(stdout(&cell), "42\n", "{}", describe(&cell));
    let close = client(
        &[
            "session",
            "close",
            "--server",
            server,
            "--session",
            &session,
        ],
        "",
    );
    assert!(close.status.success(), "{}", describe(&close));
    // The server forgets the session when its runner has exited, just after the answer
    // to close: a bounded wait.
    let listed =
        || stdout(&client(&["session", "list", "--server", server], "")).contains(&session);
    for _ in 0..600 {
        if !listed() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!listed(), "session {session} still listed after close");

    // A client inside the container, through the same socket.
    let inside = Command::new("podman")
        .args([
            "exec",
            &name,
            BRIG_IN_CONTAINER,
            "run",
            "--server",
            "/run/brig/brig.sock",
        ])
        .args(["--", "python3", "-c", python])
        .stdin(Stdio::null())
        .output()
        .expect("podman exec");
    assert_eq!(stdout(&inside), "42 1000\n", "{}", describe(&inside));

    // No cgroup brig may write in the container: explicit limits fail closed.
    let memory = client(
        &["run", "--server", server, "--memory", "32M", "--", "true"],
        "",
    );
    common::assert_one_line_error(&memory, &["--memory/--pids/--cpus need a cgroup"]);

    stop_drains(&name);
    drop(container);
}

/// `podman stop` (SIGTERM) of the container `name` running `brig serve`: the server
/// drains, says so, and exits 0.
pub(crate) fn stop_drains(name: &str) {
    let stop = Command::new("podman")
        .args(["stop", "--time", "60", name])
        .stdin(Stdio::null())
        .output()
        .expect("podman stop");
    assert!(stop.status.success(), "{}", describe(&stop));
    let code = Command::new("podman")
        .args(["inspect", "--format", "{{.State.ExitCode}}", name])
        .output()
        .expect("podman inspect");
    assert_eq!(
        stdout(&code).trim(),
        "0",
        "{}\n{}",
        describe(&code),
        container_logs(name)
    );
    let logs = container_logs(name);
    assert!(logs.contains("brig serve: draining"), "{logs}");
}

/// The container's output so far, for a failure's message.
pub(crate) fn container_logs(name: &str) -> String {
    let logs = Command::new("podman")
        .args(["logs", name])
        .output()
        .expect("podman logs");
    format!("server's log:\n{}{}", stdout(&logs), stderr(&logs))
}
