#!/usr/bin/env node
// Calling brig from Node: run code in a jail and read the verdict.
//
//     BRIG=/usr/local/bin/brig node node_client.js 'console.log(6 * 7)'
//
// The child's descriptor 3 is a pipe (stdio[3]); `--report-fd 3` makes brig write its
// verdict (one JSON object, schema brig-verdict/1) there when the run ends. stdout and
// stderr of the program arrive on their own pipes. Prints one JSON object: the exit
// status, the verdict's status and times, and what the program printed.
'use strict';

const { spawn } = require('child_process');

function runInJail(code, { brig = process.env.BRIG || 'brig', timeLimit = '10s' } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(brig, [
      'run', '--profile', 'node',
      '--time-limit', timeLimit,
      '--output-limit', '1M',
      '--report-fd', '3',
      '--', 'node', '-e', code,
    ], { stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
    const collect = (stream) => {
      const chunks = [];
      stream.on('data', (chunk) => chunks.push(chunk));
      return () => Buffer.concat(chunks).toString('utf8');
    };
    const stdout = collect(child.stdout);
    const stderr = collect(child.stderr);
    const report = collect(child.stdio[3]);
    child.on('error', reject);
    // 'close' comes after every stdio stream ended, so the verdict is complete.
    child.on('close', (status, signal) => {
      try {
        resolve({ status, signal, stdout: stdout(), stderr: stderr(), verdict: JSON.parse(report()) });
      } catch (err) {
        reject(new Error(`no verdict from brig (exit ${status}): ${stderr()}`));
      }
    });
  });
}

async function main() {
  const code = process.argv[2] || 'console.log("hello from the jail")';
  const timeLimit = process.argv[3] || '10s';
  const { status, stdout, stderr, verdict } = await runInJail(code, { timeLimit });
  console.log(JSON.stringify({
    exit: status,
    status: verdict.status,
    exit_code: verdict.exit_code,
    signal: verdict.signal,
    wall_ms: verdict.wall_ms,
    stdout,
    stderr,
    schema: verdict.schema,
  }));
}

main().catch((err) => {
  console.error(`node_client: ${err.message}`);
  process.exit(1);
});
