//! man/brig.1 is generated from the clap definitions, plus the hand-written sections
//! below. `man_page_is_current` fails when the checked-in page is stale; regenerate with
//! `BRIG_UPDATE_MAN=1 cargo test man_page`.

use crate::cli::Cli;
use clap::CommandFactory;
use clap_mangen::Man;

const THE_JAIL: &str = r#".SH THE JAIL
By default the program runs with:
.IP \(bu 2
new user, mount, pid, network, ipc, uts and cgroup namespaces, and a time namespace where the kernel has one;
.IP \(bu 2
uid and gid 1000 (user \fBsandbox\fR) inside, mapped to the caller's ids when brig is rootless and to host uid/gid 65534 when brig runs as root, never to host root; setgroups denied;
.IP \(bu 2
a fresh tmpfs root, read-only once assembled: the host's /usr bound read-only, /bin, /lib, /lib64 and /sbin as on the host (merged-/usr symlinks stay symlinks), a synthesized /etc (passwd, group, hosts, hostname, nsswitch.conf, the loader cache and CA certificates), a fresh /proc, a minimal /dev, and /tmp, /dev/shm and the home directory as tmpfs of \fB\-\-tmpfs\-size\fR; every mount nosuid, and nodev except the device nodes and devpts;
.IP \(bu 2
no network but \fBlo\fR; hostname \fBbrig\fR;
.IP \(bu 2
brig's child as PID 1 of the jail: it forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the program (if the program is still running 2 seconds after one of the first four, brig kills the jail), reaps zombies, and when the program exits everything else in the jail dies with it;
.IP \(bu 2
a new session without a controlling terminal, file descriptors 0, 1 and 2 only, and an environment of PATH, HOME, LANG=C.UTF-8 and TERM plus \fB\-\-env\fR and \fB\-\-env\-pass\fR;
.IP \(bu 2
every capability dropped from every set, and no_new_privs;
.IP \(bu 2
Landlock rules derived from the mounts: read and execute where the mounts are read\-only, full access to writable binds, /tmp, /dev/shm, the home directory and \fB\-\-tmpfs\fR mounts, read and write on the devices; TCP bind and connect denied without a network; abstract unix sockets and signals scoped to the jail (\fB\-\-landlock\fR);
.IP \(bu 2
last before the program starts, the seccomp profile \fBdefault\fR: an allowlist of system calls in which anything else fails with EPERM (\fB\-\-seccomp\fR, \fBbrig seccomp list\fR).
"#;

const EXIT_STATUS: &str = r#".SH EXIT STATUS
.TP
\fIN\fR
the program exited with status \fIN\fR
.TP
128+\fIN\fR
the program was killed by signal \fIN\fR; 159 (SIGSYS) with a line saying so when its seccomp profile killed it
.TP
124
brig killed the jail at a limit it enforces itself, \fB\-\-time\-limit\fR or \fB\-\-output\-limit\fR
.TP
125
brig itself failed: a bad option, config or path, or a setup step the kernel refused; one line on standard error names what failed and the fix
.TP
126
the program could not be executed
.TP
127
the program was not found
"#;

const LIMITS_AND_VERDICT: &str = r#".SH LIMITS
\fB\-\-memory\fR (default 1G, no swap), \fB\-\-pids\fR (default 256) and \fB\-\-cpus\fR are enforced by a cgroup of the jail's own: cgroup v2, or the v1 memory, pids and cpu hierarchies. It is created under \fB\-\-cgroup\-parent\fR, else (as root) under a \fIbrig\fR cgroup brig creates, else (rootless) under brig's own cgroup when it is delegated to the caller. When the program ends, whatever is left in it is killed and it is removed. An explicit cgroup limit without a usable cgroup fails closed (exit 125); the defaults are then reported as not enforced. \fB\-\-cpu\-time\fR is RLIMIT_CPU (per process, SIGXCPU then SIGKILL); \fB\-\-rlimit\fR sets any other rlimit (defaults core=0, nofile=1024, fsize=1G); \fB\-\-output\-limit\fR relays stdout and stderr through brig and kills the jail past SIZE bytes. A memory limit hit ends with exit 137, a CPU-time limit with 152.
.SH VERDICT
\fB\-\-report\fR \fIFILE\fR or \fB\-\-report\-fd\fR \fIN\fR writes one JSON object, schema \fBbrig\-verdict/1\fR, with the keys: \fBschema\fR; \fBstatus\fR (ok, nonzero_exit, signaled, timeout, cpu_time, oom, output_limit, setup_error); \fBbrig_exit_code\fR; \fBexit_code\fR and \fBsignal\fR of the program; \fBwall_ms\fR, \fBcpu_user_ms\fR, \fBcpu_sys_ms\fR, \fBmax_rss_kib\fR; \fBmemory_peak_bytes\fR, \fBoom_kills\fR, \fBpids_peak\fR from the cgroup; \fBstdout_bytes\fR, \fBstderr_bytes\fR, \fBoutput_truncated\fR (with \fB\-\-output\-limit\fR); \fBlimits\fR (the effective limits); \fBprotections\fR (namespaces, cgroup version, rootless, net, capabilities, no_new_privs, Landlock ABI, seccomp profile); \fBwarnings\fR; and \fBerror\fR for setup errors. \fB\-\-audit\-log\fR \fIFILE\fR appends one JSON line per run: time, caller uid, argv, config digest and the verdict.
"#;

const CONFIGURATION: &str = r#".SH CONFIGURATION
\fB\-\-config\fR \fIFILE\fR reads a YAML mapping whose keys are the long option names without the dashes (\fBro\-bind\fR, \fBtime\-limit\fR, ...); repeatable options are lists, and the program is the list \fBcommand\fR. Layers apply in order: the profile (\fB\-\-profile\fR, or \fBprofile\fR in the file), the file, the command line. A later scalar wins, lists are appended, and a command given later replaces an earlier one. An unknown key or a wrong type is an error naming the file, line and column. The built-in profiles \fBpython\fR, \fBnode\fR and \fBshell\fR are compiled into brig; \fBbrig check\fR prints the fully resolved plan.
"#;

const EXAMPLES: &str = r#".SH EXAMPLES
.nf
brig run \-\-profile python \-\- python3 \-c 'print("hello from the jail")'
brig run \-\-time\-limit 5s \-\-tmpfs\-size 16M \-\-ro\-bind ./task:/task \-\- python3 /task/main.py
brig run \-\-bind "$PWD/out":/out \-\-chdir /out \-\- sh \-c 'echo result > answer.txt'
brig check \-\-config judge.yaml \-\- ./solution
.fi
.SH SEE ALSO
\fBbwrap\fR(1), \fBnsjail\fR(1), \fBnamespaces\fR(7), \fBuser_namespaces\fR(7), \fBcapabilities\fR(7)
"#;

pub fn render() -> String {
    let command = Cli::command();
    let man = Man::new(command.clone())
        .date("")
        .source("brig")
        .manual("User Commands");
    let mut page = Vec::new();
    man.render_title(&mut page).unwrap();
    man.render_name_section(&mut page).unwrap();
    man.render_synopsis_section(&mut page).unwrap();
    man.render_description_section(&mut page).unwrap();
    page.extend_from_slice(b".SH COMMANDS\n");
    for sub in command.get_subcommands() {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        let nested: Vec<_> = sub.get_subcommands().collect();
        if nested.is_empty() {
            let line = format!(
                ".TP\n\\fBbrig {}\\fR [\\fIOPTIONS\\fR] [\\-\\-] \\fIPROGRAM\\fR [\\fIARGS\\fR...]\n{}\n",
                sub.get_name(),
                about.replace('-', "\\-")
            );
            page.extend_from_slice(line.as_bytes());
        }
        for action in nested {
            let about = action
                .get_about()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let operands: String = action
                .get_positionals()
                .filter_map(|arg| {
                    arg.get_value_names()?
                        .first()
                        .map(|name| format!(" \\fI{name}\\fR"))
                })
                .collect();
            let line = format!(
                ".TP\n\\fBbrig {} {}\\fR{operands}\n{}\n",
                sub.get_name(),
                action.get_name(),
                about.replace('-', "\\-")
            );
            page.extend_from_slice(line.as_bytes());
        }
    }
    let run = command
        .find_subcommand("run")
        .expect("run subcommand")
        .clone();
    let mut options = Vec::new();
    Man::new(run.bin_name("brig run"))
        .render_options_section(&mut options)
        .unwrap();
    let options = String::from_utf8(options).unwrap();
    page.extend_from_slice(
        options
            .replacen(".SH OPTIONS", ".SH \"OPTIONS OF RUN AND CHECK\"", 1)
            .as_bytes(),
    );
    for section in [
        THE_JAIL,
        EXIT_STATUS,
        LIMITS_AND_VERDICT,
        CONFIGURATION,
        EXAMPLES,
    ] {
        page.extend_from_slice(section.as_bytes());
    }
    String::from_utf8(page).unwrap()
}

#[test]
fn man_page_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/man/brig.1");
    let fresh = render();
    if std::env::var_os("BRIG_UPDATE_MAN").is_some() {
        std::fs::write(path, &fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "man/brig.1 is stale: run `BRIG_UPDATE_MAN=1 cargo test man_page` and commit it"
    );
}
