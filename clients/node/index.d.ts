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
