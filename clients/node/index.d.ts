export const PROTOCOL_VERSION: 1;

export class BrigError extends Error {
  kind: "bad_input" | "host_lacks" | "setup_failed" | "exec_failed";
  exitCode: number;
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
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
}

export interface SessionInfo {
  session: string;
  uid: number;
  age_ms: number;
  idle_ms: number;
  execs: number;
}

export interface Files {
  write(path: string, data: string | Uint8Array): Promise<number>;
  read(path: string, options?: { format?: "text" }): Promise<string>;
  read(path: string, options: { format: "bytes" }): Promise<Buffer>;
  list(path?: string): Promise<EntryInfo[]>;
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
  close(): Promise<void>;
}

export function listSessions(options?: { socket?: string; timeoutMs?: number }): Promise<SessionInfo[]>;
