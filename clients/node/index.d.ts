export const PROTOCOL_VERSION: 1;

export class BrigError extends Error {
  kind: "bad_input" | "host_lacks" | "setup_failed" | "exec_failed" | "busy";
  exitCode: number;
  /** The server refused for now (kind `busy`: full or draining); nothing ran, send it again later. */
  readonly retryable: boolean;
}

export interface RunResult {
  exitCode: number;
  status: string;
  verdict: Record<string, unknown>;
  stdout: string;
  stderr: string;
  configDigest: string;
}

export function run(
  argv: string[],
  options?: { socket?: string; options?: Record<string, unknown>; stdin?: string; timeoutMs?: number },
): Promise<RunResult>;

export function status(options?: { socket?: string; timeoutMs?: number }): Promise<Record<string, unknown>>;

/** A duration: a string such as "5s", "1500ms", "10m", "1h", or a number of seconds. */
export type Duration = string | number;

export interface ExecutionError {
  type: string;
  message: string;
  traceback: string;
}

export interface Execution {
  stdout: string;
  stderr: string;
  /** The representation of the cell's final expression; null after a statement. */
  result: string | null;
  error: ExecutionError | null;
  verdict: Record<string, unknown>;
  /** The interpreter was restarted (time limit, out of memory): its globals are gone. */
  stateLost: boolean;
  /** Why the state was lost (the interpreter died, or broke the protocol); null otherwise. */
  stateLostReason: string | null;
  ok: boolean;
}

export interface CommandResult {
  /** As `brig run` would exit: the program's status; 124 timeout, 128+N signal N, 127 not found. */
  exitCode: number;
  stdout: string;
  stderr: string;
  verdict: Record<string, unknown>;
}

export interface EntryInfo {
  name: string;
  /** Relative to the workspace. */
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  /** As the jail sees them. */
  uid: number;
  gid: number;
  /** Seconds since the epoch. */
  modifiedTime: number;
  symlinkTarget?: string;
}

export interface SessionInfo {
  session: string;
  uid: number;
  metadata: Record<string, string>;
  state: "idle" | "busy";
  /** Milliseconds since the Unix epoch. */
  created_at_ms: number;
  ends_at_ms: number;
  /** null while busy. */
  idle_deadline_ms: number | null;
  limits: {
    memory: number | null;
    pids: number | null;
    cpus: number | null;
    workspace_size: number;
    idle_timeout_ms: number;
    net: "none" | "host" | "filtered";
  };
  age_ms: number;
  idle_ms: number;
  requests: number;
}

export interface FilesystemEvent {
  /** Relative to the workspace. */
  name: string;
  type: "create" | "write" | "remove" | "rename" | "chmod";
}

export interface WatchHandle {
  readonly watcher: string;
  /** Whether the last getNewEvents() lost events (more than the server holds between calls). */
  readonly overflowed: boolean;
  getNewEvents(): Promise<FilesystemEvent[]>;
  stop(): Promise<void>;
}

export interface Files {
  write(path: string, data: string | Uint8Array | ArrayBuffer): Promise<number>;
  write(path: string, data: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, options?: { size?: number }): Promise<number>;
  read(path: string, options?: { format?: "text" }): Promise<string>;
  read(path: string, options: { format: "bytes" }): Promise<Buffer>;
  read(path: string, options: { format: "stream" }): Promise<AsyncIterable<Buffer>>;
  list(path?: string, options?: { depth?: number }): Promise<EntryInfo[]>;
  getInfo(path: string): Promise<EntryInfo>;
  stat(path: string): Promise<EntryInfo>;
  exists(path: string): Promise<boolean>;
  makeDir(path: string, options?: { parents?: boolean }): Promise<boolean>;
  rename(oldPath: string, newPath: string): Promise<EntryInfo>;
  remove(path: string): Promise<void>;
  watchDir(path: string, options?: { recursive?: boolean }): Promise<WatchHandle>;
}

/** Called with each piece of output as it is produced (bytes that are not UTF-8 decoded with U+FFFD). */
export type OutputCallback = (text: string) => void;

export interface RunOptions {
  stdin?: string;
  timeout?: Duration;
  env?: Record<string, string> | string[];
  cwd?: string;
  outputLimit?: string;
  onStdout?: OutputCallback;
  onStderr?: OutputCallback;
}

export interface ProcessInfo {
  /** Its pid in the jail (as `$$` shows it there). */
  pid: number;
  tag: string | null;
  command: string[];
  background: boolean;
  running: boolean;
  /** Once it has ended: {status, exit_code, signal} of its verdict. */
  status: { status: string; exit_code: number | null; signal: number | null } | null;
  started_unix_ms: number;
  /** Output bytes its backlog (the latest 1 MiB) no longer holds. */
  backlog_dropped: number;
  /** The variables its start set (`K=V`), on top of the session's. */
  env: string[];
  /** Its working directory in the jail. */
  cwd: string;
}

export class CommandHandle {
  readonly pid: number;
  readonly tag: string | null;
  wait(options?: { onStdout?: OutputCallback; onStderr?: OutputCallback }): Promise<CommandResult>;
  kill(): Promise<void>;
  signal(signal: string | number): Promise<void>;
  sendStdin(data: string): Promise<void>;
  closeStdin(): Promise<void>;
}

export interface Commands {
  run(cmd: string | string[], options: RunOptions & { background: true; tag?: string }): Promise<CommandHandle>;
  run(cmd: string | string[], options?: RunOptions & { background?: false }): Promise<CommandResult>;
  list(): Promise<ProcessInfo[]>;
  connect(pid: number | null, options?: { tag?: string }): Promise<CommandHandle>;
  kill(pid: number): Promise<void>;
  signal(pid: number, signal: string | number): Promise<void>;
  sendStdin(pid: number, data: string): Promise<void>;
  closeStdin(pid: number): Promise<void>;
}

export class Sandbox {
  readonly sessionId: string;
  readonly socket: string;
  readonly workspace: string;
  readonly files: Files;
  readonly commands: Commands;
  static create(options?: {
    socket?: string;
    options?: Record<string, unknown>;
    sessionTimeout?: Duration;
    idleTimeout?: Duration;
    workspaceSize?: string;
    metadata?: Record<string, string>;
    /** Keys the sandbox uses without seeing them: `value`, or `env` read from process.env. */
    secrets?: Array<{ name: string; value?: string; env?: string; hosts: string[] }>;
    timeoutMs?: number;
  }): Promise<Sandbox>;
  static connect(sessionId: string, options?: { socket?: string; timeoutMs?: number }): Promise<Sandbox>;
  runCode(
    code: string,
    options?: {
      language?: "python" | "node";
      timeout?: Duration;
      outputLimit?: string;
      onStdout?: OutputCallback;
      onStderr?: OutputCallback;
    },
  ): Promise<Execution>;
  /** Replaces a `--net filtered` session's rules; resolves to the connections cut. */
  setNetwork(options?: { allowNet?: string[]; addHost?: string[] }): Promise<number>;
  /** The session ends `timeout` from now (at most the server's --session-timeout). */
  setTimeout(timeout: Duration): Promise<void>;
  /** A connection to `port` of the session's loopback, through `brig session dial`. */
  dial(port: number, options?: { brig?: string }): import("stream").Duplex;
  /** Freezes every process of the session (the cgroup freezer); true if it was paused already. */
  pause(): Promise<boolean>;
  /** Lets a paused session's processes run on; its end moved by the pause. */
  resume(): Promise<{ already: boolean; paused_ms: number; ends_at_ms: number }>;
  /** The session's resource use now. */
  stats(): Promise<{
    session: string;
    state: "running" | "paused";
    at_ms: number;
    cpus: number;
    cpu_usec: number | null;
    cpu_percent: number;
    memory_bytes: number | null;
    memory_cache_bytes: number | null;
    memory_limit: number | null;
    workspace_used: number;
    workspace_size: number;
  }>;
  close(): Promise<void>;
}

export function listSessions(options?: {
  socket?: string;
  metadata?: Record<string, string>;
  timeoutMs?: number;
}): Promise<SessionInfo[]>;
