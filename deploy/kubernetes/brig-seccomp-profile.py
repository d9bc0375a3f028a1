#!/usr/bin/env python3
"""Writes a seccomp profile for a container that runs brig: the container runtime's
default profile, with the system calls brig needs to build a jail allowed.

A runtime's default profile (Docker, Podman, containerd, CRI-O; Kubernetes'
`RuntimeDefault`) allows some of these calls only to containers with CAP_SYS_ADMIN, or
never. brig needs them before its jail exists: a child cloned into new namespaces
(clone3, or clone where clone3 is refused), a cgroup and a time namespace (unshare), the
mount tree (mount, mount_setattr, pivot_root, umount2) and the jail's hostname
(sethostname). Everything else stays as the runtime's default has it; seccomp filters
stack, so the program in the jail gets this profile *and* brig's own (whose `default`
denies every call listed here).

    brig-seccomp-profile.py RUNTIME_DEFAULT.json > brig.json

RUNTIME_DEFAULT.json: on CRI-O and Podman hosts /usr/share/containers/seccomp.json (the
containers-common package); containerd has no file: start from Docker's default profile
(profiles/seccomp/default.json in the moby repository), which containerd's built-in one
follows. In Kubernetes, put the result on every node under the kubelet's seccomp
directory (/var/lib/kubelet/seccomp/profiles/brig.json) and use
`seccompProfile: {type: Localhost, localhostProfile: profiles/brig.json}`.
"""

import json
import sys

# What brig calls before the jail's program runs that a runtime's default may refuse.
BRIG_NEEDS = [
    "clone",
    "clone3",
    "unshare",
    "mount",
    "mount_setattr",
    "pivot_root",
    "umount2",
    "sethostname",
]


def brig_profile(profile):
    """The profile with every rule about BRIG_NEEDS removed and one unconditional allow
    rule for them in front."""
    rules = []
    for rule in profile.get("syscalls") or []:
        names = rule.get("names")
        if names is None and "name" in rule:  # the old one-name form
            names = [rule["name"]]
        kept = [name for name in names or [] if name not in BRIG_NEEDS]
        if kept:
            rule = {key: value for key, value in rule.items() if key != "name"}
            rule["names"] = kept
            rules.append(rule)
    allow = {
        "names": BRIG_NEEDS,
        "action": "SCMP_ACT_ALLOW",
        "comment": "brig builds its jail with these (deploy/kubernetes/brig-seccomp-profile.py)",
    }
    return {**profile, "syscalls": [allow] + rules}


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(f"usage: {argv[0]} RUNTIME_DEFAULT.json > brig.json\n")
        return 2
    with open(argv[1], encoding="utf-8") as file:
        profile = json.load(file)
    if "defaultAction" not in profile:
        sys.stderr.write(f"{argv[1]}: not a seccomp profile (no defaultAction)\n")
        return 1
    json.dump(brig_profile(profile), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
