//! brig on Kubernetes (deploy/kubernetes/, issue 25): no cluster can be had here, so each
//! piece is checked for real on its own.
//!
//! - Every manifest passes Kubernetes 1.35's OpenAPI schemas, strictly (unknown fields
//!   fail), with kubernetes-validate pinned from PyPI into a venv under the target
//!   directory; a misspelt field fails it. The KEDA ScaledObject (a CRD: no schema there)
//!   is checked against the hosts it scales.
//! - The Pod Security Standards: a test-side table of the baseline and restricted checks
//!   of Pod Security Admission at policy version 1.35 (kubernetes/pod-security-admission,
//!   policy/check_*.go; https://kubernetes.io/docs/concepts/security/pod-security-standards/):
//!   every pod passes baseline, the router gateways restricted, the hosts all of restricted
//!   but procMount; a privileged pod is caught on each count.
//! - profiles/brig.json is brig-seccomp-profile.py's output from the runtime's default
//!   (containers-common's, CRI-O's), valid JSON, allowing every call brig needs.
//! - The host pod runs under podman with the manifest's settings translated (the user
//!   namespace of hostUsers: false, the Localhost profile, the unmasked /proc, uid 1000,
//!   no capability, no_new_privs, a read-only root, the limits, the ConfigMap and the
//!   emptyDir socket directory made by its init container): a session runs Python, the
//!   liveness probe's command answers, `brig doctor` passes, the pod's gateway container
//!   creates and lists a sandbox through E2B's API, SIGTERM drains. Without procMount
//!   (the restricted alternative), a jail runs with `proc: host` and not without.
//! - The capabilities: none rootless; as root exactly CAP_SETUID, CAP_SETGID and
//!   CAP_DAC_OVERRIDE, each needed.
//! - `brig doctor` in a pod (KUBERNETES_SERVICE_HOST set, as the kubelet does) names the
//!   pod field for each restriction podman applies: the default seccomp profile, a
//!   Docker-style one, the masked /proc, no user namespace, no /dev/net/tun; and passes
//!   with the manifest's settings as the pod's root too.
//!
//! The podman tests run as root (podman's containers), their brig as uid 1000 (rootless)
//! and, for the capabilities and one doctor run, as the container's root.

use crate::common;
use crate::containers::{
    BRIG_IN_CONTAINER, Detached, brig, cap_gated_profile, config_map_volume, container_logs,
    container_root, have_podman, podman_command, podman_options, podman_run, repo, stop_drains,
};

use common::{TempDir, describe, stderr, stdout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The validator and its schemas, pinned.
const VALIDATOR: [&str; 3] = [
    "kubernetes-validate==1.37.0",
    "jsonschema==4.26.0",
    "PyYAML==6.0.4",
];

/// The Kubernetes version the manifests target (baseline admits procMount: Unmasked in
/// user-namespace pods from policy version 1.35).
const KUBERNETES: &str = "1.35.0";

fn kubernetes_dir() -> PathBuf {
    repo("deploy/kubernetes")
}

/// The manifests `kubectl apply -k deploy/kubernetes` applies, from kustomization.yaml.
fn kustomized() -> Vec<String> {
    let text = std::fs::read_to_string(kubernetes_dir().join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_saphyr::from_str(&text).expect("kustomization.yaml");
    kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|file| file.as_str().unwrap().to_string())
        .collect()
}

/// The files kept out of kustomization.yaml on purpose (its comment says why).
const APPLIED_APART: [&str; 3] = ["api-keys.yaml", "autoscaling-keda.yaml", "brig-job.yaml"];

/// Every manifest of deploy/kubernetes/ with Kubernetes objects (all YAML files but the
/// kustomization itself).
fn manifest_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(kubernetes_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    files.sort();
    files
}

fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(kubernetes_dir().join(file)).unwrap();
    serde_saphyr::from_multiple(&text).unwrap_or_else(|err| panic!("{file}: {err}"))
}

/// The object of `kind` named `name` in the applied manifests.
pub(crate) fn object(kind: &str, name: &str) -> Value {
    let mut files = kustomized();
    files.extend(APPLIED_APART.iter().map(|file| file.to_string()));
    files
        .iter()
        .flat_map(|file| documents(file))
        .find(|doc| doc["kind"] == kind && doc["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes"))
}

/// python with the pinned validator, in a venv under the target directory.
fn validator_python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    common::pinned_python(&PYTHON, &VALIDATOR, "the Kubernetes schema validator")
}

/// kubernetes-validate --strict on `files`, against KUBERNETES's schemas.
fn validate(python: &Path, files: &[PathBuf]) -> std::process::Output {
    Command::new(python)
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "--kubernetes-version",
        ])
        .arg(KUBERNETES)
        .args(files)
        .stdin(Stdio::null())
        .output()
        .expect("run kubernetes-validate")
}

#[test]
fn every_manifest_passes_the_kubernetes_schema() {
    // kustomization.yaml names files that exist, and leaves out only what it says.
    let files = manifest_files();
    let mut listed = kustomized();
    listed.extend(APPLIED_APART.iter().map(|file| file.to_string()));
    listed.sort();
    assert_eq!(
        listed, files,
        "kustomization.yaml's resources and what it leaves out"
    );

    let Some(python) = validator_python() else {
        return;
    };
    let core: Vec<PathBuf> = files
        .iter()
        .filter(|file| *file != "autoscaling-keda.yaml")
        .map(|file| kubernetes_dir().join(file))
        .collect();
    let output = validate(python, &core);
    assert!(output.status.success(), "{}", describe(&output));
    let report = stdout(&output) + &stderr(&output);
    // A kind the validator has no schema for only warns: none of these may.
    assert!(!report.contains("WARN"), "{report}");
    for file in &files {
        if *file != "autoscaling-keda.yaml" {
            for doc in documents(file) {
                let line = format!(
                    "{} passed for resource {}/{}",
                    kubernetes_dir().join(file).display(),
                    doc["kind"].as_str().unwrap().to_lowercase(),
                    doc["metadata"]["name"].as_str().unwrap()
                );
                assert!(report.contains(&line), "{line}: {report}");
            }
        }
    }

    // Strict: a misspelt field fails (the validator would notice a wrong manifest).
    let dir = TempDir::new("kubernetes-validate");
    let hosts = std::fs::read_to_string(kubernetes_dir().join("hosts.yaml")).unwrap();
    assert!(hosts.contains("procMount: Unmasked"));
    let misspelt = dir.file(
        "hosts.yaml",
        &hosts.replace("procMount: Unmasked", "procMout: Unmasked"),
    );
    let output = validate(python, &[misspelt]);
    assert!(!output.status.success(), "{}", describe(&output));
    assert!(
        stdout(&output).contains("procMout"),
        "{}",
        describe(&output)
    );
}

/// The hosts and the routers in one namespace at baseline; the Services, the probes and
/// the gateway flags agree with each other.
#[test]
fn the_manifests_fit_together() {
    let namespace = object("Namespace", "brig");
    let labels = &namespace["metadata"]["labels"];
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "baseline");
    assert_eq!(
        labels["pod-security.kubernetes.io/enforce-version"],
        "v1.35"
    );
    for file in kustomized() {
        for doc in documents(&file) {
            if doc["kind"] != "Namespace" {
                assert_eq!(doc["metadata"]["namespace"], "brig", "{file}: {doc}");
            }
        }
    }
    let hosts = object("StatefulSet", "brig-host");
    assert_eq!(hosts["spec"]["serviceName"], "brig-hosts");
    let headless = object("Service", "brig-hosts");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    // A draining host is not ready, but still answers for its sandboxes by name.
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    let labels = &hosts["spec"]["template"]["metadata"]["labels"];
    for service in ["brig-hosts", "brig-hosts-any"] {
        let selector = &object("Service", service)["spec"]["selector"];
        for (key, value) in selector.as_object().unwrap() {
            assert_eq!(&labels[key], value, "{service} selects the hosts");
        }
    }
    let pod = &hosts["spec"]["template"]["spec"];
    let gateway = container(pod, "gateway");
    let args = arg_strings(gateway);
    assert!(args.contains(&"--server=/run/brig/serve.sock".to_string()));
    assert!(args.contains(&"--host-id=$(POD_NAME)".to_string()));
    assert!(args.contains(&"--peer-url=http://{host}.brig-hosts:3000".to_string()));
    let serve = container(pod, "serve");
    assert!(arg_strings(serve).contains(&"--socket=/run/brig/serve.sock".to_string()));
    // The kubelet's SIGKILL comes after the drain grace.
    let grace: u64 = object("ConfigMap", "brig-config")["data"]["BRIG_DRAIN_GRACE"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    for workload in [&hosts, &object("Deployment", "brig-gateway")] {
        let period = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap();
        assert!(
            period > grace,
            "terminationGracePeriodSeconds {period} <= {grace}"
        );
    }
    let routers = object("Deployment", "brig-gateway");
    let router = container(&routers["spec"]["template"]["spec"], "gateway");
    let args = arg_strings(router);
    assert!(args.contains(&"--create-url=http://brig-hosts-any:3000".to_string()));
    // A router needs --peers (its lists and /readyz ask each): every host the KEDA rule
    // may scale to, by the StatefulSet's pod names.
    let most = documents("autoscaling-keda.yaml")[0]["spec"]["maxReplicaCount"]
        .as_u64()
        .unwrap();
    let names: Vec<String> = (0..most)
        .map(|ordinal| format!("brig-host-{ordinal}"))
        .collect();
    assert!(
        args.contains(&format!("--peers={}", names.join(","))),
        "the routers' --peers: {args:?}"
    );
    assert!(
        !args.iter().any(|arg| arg.starts_with("--server")),
        "{args:?}"
    );
    for gateway in [gateway, router] {
        assert_eq!(gateway["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(gateway["readinessProbe"]["httpGet"]["path"], "/readyz");
    }
    // The ingress sends the API host and the sandboxes' wildcard hosts to the routers.
    let ingress = object("Ingress", "brig");
    let rules = ingress["spec"]["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|rule| rule["host"].as_str().unwrap().starts_with("*."))
    );
    for rule in rules {
        assert_eq!(
            rule["http"]["paths"][0]["backend"]["service"]["name"],
            "brig-gateway"
        );
    }
    let tls = &ingress["spec"]["tls"][0]["hosts"];
    for rule in rules {
        assert!(
            tls.as_array().unwrap().contains(&rule["host"]),
            "{rule}: no TLS"
        );
    }
    // The routers (and the hosts) may reach the hosts' port; the routers scale on CPU.
    let policy = object("NetworkPolicy", "brig-host");
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[key], value, "the policy selects the hosts");
    }
    let allowed = &policy["spec"]["ingress"][0];
    let from = &allowed["from"][0]["podSelector"]["matchLabels"];
    for template in [&hosts, &routers] {
        let labels = &template["spec"]["template"]["metadata"]["labels"];
        for (key, value) in from.as_object().unwrap() {
            assert_eq!(
                &labels[key], value,
                "the policy admits {}",
                template["metadata"]["name"]
            );
        }
    }
    assert_eq!(
        allowed["ports"][0]["port"],
        gateway["ports"][0]["containerPort"]
    );
    let scaler = object("HorizontalPodAutoscaler", "brig-gateway");
    assert_eq!(scaler["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(scaler["spec"]["scaleTargetRef"]["name"], "brig-gateway");
    // Every flag of `brig serve` and `brig gateway` in the manifests is one brig has.
    for (subcommand, container) in [("serve", serve), ("gateway", gateway), ("gateway", router)] {
        flags_exist(subcommand, &arg_strings(container));
    }
}

/// Each `--flag` of `args` is in `brig SUBCOMMAND --help`.
fn flags_exist(subcommand: &str, args: &[String]) {
    let help = Command::new(common::brig())
        .args([subcommand, "--help"])
        .output()
        .expect("brig --help");
    let help = stdout(&help);
    for arg in &args[1..] {
        let flag = arg.split('=').next().unwrap();
        let known = help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n"));
        assert!(known, "brig {subcommand} has no {flag}");
    }
}

pub(crate) fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["containers"]
        .as_array()
        .into_iter()
        .chain(pod["initContainers"].as_array())
        .flatten()
        .find(|container| container["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

pub(crate) fn arg_strings(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .or(container["command"].as_array())
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap().to_string())
        .collect()
}

/// The KEDA ScaledObject scales the hosts on brig_sandbox_slots_free, with the hosts'
/// capacity from the ConfigMap.
#[test]
fn the_scaling_rule_matches_the_hosts() {
    let documents = documents("autoscaling-keda.yaml");
    let scaled = &documents[0];
    assert_eq!(scaled["apiVersion"], "keda.sh/v1alpha1");
    assert_eq!(scaled["kind"], "ScaledObject");
    let target = &scaled["spec"]["scaleTargetRef"];
    assert_eq!(target["kind"], "StatefulSet");
    assert_eq!(target["name"], "brig-host");
    let trigger = &scaled["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "prometheus");
    assert_eq!(trigger["metricType"], "AverageValue");
    let query = trigger["metadata"]["query"].as_str().unwrap();
    let capacity = object("ConfigMap", "brig-config")["data"]["BRIG_MAX_SESSIONS"]
        .as_str()
        .unwrap()
        .to_string();
    // The slots in use: what the hosts have, less what is free (gateway/health.rs).
    assert!(
        query.starts_with("sum(brig_sandbox_slots{")
            && query.contains(") - sum(brig_sandbox_slots_free{"),
        "{query}"
    );
    let threshold: u64 = trigger["metadata"]["threshold"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let capacity: u64 = capacity.parse().unwrap();
    assert!(threshold < capacity, "threshold {threshold} >= {capacity}");
    let spec = &scaled["spec"];
    assert!(spec["minReplicaCount"].as_u64().unwrap() >= 1);
    assert!(spec["maxReplicaCount"].as_u64() > spec["minReplicaCount"].as_u64());
    // The hosts are scraped on the gateway's port.
    let hosts = object("StatefulSet", "brig-host");
    let annotations = &hosts["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], "3000");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
}

/// A level of the Pod Security Standards.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Level {
    Baseline,
    Restricted,
}

/// The containers of a pod spec: init, regular and ephemeral.
fn all_containers(pod: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|key| pod[*key].as_array())
        .flatten()
        .collect()
}

/// Pod Security Admission's checks at policy version 1.35, as a table: (check id, level,
/// what it finds wrong in a pod's metadata and spec). Transcribed from
/// kubernetes/pod-security-admission's policy/check_*.go and the Pod Security Standards
/// page; `hostUsers: false` relaxes procMount (baseline), runAsNonRoot and runAsUser
/// (restricted) from 1.35 on.
type Rule = (&'static str, Level, fn(&Value, &Value) -> Vec<String>);

const PSS_RULES: [Rule; 18] = [
    ("hostProcess", Level::Baseline, |_, pod| {
        let mut found = Vec::new();
        if pod["securityContext"]["windowsOptions"]["hostProcess"] == true {
            found.push("pod".into());
        }
        for c in all_containers(pod) {
            if c["securityContext"]["windowsOptions"]["hostProcess"] == true {
                found.push(name(c));
            }
        }
        found
    }),
    ("hostNamespaces", Level::Baseline, |_, pod| {
        ["hostNetwork", "hostPID", "hostIPC"]
            .iter()
            .filter(|key| pod[**key] == true)
            .map(|key| key.to_string())
            .collect()
    }),
    ("privileged", Level::Baseline, |_, pod| {
        containers_where(pod, |c| c["securityContext"]["privileged"] == true)
    }),
    ("capabilities_baseline", Level::Baseline, |_, pod| {
        const ALLOWED: [&str; 13] = [
            "AUDIT_WRITE",
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "MKNOD",
            "NET_BIND_SERVICE",
            "SETFCAP",
            "SETGID",
            "SETPCAP",
            "SETUID",
            "SYS_CHROOT",
        ];
        containers_where(pod, |c| {
            added(c).iter().any(|cap| !ALLOWED.contains(&cap.as_str()))
        })
    }),
    ("hostPathVolumes", Level::Baseline, |_, pod| {
        volumes_where(pod, |volume| !volume["hostPath"].is_null())
    }),
    ("hostPorts", Level::Baseline, |_, pod| {
        containers_where(pod, |c| {
            c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|port| port["hostPort"].as_u64().unwrap_or(0) != 0)
        })
    }),
    ("hostProbesAndHostLifecycle", Level::Baseline, |_, pod| {
        containers_where(pod, |c| {
            let handlers = [
                &c["livenessProbe"],
                &c["readinessProbe"],
                &c["startupProbe"],
                &c["lifecycle"]["postStart"],
                &c["lifecycle"]["preStop"],
            ];
            handlers.iter().any(|handler| {
                ["httpGet", "tcpSocket"].iter().any(|kind| {
                    handler[*kind]["host"]
                        .as_str()
                        .is_some_and(|h| !h.is_empty())
                })
            })
        })
    }),
    ("appArmorProfile", Level::Baseline, |meta, pod| {
        let bad = |profile: &Value| {
            profile["type"]
                .as_str()
                .is_some_and(|kind| !["RuntimeDefault", "Localhost"].contains(&kind))
        };
        let mut found = containers_where(pod, |c| bad(&c["securityContext"]["appArmorProfile"]));
        if bad(&pod["securityContext"]["appArmorProfile"]) {
            found.push("pod".into());
        }
        for (key, value) in meta["annotations"].as_object().into_iter().flatten() {
            let value = value.as_str().unwrap_or("");
            if key.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && value != "runtime/default"
                && !value.starts_with("localhost/")
            {
                found.push(key.clone());
            }
        }
        found
    }),
    ("seLinuxOptions", Level::Baseline, |_, pod| {
        const TYPES: [&str; 5] = [
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ];
        let bad = |options: &Value| {
            !TYPES.contains(&options["type"].as_str().unwrap_or(""))
                || !options["user"].as_str().unwrap_or("").is_empty()
                || !options["role"].as_str().unwrap_or("").is_empty()
        };
        let mut found = containers_where(pod, |c| bad(&c["securityContext"]["seLinuxOptions"]));
        if bad(&pod["securityContext"]["seLinuxOptions"]) {
            found.push("pod".into());
        }
        found
    }),
    ("procMount", Level::Baseline, |_, pod| {
        if pod["hostUsers"] == false {
            return Vec::new();
        }
        unmasked(pod)
    }),
    ("seccompProfile_baseline", Level::Baseline, |_, pod| {
        let unconfined = |profile: &Value| profile["type"] == "Unconfined";
        let mut found =
            containers_where(pod, |c| unconfined(&c["securityContext"]["seccompProfile"]));
        if unconfined(&pod["securityContext"]["seccompProfile"]) {
            found.push("pod".into());
        }
        found
    }),
    ("sysctls", Level::Baseline, |_, pod| {
        const SAFE: [&str; 10] = [
            "kernel.shm_rmid_forced",
            "net.ipv4.ip_local_port_range",
            "net.ipv4.ip_unprivileged_port_start",
            "net.ipv4.tcp_syncookies",
            "net.ipv4.ping_group_range",
            "net.ipv4.ip_local_reserved_ports",
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        ];
        pod["securityContext"]["sysctls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|sysctl| sysctl["name"].as_str())
            .filter(|name| !SAFE.contains(name))
            .map(str::to_string)
            .collect()
    }),
    ("restrictedVolumes", Level::Restricted, |_, pod| {
        const ALLOWED: [&str; 8] = [
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        ];
        volumes_where(pod, |volume| {
            volume
                .as_object()
                .unwrap()
                .keys()
                .any(|key| key != "name" && !ALLOWED.contains(&key.as_str()))
        })
    }),
    ("allowPrivilegeEscalation", Level::Restricted, |_, pod| {
        containers_where(pod, |c| {
            c["securityContext"]["allowPrivilegeEscalation"] != false
        })
    }),
    ("runAsNonRoot", Level::Restricted, |_, pod| {
        if pod["hostUsers"] == false {
            return Vec::new();
        }
        let pod_level = pod["securityContext"]["runAsNonRoot"] == true;
        containers_where(pod, |c| {
            let own = &c["securityContext"]["runAsNonRoot"];
            *own == false || (own.is_null() && !pod_level)
        })
    }),
    ("runAsUser", Level::Restricted, |_, pod| {
        if pod["hostUsers"] == false {
            return Vec::new();
        }
        let mut found = containers_where(pod, |c| c["securityContext"]["runAsUser"] == 0);
        if pod["securityContext"]["runAsUser"] == 0 {
            found.push("pod".into());
        }
        found
    }),
    ("seccompProfile_restricted", Level::Restricted, |_, pod| {
        let valid = |profile: &Value| {
            ["RuntimeDefault", "Localhost"].contains(&profile["type"].as_str().unwrap_or(""))
        };
        let pod_valid = valid(&pod["securityContext"]["seccompProfile"]);
        containers_where(pod, |c| {
            let own = &c["securityContext"]["seccompProfile"];
            if own.is_null() {
                !pod_valid
            } else {
                !valid(own)
            }
        })
    }),
    ("capabilities_restricted", Level::Restricted, |_, pod| {
        containers_where(pod, |c| {
            let drops_all = c["securityContext"]["capabilities"]["drop"]
                .as_array()
                .is_some_and(|drop| drop.iter().any(|cap| cap == "ALL"));
            !drops_all || added(c).iter().any(|cap| cap != "NET_BIND_SERVICE")
        })
    }),
];

/// restricted's procMount_restricted (1.35): baseline's check without the user
/// namespace's relaxation, overriding it.
fn procmount_restricted(pod: &Value) -> Vec<String> {
    unmasked(pod)
}

fn unmasked(pod: &Value) -> Vec<String> {
    containers_where(pod, |c| {
        c["securityContext"]["procMount"]
            .as_str()
            .is_some_and(|mount| mount != "Default")
    })
}

fn name(container: &Value) -> String {
    format!("container {}", container["name"].as_str().unwrap_or("?"))
}

fn containers_where(pod: &Value, bad: impl Fn(&Value) -> bool) -> Vec<String> {
    all_containers(pod)
        .into_iter()
        .filter(|c| bad(c))
        .map(name)
        .collect()
}

fn volumes_where(pod: &Value, bad: impl Fn(&Value) -> bool) -> Vec<String> {
    pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|volume| bad(volume))
        .map(|volume| format!("volume {}", volume["name"].as_str().unwrap_or("?")))
        .collect()
}

fn added(container: &Value) -> Vec<String> {
    container["securityContext"]["capabilities"]["add"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|cap| {
            cap.as_str()
                .unwrap_or("")
                .trim_start_matches("CAP_")
                .to_string()
        })
        .collect()
}

/// What the `level` forbids in a pod template (`{metadata, spec}`): `check: where` each.
fn pss_violations(template: &Value, level: Level) -> Vec<String> {
    let (meta, pod) = (&template["metadata"], &template["spec"]);
    let mut found = Vec::new();
    for (id, rule_level, check) in PSS_RULES {
        // procMount_restricted overrides baseline's procMount in restricted.
        if level == Level::Restricted && id == "procMount" {
            continue;
        }
        if rule_level == Level::Baseline || level == Level::Restricted {
            found.extend(check(meta, pod).into_iter().map(|at| format!("{id}: {at}")));
        }
    }
    if level == Level::Restricted {
        found.extend(
            procmount_restricted(pod)
                .into_iter()
                .map(|at| format!("procMount_restricted: {at}")),
        );
    }
    found
}

/// The pod templates of a manifest's workloads, `(kind/name, template)`.
fn pod_templates(file: &str) -> Vec<(String, Value)> {
    documents(file)
        .into_iter()
        .filter_map(|doc| {
            let template = match doc["kind"].as_str()? {
                "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => {
                    doc["spec"]["template"].clone()
                }
                "Pod" => doc.clone(),
                _ => return None,
            };
            Some((
                format!(
                    "{}/{}",
                    doc["kind"].as_str()?,
                    doc["metadata"]["name"].as_str()?
                ),
                template,
            ))
        })
        .collect()
}

#[test]
fn pods_meet_the_baseline_pod_security_standard() {
    let mut templates = Vec::new();
    for file in kustomized() {
        templates.extend(pod_templates(&file));
    }
    let names: Vec<&str> = templates.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["StatefulSet/brig-host", "Deployment/brig-gateway"]);
    for (name, template) in &templates {
        assert_eq!(
            pss_violations(template, Level::Baseline),
            Vec::<String>::new(),
            "{name}"
        );
    }
    // The routers pass restricted; the hosts fail it on procMount alone, the exemption
    // hosts.yaml explains.
    let (_, hosts) = &templates[0];
    let (_, routers) = &templates[1];
    assert_eq!(
        pss_violations(routers, Level::Restricted),
        Vec::<String>::new()
    );
    assert_eq!(
        pss_violations(hosts, Level::Restricted),
        ["procMount_restricted: container serve"]
    );
    // Without the exemption (and brig with `--proc host`, as hosts.yaml says) the hosts
    // pass restricted.
    let mut masked = hosts.clone();
    let serve = masked["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == "serve")
        .unwrap();
    serve["securityContext"]
        .as_object_mut()
        .unwrap()
        .remove("procMount");
    assert_eq!(
        pss_violations(&masked, Level::Restricted),
        Vec::<String>::new()
    );
    // Without the pod's user namespace, baseline would refuse the unmasked /proc too.
    let mut shared = hosts.clone();
    shared["spec"]["hostUsers"] = Value::Bool(true);
    assert_eq!(
        pss_violations(&shared, Level::Baseline),
        ["procMount: container serve"]
    );
    // The Job example uses Unconfined profiles: its namespace is privileged, as it says.
    let (_, job) = &pod_templates("brig-job.yaml")[0];
    assert_eq!(
        pss_violations(job, Level::Baseline),
        ["appArmorProfile: pod", "seccompProfile_baseline: pod"]
    );
}

#[test]
fn the_baseline_check_catches_a_privileged_pod() {
    let privileged: Value = serde_json::json!({
        "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/x": "unconfined"}},
        "spec": {
            "hostNetwork": true,
            "hostPID": true,
            "securityContext": {
                "seccompProfile": {"type": "Unconfined"},
                "sysctls": [{"name": "kernel.msgmax", "value": "1"}]
            },
            "containers": [{
                "name": "x",
                "image": "x",
                "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {
                    "privileged": true,
                    "procMount": "Unmasked",
                    "capabilities": {"add": ["SYS_ADMIN", "CHOWN"]},
                    "seLinuxOptions": {"type": "spc_t"}
                },
                "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}
            }],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]
        }
    });
    let found = pss_violations(&privileged, Level::Baseline);
    assert_eq!(
        found,
        [
            "hostNamespaces: hostNetwork",
            "hostNamespaces: hostPID",
            "privileged: container x",
            "capabilities_baseline: container x",
            "hostPathVolumes: volume root",
            "hostPorts: container x",
            "hostProbesAndHostLifecycle: container x",
            "appArmorProfile: container.apparmor.security.beta.kubernetes.io/x",
            "seLinuxOptions: container x",
            "procMount: container x",
            "seccompProfile_baseline: pod",
            "sysctls: kernel.msgmax",
        ]
    );
    // Each rule alone, on a pod that otherwise passes: CHOWN is in the default set, and
    // the probe without a host passes.
    let mut allowed = privileged.clone();
    allowed["spec"] = serde_json::json!({"containers": [{"name": "x", "image": "x",
        "securityContext": {"capabilities": {"add": ["CHOWN"]}},
        "livenessProbe": {"httpGet": {"port": 80}}}]});
    allowed["metadata"] = serde_json::json!({});
    assert_eq!(
        pss_violations(&allowed, Level::Baseline),
        Vec::<String>::new()
    );
    assert_eq!(
        pss_violations(&allowed, Level::Restricted),
        [
            "allowPrivilegeEscalation: container x",
            "runAsNonRoot: container x",
            "seccompProfile_restricted: container x",
            "capabilities_restricted: container x",
        ]
    );
}

/// The calls brig builds a jail with (deploy/kubernetes/brig-seccomp-profile.py's list).
const BRIG_NEEDS: [&str; 8] = [
    "clone",
    "clone3",
    "unshare",
    "mount",
    "mount_setattr",
    "pivot_root",
    "umount2",
    "sethostname",
];

/// The runtime default profiles/brig.json is made from: containers-common's (CRI-O's and
/// podman's), Debian's package golang-github-containers-common.
const RUNTIME_DEFAULT: &str = "/usr/share/containers/seccomp.json";

#[test]
fn the_seccomp_profile_is_generated_and_allows_what_brig_needs() {
    let shipped_text =
        std::fs::read_to_string(kubernetes_dir().join("profiles/brig.json")).unwrap();
    let shipped: Value = serde_json::from_str(&shipped_text).expect("profiles/brig.json is JSON");
    // The runtime's default action stays: only brig's calls are allowed besides.
    assert_eq!(shipped["defaultAction"], "SCMP_ACT_ERRNO");
    let rules = shipped["syscalls"].as_array().unwrap();
    let first = &rules[0];
    assert_eq!(first["action"], "SCMP_ACT_ALLOW");
    assert!(
        first["includes"].is_null() && first["args"].is_null(),
        "{first}"
    );
    let names: Vec<&str> = first["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(names, BRIG_NEEDS);
    for rule in &rules[1..] {
        for name in rule["names"].as_array().into_iter().flatten() {
            assert!(!BRIG_NEEDS.contains(&name.as_str().unwrap()), "{rule}");
        }
    }
    // What `brig serve` and its sessions use beyond the runtime's default is only that.
    for call in [
        "landlock_create_ruleset",
        "seccomp",
        "pidfd_open",
        "memfd_create",
    ] {
        assert!(
            rules.iter().any(|rule| rule["action"] == "SCMP_ACT_ALLOW"
                && rule["names"].as_array().unwrap().iter().any(|n| n == call)),
            "{call} not allowed"
        );
    }
    // It is the script's output from the runtime's default, byte for byte.
    if !common::require(
        &format!("the runtime's default seccomp profile {RUNTIME_DEFAULT}"),
        "apt-get install golang-github-containers-common (podman brings it)",
        Path::new(RUNTIME_DEFAULT).exists(),
    ) {
        return;
    }
    let generated = Command::new(common::interpreter("python3"))
        .arg(kubernetes_dir().join("brig-seccomp-profile.py"))
        .arg(RUNTIME_DEFAULT)
        .output()
        .expect("run brig-seccomp-profile.py");
    assert!(generated.status.success(), "{}", describe(&generated));
    assert!(
        stdout(&generated) == shipped_text,
        "deploy/kubernetes/profiles/brig.json is stale: regenerate it with `python3 deploy/kubernetes/brig-seccomp-profile.py {RUNTIME_DEFAULT} > deploy/kubernetes/profiles/brig.json`"
    );
}

/// The Secret's example line is no key: a gateway started with it stops at once (125),
/// naming the line.
#[test]
fn the_example_api_keys_are_refused() {
    let secret = object("Secret", "brig-api-keys");
    let dir = TempDir::new("api-keys");
    let keys = dir.file(
        "api-keys",
        secret["stringData"]["api-keys"].as_str().unwrap(),
    );
    let output = Command::new(common::brig())
        .args(["gateway", "--listen", "127.0.0.1:0", "--server"])
        .arg(dir.path().join("no.sock"))
        .arg("--api-keys")
        .arg(&keys)
        .stdin(Stdio::null())
        .output()
        .expect("run brig gateway");
    assert_eq!(output.status.code(), Some(125), "{}", describe(&output));
    assert!(
        stderr(&output).contains("api-keys:2: \"replace-this-line\": not a setting"),
        "{}",
        describe(&output)
    );
}

/// `container`'s args with `$(NAME)` replaced as the kubelet does: from its env, whose
/// values come from the ConfigMap `config` or the pod's name.
pub(crate) fn expanded_args(container: &Value, config: &Value, pod_name: &str) -> Vec<String> {
    let mut env = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let source = &var["valueFrom"];
        let value = if let Some(key) = source["configMapKeyRef"]["key"].as_str() {
            assert_eq!(
                source["configMapKeyRef"]["name"],
                config["metadata"]["name"]
            );
            config["data"][key]
                .as_str()
                .unwrap_or_else(|| panic!("no {key}"))
                .to_string()
        } else if source["fieldRef"]["fieldPath"] == "metadata.name" {
            pod_name.to_string()
        } else {
            var["value"].as_str().expect("an env value").to_string()
        };
        env.push((var["name"].as_str().unwrap().to_string(), value));
    }
    arg_strings(container)
        .into_iter()
        .map(|mut arg| {
            for (name, value) in &env {
                arg = arg.replace(&format!("$({name})"), value);
            }
            assert!(!arg.contains("$("), "{arg}: a variable not defined");
            arg
        })
        .collect()
}

/// The volume directory for `mount_path` in `container`, as the pod's volumes define it:
/// (podman `--volume` option). ConfigMaps are laid out as the kubelet does; an emptyDir
/// is a 0777 directory of the pod's root, as the kubelet makes it; the Secret `secret`
/// as a ConfigMap.
fn volume_option(
    pod: &Value,
    container: &Value,
    mount_path: &str,
    dir: &Path,
    config: &Value,
    secret: &Value,
) -> String {
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["mountPath"] == mount_path)
        .unwrap_or_else(|| panic!("no volume at {mount_path}"));
    let name = mount["name"].as_str().unwrap();
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|volume| volume["name"] == name)
        .unwrap();
    let host = dir.join(name);
    if !host.exists() {
        std::fs::create_dir(&host).unwrap();
        if !volume["emptyDir"].is_null() {
            common::set_mode(&host, 0o777);
            // The pod's root: uid 0 of the pod's user namespace.
            nix::unistd::chown(&host, Some(200_000.into()), Some(200_000.into())).unwrap();
        } else if !volume["configMap"].is_null() {
            let mut data = serde_json::Map::new();
            for item in volume["configMap"]["items"].as_array().unwrap() {
                let key = item["key"].as_str().unwrap();
                data.insert(
                    item["path"].as_str().unwrap().into(),
                    config["data"][key].clone(),
                );
            }
            config_map_volume(&host, &Value::Object(data));
        } else if volume["secret"]["secretName"] == secret["metadata"]["name"] {
            // A Secret volume is laid out as a ConfigMap's.
            config_map_volume(&host, &secret["stringData"]);
        } else {
            panic!("volume {name}: no translation here");
        }
    }
    let read_only = if mount["readOnly"] == true { ":ro" } else { "" };
    format!("--volume={}:{mount_path}{read_only}", host.display())
}

/// podman's options for `container` of `pod`: its settings (`podman_options`) and a
/// `--volume` for each of its volumeMounts, the volumes under `dir` (`volume_option`).
pub(crate) fn pod_options(
    pod: &Value,
    container: &Value,
    dir: &Path,
    config: &Value,
    secret: &Value,
) -> Vec<String> {
    let mut options = podman_options(pod, container);
    for mount in container["volumeMounts"].as_array().unwrap() {
        let path = mount["mountPath"].as_str().unwrap();
        options.push(volume_option(pod, container, path, dir, config, secret));
    }
    options
}

/// deploy/kubernetes/hosts.yaml's pod under podman, its `serve` container with the pod's
/// settings (and its init container before it): a session runs Python in a sandbox with a
/// fresh /proc, the liveness probe's command answers, `brig doctor` passes with every
/// `pod spec:` line ok but the cgroup's, and SIGTERM drains (exit 0).
#[test]
fn the_host_pod_runs_under_podman() {
    if !have_podman() {
        return;
    }
    let hosts = object("StatefulSet", "brig-host");
    let config = object("ConfigMap", "brig-config");
    let pod = &hosts["spec"]["template"]["spec"];
    let root = container_root();
    // Mount points the runtime makes (as the node's root, before the user namespace).
    for dir in ["root/run/brig", "root/etc/brig"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    // The operator's Secret: one key of the right form.
    let mut secret = object("Secret", "brig-api-keys");
    secret["stringData"] = serde_json::json!({"api-keys": format!("{KEY} alice\n")});
    let volumes = TempDir::new("pod-volumes");
    let with_volumes =
        |container: &Value| pod_options(pod, container, volumes.path(), &config, &secret);
    let serve = container(pod, "serve");
    let args = expanded_args(serve, &config, "brig-host-0");
    let mut command = vec![BRIG_IN_CONTAINER];
    command.extend(args.iter().map(String::as_str));
    let serve_options = with_volumes(serve);
    let serve_options: Vec<&str> = serve_options.iter().map(String::as_str).collect();

    // Without the init container, the emptyDir (0777) is refused as the socket's directory.
    let refused = podman_run(&root, &serve_options, &command);
    common::assert_one_line_error(
        &refused,
        &[
            "--socket /run/brig/serve.sock: directory /run/brig is writable",
            "mode 0777",
        ],
    );

    let init = container(pod, "socket-dir");
    let init_options = with_volumes(init);
    let init_options: Vec<&str> = init_options.iter().map(String::as_str).collect();
    let init_command = arg_strings(init);
    let init_command: Vec<&str> = init_command.iter().map(String::as_str).collect();
    let made = podman_run(&root, &init_options, &init_command);
    assert!(made.status.success(), "{}", describe(&made));
    let run_mode = std::fs::metadata(volumes.path().join("run")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(run_mode.permissions().mode() & 0o7777, 0o1777);

    let name = format!("brig-host-test-{}", std::process::id());
    let name_option = format!("--name={name}");
    let started = podman_command(&root, &["--detach", &name_option], &serve_options, &command)
        .stdin(Stdio::null())
        .output()
        .expect("run podman");
    let _container = Detached(name.clone());
    assert!(started.status.success(), "{}", describe(&started));
    let exec = |args: &[&str], env: &[&str]| {
        let mut podman = Command::new("podman");
        podman.arg("exec");
        for var in env {
            podman.arg(format!("--env={var}"));
        }
        podman.arg(&name).args(args).stdin(Stdio::null());
        podman.output().expect("podman exec")
    };
    let logs = || container_logs(&name);
    // The liveness probe's command, until it answers (bounded).
    let probe = serve["livenessProbe"]["exec"]["command"]
        .as_array()
        .unwrap();
    let probe: Vec<&str> = probe.iter().map(|arg| arg.as_str().unwrap()).collect();
    let mut alive = exec(&probe, &[]);
    for _ in 0..600 {
        if alive.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        alive = exec(&probe, &[]);
    }
    assert!(alive.status.success(), "{}\n{}", describe(&alive), logs());
    assert!(stdout(&alive).contains("pid: 1"), "{}", describe(&alive));

    let socket = "/run/brig/serve.sock";
    let create = exec(
        &[BRIG_IN_CONTAINER, "session", "create", "--server", socket],
        &[],
    );
    assert!(create.status.success(), "{}\n{}", describe(&create), logs());
    let session = stdout(&create).trim().to_string();
    let python = "import os; print(6 * 7, os.getuid(), os.getpid(), os.uname().nodename)";
    let ran = exec(
        &[
            BRIG_IN_CONTAINER,
            "session",
            "exec",
            "--server",
            socket,
            "--session",
            &session,
            "--",
            "python3",
            "-c",
            python,
        ],
        &[],
    );
    // uid 1000 in the sandbox; a pid of its own pid namespace (a fresh /proc).
    let line = stdout(&ran);
    assert!(
        line.starts_with("42 1000 ") && line.ends_with(" brig\n"),
        "{}\n{}",
        describe(&ran),
        logs()
    );
    let pid: u32 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(pid < 100, "{line}");

    // doctor in the pod: every pod field as the manifest has it is right.
    let doctor = exec(
        &[BRIG_IN_CONTAINER, "doctor"],
        &["KUBERNETES_SERVICE_HOST=10.96.0.1"],
    );
    let report = stdout(&doctor);
    assert_eq!(doctor.status.code(), Some(0), "{}", describe(&doctor));
    for line in [
        "ok    pod spec: securityContext.seccompProfile:",
        "ok    pod spec: containers[].securityContext.procMount:",
        "ok    pod spec: spec.hostUsers: false",
        "warn  pod spec: resources.limits: no cgroup brig may write",
    ] {
        assert!(report.contains(line), "{line}: {}", describe(&doctor));
    }

    // The gateway container of the same pod: E2B's API on the server's socket, with the
    // keys from the Secret, the routing flags as the manifest has them.
    let gateway = container(pod, "gateway");
    let gateway_args: Vec<String> = expanded_args(gateway, &config, "brig-host-0");
    let mut gateway_command = vec![BRIG_IN_CONTAINER];
    gateway_command.extend(gateway_args.iter().map(String::as_str));
    let gateway_options = with_volumes(gateway);
    let gateway_options: Vec<&str> = gateway_options.iter().map(String::as_str).collect();
    let gateway_name = format!("brig-gateway-test-{}", std::process::id());
    let gateway_name_option = format!("--name={gateway_name}");
    let started = podman_command(
        &root,
        &["--detach", &gateway_name_option],
        &gateway_options,
        &gateway_command,
    )
    .stdin(Stdio::null())
    .output()
    .expect("run podman");
    let gateway_container = Detached(gateway_name.clone());
    assert!(started.status.success(), "{}", describe(&started));
    for _ in 0..600 {
        if container_logs(&gateway_name).contains("listening on") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let api = Command::new("podman")
        .args(["exec", &gateway_name, "python3", "-c", E2B_CALLS, KEY])
        .stdin(Stdio::null())
        .output()
        .expect("podman exec");
    assert_eq!(
        stdout(&api),
        "201 listed\n",
        "{}\n{}",
        describe(&api),
        container_logs(&gateway_name)
    );
    let stop = Command::new("podman")
        .args(["stop", "--time", "60", &gateway_name])
        .stdin(Stdio::null())
        .output()
        .expect("podman stop");
    assert!(stop.status.success(), "{}", describe(&stop));
    drop(gateway_container);

    stop_drains(&name);

    // Restricted instead (hosts.yaml's comment): without procMount: Unmasked, with
    // `proc: host` in jail.yaml, the same sandboxes run, seeing the pod's /proc.
    let mut restricted = serve.clone();
    restricted["securityContext"]
        .as_object_mut()
        .unwrap()
        .remove("procMount");
    let mut proc_host = config.clone();
    proc_host["data"]["jail.yaml"] = Value::String(format!(
        "{}proc: host\n",
        config["data"]["jail.yaml"].as_str().unwrap()
    ));
    let restricted_volumes = TempDir::new("pod-volumes-restricted");
    let mut options = podman_options(pod, &restricted);
    options.push(volume_option(
        pod,
        &restricted,
        "/etc/brig",
        restricted_volumes.path(),
        &proc_host,
        &secret,
    ));
    assert!(!options.iter().any(|option| option.contains("unmask")));
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let python = "import os; print(6 * 7, os.getuid())";
    let run = [
        "run",
        "--config",
        "/etc/brig/jail.yaml",
        "--",
        "python3",
        "-c",
        python,
    ];
    let ran = podman_run(&root, &options, &brig(&run));
    assert_eq!(stdout(&ran), "42 1000\n", "{}", describe(&ran));
    // Without `proc: host` the masked /proc stops the jail: the exemption is that or this.
    let fresh = podman_run(
        &root,
        &options,
        &brig(&["run", "--", "python3", "-c", python]),
    );
    common::assert_one_line_error(&fresh, &["fresh /proc"]);
}

/// An E2B API key of the SDK's form.
pub(crate) const KEY: &str = "e2b_00000000000000000000000000000000000000a1";

/// In the gateway's container: a sandbox created through E2B's REST API (key: argv[1]),
/// then listed.
const E2B_CALLS: &str = r#"
import json, sys, urllib.request
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request("http://127.0.0.1:3000" + path, data=data, method=method,
                                     headers={"X-API-Key": sys.argv[1], "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return response.status, json.loads(response.read() or b"null")
status, sandbox = call("POST", "/sandboxes", {"templateID": "base", "timeout": 60})
_, listed = call("GET", "/sandboxes")
print(status, "listed" if [s["sandboxID"] for s in listed] == [sandbox["sandboxID"]] else listed)
"#;

/// The capabilities brig needs in a container: none as uid 1000 (what the manifests
/// run); as the container's root, CAP_SETUID, CAP_SETGID and CAP_DAC_OVERRIDE (to map
/// each jail to a host uid of its own), each needed.
#[test]
fn the_capabilities_brig_needs_in_a_pod() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let run = brig(&[
        "run",
        "--quiet-limits",
        "--",
        "python3",
        "-c",
        "print('ran')",
    ]);
    let with = |user: &str, add: &[&str]| {
        let mut options = vec![user.to_string(), "--cap-drop=all".to_string()];
        options.extend(
            crate::containers::WORKING
                .iter()
                .map(|option| option.to_string()),
        );
        options.extend(add.iter().map(|cap| format!("--cap-add={cap}")));
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        podman_run(&root, &options, &run)
    };
    let rootless = with("--user=1000:1000", &[]);
    assert_eq!(stdout(&rootless), "ran\n", "{}", describe(&rootless));
    const AS_ROOT: [&str; 3] = ["SETUID", "SETGID", "DAC_OVERRIDE"];
    let root_ok = with("--user=0:0", &AS_ROOT);
    assert_eq!(stdout(&root_ok), "ran\n", "{}", describe(&root_ok));
    for missing in AS_ROOT {
        let fewer: Vec<&str> = AS_ROOT.into_iter().filter(|cap| *cap != missing).collect();
        let output = with("--user=0:0", &fewer);
        assert_eq!(
            output.status.code(),
            Some(125),
            "without {missing}: {}",
            describe(&output)
        );
        assert!(stderr(&output).contains("brig: "), "{}", describe(&output));
    }
}

/// A profile like Docker's default (which containerd's follows): namespaces, mounts and
/// the hostname only with CAP_SYS_ADMIN (`cap_gated_profile`), and clone without namespace
/// flags allowed, so that a process may still fork.
fn docker_like_profile(runtime_default: &Value) -> Value {
    // CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
    // CLONE_NEWPID | CLONE_NEWNET, Docker's mask.
    const NAMESPACE_FLAGS: u64 = 0x7E02_0000;
    let mut profile = cap_gated_profile(runtime_default);
    let rules = profile["syscalls"].as_array_mut().unwrap();
    for rule in rules.iter_mut() {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|name| name != "clone");
        }
    }
    rules.retain(|rule| {
        rule["names"]
            .as_array()
            .is_none_or(|names| !names.is_empty())
    });
    rules.push(serde_json::json!({
        "names": ["clone"],
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
    }));
    profile
}

/// `brig doctor` in a pod names the pod field to change for each restriction.
#[test]
fn doctor_in_a_pod_names_the_pod_spec_fields() {
    if !have_podman() {
        return;
    }
    let root = container_root();
    let dir = TempDir::new("pod-doctor");
    let doctor = |options: &[&str]| {
        let mut all = vec![
            crate::containers::USER,
            "--env=KUBERNETES_SERVICE_HOST=10.96.0.1",
        ];
        all.extend_from_slice(options);
        let output = podman_run(&root, &all, &brig(&["doctor", "--no-run"]));
        (output.status.code(), stdout(&output))
    };
    let line = |report: &str, start: &str| -> String {
        report
            .lines()
            .find(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("no line `{start}`:\n{report}"))
            .to_string()
    };

    // A default pod (podman's settings are CRI-O's): the filter refuses sethostname, /proc
    // is masked, no user namespace of the pod's own, no TUN device.
    let (code, report) = doctor(&[]);
    assert_eq!(code, Some(1), "{report}");
    let seccomp = line(&report, "FAIL  pod spec: securityContext.seccompProfile: ");
    assert!(seccomp.contains("sethostname: EPERM"), "{seccomp}");
    assert!(seccomp.contains("fix: set the pod's `securityContext.seccompProfile: {type: Localhost, localhostProfile: profiles/brig.json}`"), "{seccomp}");
    let proc = line(
        &report,
        "FAIL  pod spec: containers[].securityContext.procMount: ",
    );
    assert!(proc.contains("/proc is masked (/proc/"), "{proc}");
    assert!(
        proc.contains("`securityContext.procMount: Unmasked`")
            && proc.contains("set `spec.hostUsers: false` too"),
        "{proc}"
    );
    line(&report, "warn  pod spec: spec.hostUsers: true or unset");
    let limits = line(
        &report,
        "warn  pod spec: resources.limits: no cgroup brig may write",
    );
    assert!(limits.contains("`--memory max`"), "{limits}");
    let tun = line(&report, "warn  pod spec: resources.limits (/dev/net/tun): ");
    assert!(tun.contains("device plugin"), "{tun}");
    assert!(
        report.contains("inside a container (kubernetes)"),
        "{report}"
    );

    // A Docker/containerd-style profile (namespaces only with CAP_SYS_ADMIN), in a pod
    // with a user namespace and /proc unmasked: only the seccomp line fails, on unshare.
    let runtime_default: Value =
        serde_json::from_str(&std::fs::read_to_string(RUNTIME_DEFAULT).unwrap()).unwrap();
    let gated = dir.file(
        "gated.json",
        &docker_like_profile(&runtime_default).to_string(),
    );
    let gated = format!("--security-opt=seccomp={}", gated.display());
    let userns = ["--uidmap=0:200000:65536", "--gidmap=0:200000:65536"];
    let unmask = "--security-opt=unmask=/proc/*";
    let (code, report) = doctor(&[&gated, unmask, userns[0], userns[1]]);
    assert_eq!(code, Some(1), "{report}");
    let seccomp = line(&report, "FAIL  pod spec: securityContext.seccompProfile: ");
    assert!(
        seccomp.contains("unshare(CLONE_NEWUSER): EPERM"),
        "{seccomp}"
    );
    line(
        &report,
        "ok    pod spec: containers[].securityContext.procMount: ",
    );
    line(&report, "ok    pod spec: spec.hostUsers: false");

    // The shipped profile, but /proc masked in a pod with a user namespace: the procMount
    // line alone fails, and says the pod already has the user namespace it needs. With
    // the TUN device passed in, its line is ok.
    let profile = format!(
        "--security-opt=seccomp={}",
        kubernetes_dir().join("profiles/brig.json").display()
    );
    let (code, report) = doctor(&[&profile, userns[0], userns[1], "--device=/dev/net/tun"]);
    assert_eq!(code, Some(1), "{report}");
    line(&report, "ok    pod spec: securityContext.seccompProfile: ");
    let proc = line(
        &report,
        "FAIL  pod spec: containers[].securityContext.procMount: ",
    );
    assert!(proc.contains("(this pod has one;"), "{proc}");
    line(&report, "ok    pod spec: resources.limits (/dev/net/tun): ");
    let failing: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("FAIL"))
        .collect();
    assert!(
        failing.iter().all(|line| line.contains("/proc")),
        "only /proc fails: {failing:?}"
    );

    // The pod's root (a later --user wins), with the manifest's settings: every pod field
    // is right, as for uid 1000 in the_host_pod_runs_under_podman.
    let (code, report) = doctor(&[&profile, unmask, userns[0], userns[1], "--user=0:0"]);
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("(as root)"), "{report}");
    for start in [
        "ok    pod spec: securityContext.seccompProfile: ",
        "ok    pod spec: containers[].securityContext.procMount: ",
        "ok    pod spec: spec.hostUsers: false",
    ] {
        line(&report, start);
    }
}
