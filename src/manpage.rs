//! man/brig.1 and man/brig-config.5 are generated from the clap definitions, plus the
//! hand-written sections below. Every command, every option and every YAML key (the long
//! option names of `brig run`) comes from clap, so the pages cannot drift from `--help`.
//! `man_pages_are_current` fails when a checked-in page is stale; regenerate both with
//! `BRIG_UPDATE_MAN=1 cargo test man_page`.

use crate::cli::Cli;
use clap::ArgAction;
use clap_mangen::Man;

const THE_JAIL: &str = r#".SH THE JAIL
By default the program runs with:
.IP \(bu 2
new user, mount, pid, network, ipc, uts and cgroup namespaces, and a time namespace where the kernel has one;
.IP \(bu 2
uid and gid 1000 (user \fBsandbox\fR) inside, mapped to the caller's ids when brig is rootless and, when brig runs as root, to a host uid/gid of the jail's own from \fB\-\-host\-uid\-range\fR (default 1879048192\-1879113727), which also creates the jail's user namespace, so that the kernel's per-user counters (inotify, pending signals, message queues) are the jail's and not root's (\fB\-\-host\-uid\-range off\fR: 65534 for all, the namespace root's); never to host root; setgroups denied; the jail's own /proc/sys/user limits (64 inotify instances, 16384 watches, 64 of each namespace kind);
.IP \(bu 2
a fresh tmpfs root, read-only once assembled: the host's /usr bound read-only, /bin, /lib, /lib64 and /sbin as on the host (merged-/usr symlinks stay symlinks), a synthesized /etc (passwd, group, hosts, hostname, nsswitch.conf, the loader cache, CA certificates and Debian's /etc/alternatives symlinks), a fresh /proc, a minimal /dev, and /tmp, /dev/shm and the home directory as tmpfs of \fB\-\-tmpfs\-size\fR; every mount nosuid, and nodev except the device nodes and devpts; with \fB\-\-rootfs\fR, a prepared root (see \fBROOT FILESYSTEMS\fR) replaces the host's /usr and the synthesized /etc;
.IP \(bu 2
no network but \fBlo\fR (see \fBNETWORK\fR for \fB\-\-allow\-net\fR); hostname \fBbrig\fR;
.IP \(bu 2
brig's child as PID 1 of the jail: it forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the program (if the program is still running 2 seconds after one of the first four, brig kills the jail), reaps zombies, and when the program exits everything else in the jail dies with it;
.IP \(bu 2
a new session without a controlling terminal, file descriptors 0, 1 and 2 only, and an environment of PATH, HOME, LANG=C.UTF-8 and TERM plus \fB\-\-env\fR and \fB\-\-env\-pass\fR;
.IP \(bu 2
every capability dropped from every set, and no_new_privs;
.IP \(bu 2
Landlock rules derived from the mounts: read and execute where the mounts are read\-only, full access to writable binds, /tmp, /dev/shm, the home directory and \fB\-\-tmpfs\fR mounts, read and write on the devices; abstract unix sockets and signals scoped to the jail (\fB\-\-landlock\fR);
.IP \(bu 2
last before the program starts, the seccomp profile \fBdefault\fR: an allowlist of system calls in which anything else fails with EPERM (\fB\-\-seccomp\fR, \fBbrig seccomp list\fR).
"#;

const EXIT_STATUS: &str = r#".SH EXIT STATUS
Of \fBbrig run\fR:
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
brig itself failed: a bad option, config or path, or a setup step the kernel refused; or \fBbrig serve\fR refused the run for now (full or draining: error kind busy, nothing ran, send it again later); one line on standard error names what failed and the fix
.TP
126
the program could not be executed
.TP
127
the program was not found
.PP
\fBbrig doctor\fR exits 0 when no check failed (a default jail can run here) and 1 otherwise. \fBbrig serve\fR exits 0 once drained (SIGTERM, SIGINT), and 125 only when it cannot start as configured: a bad option, or \fB\-\-memory\fR/\fB\-\-pids\fR/\fB\-\-cpus\fR this host cannot enforce for its user (rootless without a delegated cgroup); a restart fails the same way, so a systemd unit names it in \fBRestartPreventExitStatus=125\fR. The other commands exit 0, or 125 with one line on standard error.
"#;

const NETWORK: &str = r#".SH NETWORK
\fB\-\-net none\fR (the default) gives the jail only its own \fBlo\fR: a program can serve and test itself on 127.0.0.1, nothing else is reachable. \fB\-\-net host\fR shares the host's network namespace (a warning). \fB\-\-net filtered\fR, implied by any \fB\-\-allow\-net\fR, lets the jail reach only what the rules allow, transparently (no proxy settings) and rootless:
.IP \(bu 2
the jail's network namespace gets a TUN device (10.0.2.100/24, and fd00:b216::100/64 where the kernel has IPv6) as its default route; brig's supervisor, which stays in the host's namespace, reads its packets, terminates TCP in a user-mode stack (smoltcp) and opens each connection itself, only once the policy allows it;
.IP \(bu 2
\fB\-\-allow\-net\fR \fIRULE\fR (repeatable; YAML \fBallow\-net\fR): \fIHOST\fR[:\fIPORT\fR], *.\fIDOMAIN\fR[:\fIPORT\fR] (any depth of subdomain, not the bare domain), \fIIP\fR[:\fIPORT\fR], \fICIDR\fR[:\fIPORT\fR], IPv6 in brackets; no port means any port (Deno's spelling). \fB\-\-add\-host\fR \fINAME\fR:\fIIP\fR pins a name to an address;
.IP \(bu 2
DNS: /etc/resolv.conf names brig's resolver (10.0.2.3). An allowed name gets a synthetic address (198.18.0.0/15) that brig maps back to the name and resolves on the host when the jail connects; any other name is NXDOMAIN and no query about it leaves the host. /etc/hosts lists the exact names of the rules and the pins;
.IP \(bu 2
a connection is allowed when its name matches a rule on its port, the TLS SNI or HTTP Host of its first bytes names no host off the list, and the address brig connects to is not loopback, private (RFC 1918), link-local (169.254.0.0/16, the cloud metadata endpoints), CGNAT, unique-local, multicast, unspecified or reserved, in any spelling (IPv4-mapped IPv6 included), unless an \fIIP\fR or \fICIDR\fR rule or a pin names it: an allowed name that resolves to 127.0.0.1 is still refused;
.IP \(bu 2
anything else is refused at once: a TCP reset (ECONNREFUSED in the program); UDP other than DNS to brig's resolver and ICMP are dropped. Every connection, lookup and drop is in the verdict's \fBnetwork\fR record;
.IP \(bu 2
\fB\-\-net\-bytes\fR \fISIZE\fR caps the bytes relayed both ways (then every connection is cut and new ones refused) and \fB\-\-net\-connections\fR \fIN\fR the connections open at once (default 256); reaching either makes the verdict's status \fBnet_limit\fR.
.IP \(bu 2
secrets: \fB\-\-secret\fR \fINAME\fR=env:\fIVAR\fR|file:\fIPATH\fR with \fB\-\-secret\-host\fR \fINAME\fR=\fIHOST\fR[:\fIPORT\fR] (YAML \fBsecret\fR, \fBsecret\-host\fR): inside the jail \fINAME\fR holds a random per-run placeholder; brig makes a CA for the jail at start (in memory only), trusted inside through \fI/etc/brig\-ca\-bundle.pem\fR (\fBSSL_CERT_FILE\fR, \fBREQUESTS_CA_BUNDLE\fR, \fBNODE_EXTRA_CA_CERTS\fR, \fBCURL_CA_BUNDLE\fR, \fBGIT_SSL_CAINFO\fR), terminates TLS to an entitled host, judges each request inside (its Host must be that host), replaces the placeholder in the header lines (and with \fB\-\-secret\-body\fR \fINAME\fR, in text, JSON and form bodies up to 1 MiB) with the value and connects upstream verifying the real certificate against the host's roots plus \fB\-\-upstream\-ca\fR \fIFILE\fR. A placeholder sent where it is not entitled goes on unchanged and is reported (the verdict's \fBnetwork.secret_placeholders\fR, stderr); \fB\-\-secret\-strict\fR refuses that connection. The value is never in the jail, the verdict, errors or \fBbrig check\fR; a program that pins certificates fails.
.PP
Rootless, brig creates the TUN device as the caller inside the jail's namespaces, which needs \fI/dev/net/tun\fR open to everyone (mode 0666, the usual one); \fBbrig doctor\fR checks it.
"#;

const GATEWAY: &str = r#".SH E2B GATEWAY
\fBbrig gateway \-\-listen\fR \fIHOST:PORT\fR \fB\-\-server\fR \fISOCKET\fR \fB\-\-api\-keys\fR \fIFILE\fR serves E2B's API (its REST API and envd, the in-sandbox API, over the Connect protocol; HTTP/1.1 and h2c) in front of the \fBbrig serve\fR on \fISOCKET\fR, so that a program written for E2B's SDK runs unchanged with \fBE2B_API_URL\fR=http://\fIHOST:PORT\fR \fBE2B_SANDBOX_URL\fR=http://\fIHOST:PORT\fR \fBE2B_API_KEY\fR=\fIKEY\fR.
.IP \(bu 2
Each sandbox is a session of the server, each command a background process of it. \fIFILE\fR holds one \fIKEY TENANT\fR a line (\fB#\fR comments); each key is a tenant, which sees and touches only its own sandboxes (another's id is not found). A bad line stops the gateway with one line naming \fIFILE\fR:\fILINE\fR and the fix (125).
.IP \(bu 2
It prints \fBbrig gateway: listening on http://\fR\fIADDRESS\fR (the port chosen for port 0) and stops on SIGTERM or SIGINT (0). It speaks plain HTTP: keep it on loopback or behind a TLS ingress. Run the server with \fB\-\-max\-sessions\-per\-uid 0\fR (every sandbox is a session of the gateway's uid) and an \fB\-\-idle\-timeout\fR as long as \fB\-\-session\-timeout\fR (E2B's sandboxes end at their timeout only). What is served and what not yet: docs/e2b.md.
"#;

const SESSIONS: &str = r#".SH SESSIONS
A session is a jail of \fBbrig serve\fR that lives between requests, for the code-interpreter pattern: a variable set by one cell is there in the next, a file written in the workspace stays. \fBbrig session create \-\-server\fR \fISOCKET\fR [\fIRUN OPTIONS\fR] opens one and prints its id; \fBexec\fR, \fBput\fR, \fBget\fR, \fBls\fR and \fBclose\fR take it with \fB\-\-session\fR (or \fBBRIG_SESSION\fR; the socket from \fBBRIG_SERVER\fR), \fBlist\fR lists the caller's sessions.
.IP \(bu 2
Each session is its own jail, with every protection of a one-shot jail: namespaces, cgroup (\fB\-\-memory\fR, \fB\-\-pids\fR and \fB\-\-cpus\fR hold for the whole session), a workspace (the home directory, a tmpfs of \fB\-\-workspace\-size\fR). Its init runs programs one after another, each started as a one-shot program is (rlimits, capabilities dropped, no_new_privs, Landlock, seccomp, exec), in a process group of its own.
.IP \(bu 2
\fBbrig session exec \-\- \fIARGV\fR runs a command; \fB\-\-code\fR \fIFILE\fR|\- [\fB\-\-language python\fR|\fBnode\fR] runs a cell in the session's interpreter of that language, started at the first cell (a pooled session has Python running already), whose globals live on. The cell's output goes to standard output and error, then the value of its final expression (as a notebook shows it), and the traceback of an exception it raised (exit status 1).
.IP \(bu 2
At \fB\-\-time\-limit\fR (at most the server's) a command's process group is killed (124); a cell is interrupted (KeyboardInterrupt in Python), what it started is killed, and its state is kept if the interpreter comes back within 5 seconds, otherwise the interpreter is killed and restarted and the reply says \fBstate_lost\fR. An out-of-memory kill of the interpreter is status \fBoom\fR with a fresh interpreter after it; output past \fB\-\-output\-limit\fR (stdout and stderr together; 1 MiB by default, at most 8 MiB) stops the exec (\fBoutput_limit\fR).
.IP \(bu 2
\fBput\fR, \fBget\fR and \fBls\fR work on the workspace from outside the jail, as the jail's user, through a descriptor of it: paths are relative, and \fB..\fR, absolute paths and symlinks or mounts leading out are refused by the kernel (openat2 RESOLVE_BENEATH). Names chosen in the jail are printed with control characters escaped (\fB\\x1b\fR, \fB\\n\fR): a file name cannot drive the terminal.
.IP \(bu 2
A session survives its client, not the server: it ends at \fBclose\fR, after \fB\-\-idle\-timeout\fR without a request, at \fB\-\-session\-timeout\fR (each at most the server's), or with the server, and nothing of it remains. Only the uid that created it (or root) may use it. \fBbrig serve \-\-session\-pool\fR \fIN\fR keeps N session jails assembled with Python started; \fB\-\-max\-sessions\fR bounds the open ones. The server's \fB\-\-audit\-log\fR gets one line per exec, with the session's id.
"#;

const SERVE: &str = r#".SH SERVER
\fBbrig serve \-\-socket\fR \fIPATH\fR [\fB\-\-pool\fR \fIN\fR] [\fIRUN OPTIONS\fR] is a jail server for services that run programs many times an hour. The run options (or \fB\-\-config\fR) are the defaults of every jail. It keeps \fB\-\-pool\fR jails assembled ahead of requests (namespaces, id maps, cgroup, mount tree, init waiting); a request takes one, its program starts with privileges dropped, Landlock and seccomp applied last, as in a one-shot run, and the jail is torn down afterwards and never reused. With \fB\-\-warm\-python\fR \fIN\fR, N pooled jails have Python already started inside them under all their restrictions; a request of the pool's shape for \fBpython3 \-c\fR \fICODE\fR, \fBpython3\fR \fISCRIPT\fR or \fBpython3 \-\fR is served by one and behaves as a cold start (argv, sys.path[0], __main__, stdin, exit status, tracebacks, signals); its verdict says \fBwarm\fR. \fB\-\-warm\-node\fR \fIN\fR does the same for \fBnode \-e\fR \fICODE\fR, \fBnode\fR \fISCRIPT\fR and \fBnode \-\fR (its streams are pipes the runner relays to the client's, since Node cannot take descriptors; stack frames below the program's own name \fBnode:internal/brig\-warm\fR). A pooled run's client is answered as soon as its program has ended, before the jail is torn down; the next pooled jail is built after the answer. A request whose options change the jail's shape (anything beyond \fBcommand\fR, \fBenv\fR, \fBchdir\fR, \fBtime\-limit\fR, \fBquiet\-limits\fR) gets a jail built for it. Each jail is assembled in a runner process forked from the server (the server stays single-threaded), which answers the client directly.
.PP
\fBbrig run \-\-server\fR \fIPATH\fR [\fIOPTIONS\fR] \fB\-\-\fR \fIPROGRAM\fR is its client: the same options, exit statuses and verdict (\fB\-\-report\fR, \fB\-\-report\-fd\fR and \fB\-\-audit\-log\fR are written by the client); its stdin, stdout and stderr are passed to the jail (SCM_RIGHTS), and SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 reach the program. A client that goes away takes its jail along. Before it sends anything, the client (and \fBbrig session\fR) checks who listens (SO_PEERCRED): root, the caller's own uid, or the user in \fBBRIG_SERVER_UID\fR (a name or number, e.g. \fBbrig\fR for deploy/systemd/brig-serve.service); another listener is refused (125) and gets nothing.
.PP
Who may connect: the socket is 0600, or 0660 with \fB\-\-socket\-group\fR, given its mode and group in a private directory before it is renamed to its path (never touched by path after); its directory, and each above it, must be owned by root or the server's user and writable by no one else unless sticky (as /tmp), or the server refuses to start (125); the server checks each peer's credentials (SO_PEERCRED: root, its own uid, or the group) and writes them, with the program each ran, to its \fB\-\-audit\-log\fR. A client may not loosen the server's policy; every option has one rule, checked for runs, sessions and each exec: limits only tighten (\fB\-\-time\-limit\fR, \fB\-\-memory\fR, \fB\-\-pids\fR, \fB\-\-cpus\fR, \fB\-\-cpu\-time\fR, \fB\-\-output\-limit\fR, \fB\-\-tmpfs\-size\fR, \fB\-\-home\-size\fR, each \fB\-\-tmpfs\fR and their sum, each \fB\-\-rlimit\fR against the server's or the hard limit it runs under, \fB\-\-net\-bytes\fR, \fB\-\-net\-connections\fR), the seccomp profile and the Landlock mode are no weaker, \fB\-\-net host\fR, \fB\-\-seccomp none\fR, \fB\-\-seccomp\-log\fR, \fB\-\-landlock off\fR, \fB\-\-proc host\fR and a network beyond the server's \fB\-\-allow\-net\fR list need \fB\-\-client\-may\fR, binds and roots need \fB\-\-allow\-bind\-under\fR, \fB\-\-cgroup\-parent\fR, \fB\-\-host\-uid\fR, \fB\-\-host\-gid\fR, \fB\-\-host\-uid\-range\fR, \fB\-\-env\-pass\fR, \fB\-\-profile\fR and seccomp profile files are the server's (refused unless its own value), and the program, \fB\-\-env\fR, \fB\-\-chdir\fR, \fB\-\-uid\fR, \fB\-\-gid\fR, \fB\-\-hostname\fR, \fB\-\-quiet\-limits\fR and where the verdict goes are the client's. \fB\-\-max\-jails\fR bounds the jails running at once; a request beyond it waits up to \fB\-\-queue\-timeout\fR, then fails (125). One uid gets at most its share, \fB\-\-max\-jails\-per\-uid\fR (waits as beyond \fB\-\-max\-jails\fR) and \fB\-\-max\-sessions\-per\-uid\fR (refused), half of the global by default, and holds at most \fB\-\-max\-connections\-per\-uid\fR connections not yet running; a request must arrive whole within 5 s and a reply be taken within 10 s, or the connection is closed (a client that does not read loses its answer, not the slot). Output captured for a client (capture mode, session exec) is at most its output limit, stdout and stderr together (1 MiB by default, 8 MiB at most), never read past it: the jail is killed at the cut (\fBoutput_limit\fR). SIGTERM or SIGINT drains: no new requests (queued and arriving ones are refused at once), running jails finish within \fB\-\-drain\-grace\fR or are stopped then, and every waiting client, sessions' included, is answered that the server is draining (125); the server exits within the grace and a few hundred milliseconds, leaving no jail, cgroup or socket. A server killed outright takes its jails along at once: each runner has PR_SET_PDEATHSIG SIGKILL, each jail's init dies with its runner and every process of the jail with its init; the next start removes their cgroups before it listens, and replaces its stale socket. \fBbrig serve \-\-status \-\-socket\fR \fIPATH\fR prints the pool, runs and failures. The wire protocol is in \fBbrig\-config\fR(5).
"#;

const LIMITS_AND_VERDICT: &str = r#".SH LIMITS
\fB\-\-memory\fR (default 1G, no swap), \fB\-\-pids\fR (default 256) and \fB\-\-cpus\fR are enforced by a cgroup of the jail's own: cgroup v2, or the v1 memory, pids and cpu hierarchies. It is created under \fB\-\-cgroup\-parent\fR, else (as root) under a \fIbrig\fR cgroup brig creates, else (rootless) under brig's own cgroup when it is delegated to the caller. When the program ends, whatever is left in it is killed and it is removed. An explicit cgroup limit without a usable cgroup fails closed (exit 125). Without one, the default process limit is RLIMIT_NPROC, which the kernel counts per jail (per user in each user namespace), and the default memory limit is not enforced: brig says so in the plan, in the verdict's warnings and, once the program has run, in one line on standard error, unless \fB\-\-memory max\fR or \fB\-\-quiet\-limits\fR. \fB\-\-cpu\-time\fR is RLIMIT_CPU (per process, SIGXCPU then SIGKILL); \fB\-\-rlimit\fR sets any other rlimit (defaults core=0, nofile=1024, fsize=1G, sigpending=1024, msgqueue=800K, the last two no higher than brig's own); \fB\-\-output\-limit\fR relays stdout and stderr through brig and kills the jail past SIZE bytes. A memory limit hit ends with exit 137, a CPU-time limit with 152.
.SH VERDICT
\fB\-\-report\fR \fIFILE\fR or \fB\-\-report\-fd\fR \fIN\fR writes one JSON object, schema \fBbrig\-verdict/1\fR, described key by key in \fBbrig\-config\fR(5). \fB\-\-audit\-log\fR \fIFILE\fR appends one JSON line per run: time, caller uid and pid, argv, config digest and the verdict; a server's line names its client (SO_PEERCRED) and the program it ran.
"#;

const CONFIGURATION: &str = r#".SH CONFIGURATION
\fB\-\-config\fR \fIFILE\fR reads a YAML mapping whose keys are the long option names without the dashes (\fBro\-bind\fR, \fBtime\-limit\fR, ...); repeatable options are lists, and the program is the list \fBcommand\fR. Layers apply in order: the profile (\fB\-\-profile\fR, or \fBprofile\fR in the file), the file, the command line. A later scalar wins, lists are appended, and a command given later replaces an earlier one. An unknown key or a wrong type is an error naming the file, line and column. The built-in profiles \fBpython\fR, \fBnode\fR and \fBshell\fR are compiled into brig; \fBbrig check\fR prints the fully resolved plan. Every key is listed in \fBbrig\-config\fR(5).
"#;

const OPERATORS: &str = r#".SH DOCTOR
\fBbrig doctor\fR probes the host and prints one line per check, \fBok\fR, \fBwarn\fR or \fBFAIL\fR, with the fix for each problem: the user namespace settings (\fIuser.max_user_namespaces\fR, \fIkernel.unprivileged_userns_clone\fR, Ubuntu's \fIkernel.apparmor_restrict_unprivileged_userns\fR); a default jail assembled with brig's own code (every namespace, the id maps, the cgroup namespace, the mount tree with a fresh /proc, which container runtimes that mask /proc prevent, and pivot_root), reporting the step that failed; the cgroup layout and where \fBbrig run\fR would put the jail's cgroup (and, with \fB\-\-cgroup\-parent\fR, whether that subtree is usable and writable); the Landlock ABI; the default seccomp profile, installed in a child where it must deny a call, and the seccomp log and user-notify actions; a TUN device created in a fresh network namespace (for \fB\-\-net filtered\fR); and brig's own binary running \fBbrig run \-\-profile python \-\- python3 \-c pass\fR (or the shell profile without python3). As root it runs the namespace, cgroup and end-to-end probes again as uid 65534, to show what an unprivileged user gets; those failures are warnings. \fB\-\-json\fR prints the same as one object, schema \fBbrig\-doctor/1\fR: \fBok\fR, \fBrootless\fR and \fBchecks\fR, each with \fBname\fR, \fBstatus\fR (ok, warn, fail), \fBdetail\fR and \fBfix\fR.
.SH ROOT FILESYSTEMS
\fBbrig rootfs build\fR \fIMANIFEST\fR \fIOUT\fR builds a hermetic root filesystem for \fB\-\-rootfs\fR, so that a jail sees nothing of the host's /usr: the programs a YAML manifest lists, with their ELF closure (the loader from PT_INTERP and the libraries from DT_NEEDED, found through DT_RPATH, DT_RUNPATH, the host's loader cache and the standard directories), whole directories (e.g. the Python standard library), single files, symlinks, a generated /etc (passwd and group with the user \fBsandbox\fR, 1000, hosts, hostname, nsswitch.conf) and the mount points brig needs (/proc, /dev, /tmp, /home/sandbox). Debian packages can be a source too: downloaded with \fBapt\-get download\fR and unpacked with \fBdpkg\-deb \-x\fR, never installed. The shipped manifests are \fBpython\fR, \fBnode\fR and \fBshell\fR, and \fBe2b\-base\fR and \fBe2b\-code\-interpreter\fR, E2B's templates for \fBbrig gateway \-\-template\-roots\fR (\fBbrig rootfs show NAME\fR); the keys are in \fBbrig\-config\fR(5).
.PP
The output is reproducible: the same inputs give the same bytes. Directories are 0755, files 0755 or 0644, every time is \fBSOURCE_DATE_EPOCH\fR (else 0), and \fB\-\-tar\fR \fIFILE\fR writes a tar archive in path order with owner 0:0. The digest, SHA-256 over a canonical listing (type, mode, size, content hash and path of every entry), is written to \fIOUT\fR/.brig\-rootfs\-digest with the listing in \fIOUT\fR/.brig\-rootfs\-listing; \fBbrig run \-\-rootfs\fR reports it in the verdict (\fBprotections.rootfs\fR), and \fBbrig rootfs verify\fR \fIDIR\fR recomputes it.
.SH COMPLETIONS
\fBbrig completions\fR \fISHELL\fR prints a completion script for bash, zsh or fish, generated from the same definitions as this page:
.PP
.nf
brig completions bash > /etc/bash_completion.d/brig
brig completions zsh > /usr/local/share/zsh/site\-functions/_brig
brig completions fish > ~/.config/fish/completions/brig.fish
.fi
"#;

const EXAMPLES: &str = r#".SH EXAMPLES
.nf
brig run \-\-profile python \-\- python3 \-c 'print("hello from the jail")'
brig run \-\-time\-limit 5s \-\-tmpfs\-size 16M \-\-ro\-bind ./task:/task \-\- python3 /task/main.py
brig run \-\-bind "$PWD/out":/out \-\-chdir /out \-\- sh \-c 'echo result > answer.txt'
brig run \-\-report\-fd 3 \-\- python3 main.py 3> verdict.json
brig serve \-\-socket /run/brig/brig.sock \-\-pool 4 \-\-time\-limit 30s &
brig run \-\-server /run/brig/brig.sock \-\- python3 \-c 'print(1)'
brig run \-\-allow\-net pypi.org:443 \-\-allow\-net files.pythonhosted.org:443 \-\- pip download \-d /tmp six
brig check \-\-config judge.yaml \-\- ./solution
brig doctor
brig rootfs build python /srv/roots/python && brig run \-\-rootfs /srv/roots/python \-\- python3 \-c 'print(1)'
systemd\-run \-\-user \-\-scope \-p Delegate=yes brig run \-\-memory 256M \-\- python3 main.py
.fi
.SH FILES
.TP
\fIdeploy/\fR (in the source tree)
a systemd unit with Delegate=yes and its worker, a GitHub Actions step, an AppArmor profile for hosts that restrict unprivileged user namespaces, and Python and Node clients that read the verdict.
.SH SEE ALSO
\fBbrig\-config\fR(5), \fBbwrap\fR(1), \fBnsjail\fR(1), \fBnamespaces\fR(7), \fBuser_namespaces\fR(7), \fBcapabilities\fR(7), \fBsystemd.resource\-control\fR(5)
"#;

/// Escapes text for a roff line: backslashes and dashes, and a leading dot or quote.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// `brig NAME [OPTIONS] OPERANDS` for one (sub)command.
fn synopsis(path: &str, command: &clap::Command) -> String {
    let mut line = format!("\\fB{}\\fR", roff(path));
    let has_options = command
        .get_arguments()
        .any(|arg| !arg.is_positional() && arg.get_id() != "help");
    if has_options {
        line.push_str(" [\\fIOPTIONS\\fR]");
    }
    // A hidden positional (the run options' `command` that `serve` and `session create`
    // take along with the options but do not accept) is no operand.
    for arg in command.get_positionals().filter(|arg| !arg.is_hide_set()) {
        if arg.get_id() == "command" {
            line.push_str(" [\\-\\-] \\fIPROGRAM\\fR [\\fIARGS\\fR...]");
            continue;
        }
        let name = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map(|name| name.to_string())
            .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
        if arg.is_required_set() {
            line.push_str(&format!(" \\fI{name}\\fR"));
        } else {
            line.push_str(&format!(" [\\fI{name}\\fR]"));
        }
    }
    line
}

fn about(command: &clap::Command) -> String {
    command
        .get_about()
        .map(|text| roff(&text.to_string()))
        .unwrap_or_default()
}

/// An OPTIONS section for one subcommand, rendered by clap_mangen.
fn options_section(command: &clap::Command, bin_name: &str, title: &str) -> String {
    let mut out = Vec::new();
    Man::new(command.clone().bin_name(bin_name.to_string()))
        .render_options_section(&mut out)
        .unwrap();
    String::from_utf8(out)
        .unwrap()
        .replacen(".SH OPTIONS", &format!(".SH \"{title}\""), 1)
}

pub fn render_brig1() -> String {
    let command = crate::cli::built_whole::<Cli>();
    let man = Man::new(command.clone())
        .date("")
        .source("brig")
        .manual("User Commands");
    let mut page = Vec::new();
    man.render_title(&mut page).unwrap();
    man.render_name_section(&mut page).unwrap();
    man.render_synopsis_section(&mut page).unwrap();
    man.render_description_section(&mut page).unwrap();
    let mut text = String::from_utf8(page).unwrap();
    text.push_str(".SH COMMANDS\n");
    for sub in command.get_subcommands() {
        let nested: Vec<_> = sub.get_subcommands().collect();
        if nested.is_empty() {
            let path = format!("brig {}", sub.get_name());
            text.push_str(&format!(".TP\n{}\n{}\n", synopsis(&path, sub), about(sub)));
            for arg in sub.get_positionals() {
                let values: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .map(|value| value.get_name().to_string())
                    .collect();
                if !values.is_empty() {
                    let name = arg
                        .get_value_names()
                        .and_then(|names| names.first())
                        .map(|name| name.to_string())
                        .unwrap_or_default();
                    text.push_str(&format!(
                        ".br\n\\fI{name}\\fR is one of {}.\n",
                        values.join(", ")
                    ));
                }
            }
        }
        for action in nested {
            let path = format!("brig {} {}", sub.get_name(), action.get_name());
            text.push_str(&format!(
                ".TP\n{}\n{}\n",
                synopsis(&path, action),
                about(action)
            ));
        }
    }
    let find = |path: &[&str]| {
        let mut found = command.clone();
        for name in path {
            found = found
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("subcommand {name}"))
                .clone();
        }
        found
    };
    text.push_str(&options_section(
        &find(&["run"]),
        "brig run",
        "OPTIONS OF RUN AND CHECK",
    ));
    // brig serve takes every option of brig run as the jails' defaults: list its own.
    let run_ids: Vec<String> = find(&["run"])
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect();
    // Commands that take every option of brig run list only their own.
    let own_options = |command: clap::Command| {
        run_ids.iter().fold(command, |command, id| {
            if command
                .get_arguments()
                .any(|arg| arg.get_id() == id.as_str())
            {
                command.mut_arg(id.as_str(), |arg| arg.hide(true))
            } else {
                command
            }
        })
    };
    let serve_own = own_options(find(&["serve"]));
    text.push_str(&options_section(
        &serve_own,
        "brig serve",
        "OPTIONS OF SERVE (and every option of run, as the jails' defaults)",
    ));
    let create_own = own_options(find(&["session", "create"]));
    text.push_str(&options_section(
        &create_own,
        "brig session create",
        "OPTIONS OF SESSION CREATE (and every option of run, for the session's jail)",
    ));
    text.push_str(&options_section(
        &find(&["session", "exec"]),
        "brig session exec",
        "OPTIONS OF SESSION EXEC",
    ));
    text.push_str(&options_section(
        &find(&["gateway"]),
        "brig gateway",
        "OPTIONS OF GATEWAY",
    ));
    text.push_str(&options_section(
        &find(&["doctor"]),
        "brig doctor",
        "OPTIONS OF DOCTOR",
    ));
    text.push_str(&options_section(
        &find(&["rootfs", "build"]),
        "brig rootfs build",
        "OPTIONS OF ROOTFS BUILD",
    ));
    for section in [
        THE_JAIL,
        EXIT_STATUS,
        NETWORK,
        SERVE,
        SESSIONS,
        GATEWAY,
        LIMITS_AND_VERDICT,
        CONFIGURATION,
        OPERATORS,
        EXAMPLES,
    ] {
        text.push_str(section);
    }
    text
}

const CONFIG_HEAD: &str = r#".TH brig\-config 5 "" brig "File Formats"
.SH NAME
brig\-config \- brig's YAML configuration, root filesystem manifests and verdict
.SH DESCRIPTION
\fBbrig run \-\-config\fR \fIFILE\fR (and \fBbrig check\fR) reads a YAML mapping. Its keys are the long options of \fBbrig run\fR without the dashes, with the same values: an option that may be repeated is a list, a flag is \fBtrue\fR or \fBfalse\fR, and the program with its arguments is the list \fBcommand\fR. The built-in profiles (\fB\-\-profile\fR python, node, shell) are files of the same format compiled into brig.
.PP
Layers apply in this order: the profile (named on the command line or by \fBprofile\fR in the file), the file, the command line. A later scalar wins, lists are appended, and a non-empty \fBcommand\fR replaces the one below. An unknown key or a value of the wrong type is an error that names the file, the line and the column, e.g. \fIjudge.yaml:3:1: unknown field `tmpfs_size`, expected one of ...\fR (brig exits 125).
.SH KEYS
"#;

const CONFIG_EXAMPLE: &str = r#".SH EXAMPLE
.nf
profile: python
time\-limit: 10s
memory: 256M
tmpfs\-size: 32M
ro\-bind:
  \- /srv/task:/task
env:
  \- MODE=judge
chdir: /task
report: /srv/out/verdict.json
command: [python3, main.py]
.fi
.PP
Sizes take binary suffixes (64M, 1G, 512K) and durations a unit (1500ms, 5s, 2m, 1h). Paths inside the jail are absolute and may not contain \fB..\fR.
"#;

const MANIFEST: &str = r#".SH ROOT FILESYSTEM MANIFESTS
\fBbrig rootfs build\fR \fIMANIFEST\fR \fIOUT\fR reads a YAML manifest (unknown keys are errors with the line). Paths are absolute; in \fBtrees\fR a \fB*\fR or \fB?\fR in a path picks every match, and \fBexclude\fR patterns also take \fB**\fR for any number of directories. A path is looked up in the unpacked Debian packages first, then on the host, and every symlink on the way is recreated in the root, so merged-/usr layouts work as on the host. The keys, applied in this order:
.TP
\fBdebian\-packages\fR: list of \fINAME\fR or \fINAME\fR=\fIVERSION\fR
Debian packages downloaded with \fBapt\-get download\fR and unpacked with \fBdpkg\-deb \-x\fR into a staging tree that is searched before the host; nothing is installed and no maintainer script runs. Pin versions for reproducible roots.
.TP
\fBprograms\fR: list of paths or names
Programs, by absolute path or by name in /usr/local/bin, /usr/bin, /bin, /usr/sbin and /sbin. Each comes with its loader and the libraries it needs (PT_INTERP, DT_NEEDED through DT_RPATH, DT_RUNPATH, the loader cache and the standard directories), recursively; a script brings its #! interpreter. A missing library is an error.
.TP
\fBtrees\fR: list of \fISRC\fR or \fISRC\fR:\fIDST\fR
Directories copied whole. ELF files in them bring their libraries (a missing one is a note, since the host cannot load it either), and symlinks that point out of the tree bring their targets.
.TP
\fBfiles\fR: list of \fISRC\fR or \fISRC\fR:\fIDST\fR
Single files.
.TP
\fBdirs\fR: list of paths
Empty directories, e.g. mount points for \fB\-\-bind\fR.
.TP
\fBsymlinks\fR: mapping \fIPATH\fR: \fITARGET\fR
Symlinks to create.
.TP
\fBwrite\fR: mapping \fIPATH\fR: \fICONTENTS\fR
Files to write with the given contents.
.TP
\fBexclude\fR: list of patterns
Paths left out of \fBtrees\fR, e.g. /usr/lib/python3.*/test or /usr/**/__pycache__.
.TP
\fBetc\fR: mapping
The generated /etc/passwd, group, hosts, hostname and nsswitch.conf: \fBuser\fR (sandbox), \fBuid\fR (1000), \fBgid\fR (1000), \fBhome\fR (/home/sandbox), \fBshell\fR (/bin/sh), \fBhostname\fR (brig).
.PP
Every root also gets /etc, /proc, /dev, /tmp and the home directory, the mount points brig needs. Example, the shipped \fBnode\fR manifest plus a CA bundle:
.PP
.nf
programs: [node]
files: [/etc/ssl/certs/ca\-certificates.crt]
.fi
"#;

const PROTOCOL: &str = r#".SH SERVER PROTOCOL
\fBbrig serve\fR speaks version 1 of a small protocol on a unix stream socket: a frame is a 4-byte big-endian length, then one JSON object with \fB"brig": 1\fR and a \fBtype\fR; descriptors travel as SCM_RIGHTS; each connection carries one request. The requests are \fBrun\fR (\fBoptions\fR by the YAML names above, \fBcommand\fR the program; the program's stdin, stdout and stderr sent along, or \fB"stdio": "capture"\fR for the output in the reply), \fBsignal\fR, \fBstatus\fR, and the sessions' \fBsession_create\fR, \fBsession_exec\fR, \fBsession_put\fR, \fBsession_get\fR, \fBsession_ls\fR, \fBsession_close\fR and \fBsession_list\fR. A run is answered \fB{"type": "done", "verdict": {...}}\fR (the verdict below), a refusal \fB{"type": "error", "message": "...", "kind": "bad_input", "exit_code": 125}\fR.
.PP
Every request and reply is described in \fIdocs/protocol.md\fR in the source tree. Clients: \fBbrig run \-\-server\fR, \fBbrig session\fR, and in the source tree \fIclients/python\fR and \fIclients/node\fR.
"#;

const VERDICT: &str = r#".SH VERDICT
\fBbrig run \-\-report\fR \fIFILE\fR or \fB\-\-report\-fd\fR \fIN\fR writes one JSON object when the run ends, also for setup errors. Schema \fBbrig\-verdict/1\fR; a key's meaning never changes within a schema version, and new keys may be added.
.TP
\fBschema\fR
"brig\-verdict/1"
.TP
\fBstatus\fR
ok, nonzero_exit, signaled, seccomp (the profile killed it), timeout, cpu_time, oom, output_limit, net_limit (\-\-net\-bytes or \-\-net\-connections was reached; the program ran to its end) or setup_error
.TP
\fBbrig_exit_code\fR
brig's exit status for this run (see \fBbrig\fR(1))
.TP
\fBexit_code\fR, \fBsignal\fR
the program's exit status, or the signal that ended it; null when not applicable
.TP
\fBwall_ms\fR, \fBcpu_user_ms\fR, \fBcpu_sys_ms\fR
wall-clock time of the jail, and the CPU time of all its processes
.TP
\fBmax_rss_kib\fR
the largest resident set of any process in the jail, also of those brig killed
.TP
\fBmemory_peak_bytes\fR, \fBoom_kills\fR, \fBpids_peak\fR
from the jail's cgroup; null without one, or where the kernel lacks the counter
.TP
\fBstdout_bytes\fR, \fBstderr_bytes\fR, \fBoutput_truncated\fR
what the program wrote, counted with \fB\-\-output\-limit\fR only (null otherwise)
.TP
\fBwarm\fR
true when \fBbrig serve \-\-warm\-python\fR or \fB\-\-warm\-node\fR ran the program in an interpreter started before the request; \fBwall_ms\fR and the CPU times are then the request's own
.TP
\fBsession\fR, \fBlanguage\fR
only in a session's exec (\fBbrig session exec\fR): the session's id, and \fBpython\fR or \fBnode\fR for a cell; the cgroup counters are then the session's, \fBoom_kills\fR the exec's own
.TP
\fBlimits\fR
the effective limits: time_limit_ms, cpu_time_ms, memory_bytes, pids, cpus, cgroup_enforced, output_limit_bytes, tmpfs_size_bytes, rlimits (name, soft, hard)
.TP
\fBprotections\fR
what was enforced: namespaces, cgroup (v1, v2 or null), rootless, host_identity (mode: per-jail, shared or caller; the host uid and gid the jail's user mapped to), net, capabilities, no_new_privs, landlock_abi, seccomp_profile, and rootfs: null for the host's /usr, else path and digest (the one \fBbrig rootfs build\fR recorded, null for a root without one)
.TP
\fBwarnings\fR
things a reviewer should know, e.g. \-\-net host, or limits not enforced
.TP
\fBerror\fR
for setup_error: the one-line message brig printed
.TP
\fBexplanation\fR
why brig or the kernel ended the run (a limit reached, a seccomp kill, a program that could not run), the line brig prints on stderr as \fBbrig: ...\fR on every path (brig run, brig run \-\-server, brig session exec); null when the program ended by itself
.TP
\fBunenforced\fR
a default limit this host could not enforce and how to get it, the other line brig prints on stderr; null with \-\-quiet\-limits (the client's or the server's) or \-\-memory max
.TP
\fBerror_kind\fR, \fBerror_stage\fR
for setup_error: whose fault it was (bad_input, host_lacks, setup_failed, exec_failed, busy: a server's refusal for now, to retry later, or not_found: a server's session that is gone) and the step that failed (cgroup, namespaces, id_maps, cgroup_join, identity, descriptors, isolation, mounts, spawn, rlimits, capabilities, no_new_privs, chdir, landlock, seccomp, init, exec), null when not known
.TP
\fBnetwork\fR
null unless \-\-net filtered; then \fBrules\fR and \fBhosts\fR (the \-\-allow\-net rules and \-\-add\-host pins), \fBconnections\fR (one entry per destination and outcome: \fBname\fR, \fBport\fR, \fBaddress\fR brig connected to or refused, \fBallowed\fR, \fBreason\fR for a refusal or a cut, \fBconnections\fR, \fBbytes_sent\fR, \fBbytes_received\fR), \fBlookups\fR (\fBname\fR, \fBanswer\fR: the synthetic address, null for NXDOMAIN, \fBcount\fR), \fBdropped\fR (\fBprotocol\fR, \fBaddress\fR, \fBport\fR, \fBpackets\fR: UDP other than DNS, ICMP, IPv4 fragments, other protocols), \fBbytes_sent\fR, \fBbytes_received\fR, \fBlimit_reached\fR (net\-bytes, net\-connections or null) and \fBsecret_placeholders\fR (\-\-secret: one line per secret whose placeholder went, unchanged, to a host not entitled to it; never a value)
.PP
\fB\-\-audit\-log\fR \fIFILE\fR appends one JSON line per run: \fBtime\fR (UTC, RFC 3339), \fBuid\fR and \fBpid\fR (the caller), \fBargv\fR, \fBconfig_digest\fR (SHA-256 of the resolved plan) and \fBverdict\fR. A server's line is its client's: \fBuid\fR and \fBpid\fR from SO_PEERCRED (and \fBpeer\fR, with its gid), \fBargv\fR the program it ran (a session cell: its language and code), at most 64 arguments of 1 KiB.
.SH SEE ALSO
\fBbrig\fR(1)
"#;

/// brig-config(5): every YAML key, from the options of `brig run`.
pub fn render_config5() -> String {
    let command = crate::cli::built_whole::<Cli>();
    let run = command.find_subcommand("run").expect("run subcommand");
    let mut text = String::from(CONFIG_HEAD);
    for arg in run.get_arguments() {
        let id = arg.get_id().as_str();
        // `--config` names the file itself; help is not an option of the jail.
        if id == "config" || id == "help" {
            continue;
        }
        let key = match arg.get_long() {
            Some(long) => long.to_string(),
            None => id.to_string(),
        };
        let value_name = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map(|name| name.to_string())
            .unwrap_or_else(|| "VALUE".into());
        let kind = match arg.get_action() {
            ArgAction::SetTrue => "true or false".to_string(),
            ArgAction::Append => format!("list of \\fI{}\\fR", roff(&value_name)),
            _ if id == "command" => "list of strings, the program and its arguments".into(),
            _ => format!("\\fI{}\\fR", roff(&value_name)),
        };
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|help| help.to_string())
            .unwrap_or_default();
        let mut help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        if !help.ends_with('.') {
            help.push('.');
        }
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|value| !value.is_hide_set())
            .map(|value| value.get_name().to_string())
            .collect();
        let mut line = roff(&help);
        if !values.is_empty() {
            line.push_str(&format!(" One of: {}.", values.join(", ")));
        }
        if arg.get_long().is_some() {
            line.push_str(&format!(" (\\fB\\-\\-{}\\fR)", roff(&key)));
        }
        text.push_str(&format!(".TP\n\\fB{}\\fR: {kind}\n{line}\n", roff(&key)));
    }
    text.push_str(CONFIG_EXAMPLE);
    text.push_str(MANIFEST);
    text.push_str(PROTOCOL);
    text.push_str(VERDICT);
    text
}

fn check_page(name: &str, fresh: &str) {
    let path = format!("{}/man/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("BRIG_UPDATE_MAN").is_some() {
        std::fs::write(&path, fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "man/{name} is stale: run `BRIG_UPDATE_MAN=1 cargo test man_page` and commit it"
    );
}

#[test]
fn man_pages_are_current() {
    check_page("brig.1", &render_brig1());
    check_page("brig-config.5", &render_config5());
}

/// Only the commands that run a program take one: `serve` and `session create` take the run
/// options, not a PROGRAM.
#[test]
fn man_page_synopsis_gives_a_program_only_to_what_runs_one() {
    let page = render_brig1();
    let synopsis = |command: &str| {
        let start = format!("\\fBbrig {command}\\fR");
        page.lines()
            .find(|line| line.starts_with(&start))
            .unwrap_or_else(|| panic!("brig(1) has no line for brig {command}"))
            .to_string()
    };
    for command in ["run", "check", "session exec"] {
        assert!(
            synopsis(command).contains("PROGRAM"),
            "{}",
            synopsis(command)
        );
    }
    for command in ["serve", "session create"] {
        assert!(
            !synopsis(command).contains("PROGRAM"),
            "{}",
            synopsis(command)
        );
    }
}

/// The keys serde lists in "unknown field `x`, expected one of a, b, c (at ...)".
#[cfg(test)]
fn expected_keys(message: &str) -> Vec<String> {
    let list = message.split("expected one of ").nth(1).unwrap_or("");
    let list = list.split(" (at").next().unwrap_or("");
    list.split(", ")
        .map(|key| key.trim_matches('`').to_string())
        .filter(|key| !key.is_empty())
        .collect()
}

#[test]
fn man_page_config_lists_every_key() {
    // Every key serde accepts is on the page, and nothing else is called a key.
    let err = crate::config::parse("no-such-key: 1\n", "t").unwrap_err();
    let keys = expected_keys(err.message());
    assert!(keys.len() > 20, "{}", err.message());
    let page = render_config5();
    for key in keys {
        assert!(
            page.contains(&format!(".TP\n\\fB{}\\fR:", roff(&key))),
            "brig-config(5) lacks the key {key}"
        );
    }
}

#[test]
fn man_page_lists_every_manifest_key() {
    let err = brig_rootfs::check_manifest("no-such-key: 1\n").unwrap_err();
    let keys = expected_keys(&err);
    assert!(keys.len() >= 9, "{err}");
    let page = render_config5();
    for key in keys {
        assert!(
            page.contains(&format!(".TP\n\\fB{}\\fR:", roff(&key))),
            "brig-config(5) lacks the manifest key {key}"
        );
    }
}

#[test]
fn man_pages_render_without_warnings() {
    for name in ["brig.1", "brig-config.5"] {
        let path = format!("{}/man/{name}", env!("CARGO_MANIFEST_DIR"));
        let output = match std::process::Command::new("man")
            .args(["--warnings", "-l", &path])
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .stdin(std::process::Stdio::null())
            .output()
        {
            Ok(output) => output,
            // Like the integration tests: a missing prerequisite fails, unless the run
            // allows skips (then tests/run.sh lists it).
            Err(err) if std::env::var_os("BRIG_TEST_ALLOW_SKIP").is_some_and(|v| v == "1") => {
                eprintln!("SKIPPED: man is not installed ({err}); not rendering {name}");
                if let Some(dir) = std::env::var_os("BRIG_TEST_SKIP_DIR") {
                    let _ = std::fs::create_dir_all(&dir);
                    let line =
                        "manpage::man_pages_render_without_warnings: the program `man` is missing
";
                    let path = std::path::Path::new(&dir)
                        .join(format!("brig-unit.{}", std::process::id()));
                    let _ = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()));
                }
                return;
            }
            Err(err) => {
                panic!(
                    "man is not installed ({err}); tests/run.sh installs it (Debian package man-db); BRIG_TEST_ALLOW_SKIP=1 skips this test instead"
                );
            }
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "man -l {name}: {stderr}");
        assert!(
            stderr.trim().is_empty(),
            "man --warnings -l {name}:\n{stderr}"
        );
        assert!(
            output.stdout.len() > 1000,
            "man -l {name} printed almost nothing"
        );
    }
}
