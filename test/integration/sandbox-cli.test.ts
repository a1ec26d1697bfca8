// `npm run sandbox`: the standalone sandbox in a child process, as a demo would
// start it, with the return path and request log flags.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';

const root = new URL('../..', import.meta.url).pathname;
const scratch = mkdtempSync(path.join(tmpdir(), 'sandbox-cli-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(args: string[]): { child: ChildProcess; output: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/sandbox/main.ts', ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  return { child, output: () => text };
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', (code) => resolve(code))));

/** Resolves with the first match of `pattern` in the child's output so far or to come. */
function waitFor(child: ChildProcess, output: () => string, pattern: RegExp): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const match = pattern.exec(output());
      if (match) {
        child.stdout!.off('data', check);
        child.off('exit', gone);
        resolve(match);
      }
    };
    const gone = () => reject(new Error(`exited before ${pattern}:\n${output()}`));
    child.stdout!.on('data', check);
    child.once('exit', gone);
    check();
  });
}

describe('npm run sandbox', () => {
  it('documents --return-rate, --request-log-size and the sandbox_outcome payload field in --help', async () => {
    const { child, output } = run(['--help']);
    expect(await exited(child)).toBe(0);
    for (const text of ['--return-rate <0..1>', '--request-log-size <n>', '"sandbox_outcome"', 'failed_then_returned', 'canceled_then_returned', 'delivery.return_in_progress']) {
      expect(output()).toContain(text);
    }
    expect(output()).toMatch(/--step-ms <n> +ms between lifecycle milestones; 0 = manual \(default 3000\)/);
  });

  it('starts with the return rate and log size it was given', async () => {
    const { child, output } = run(['--port', '0', '--return-rate', '0.25', '--request-log-size', '50', '--public-key-file', path.join(scratch, 'key.pem')]);
    try {
      const [, control] = await waitFor(child, output, /control:\s+(\S+)/);
      const info = (await (await fetch(control!)).json()) as { knobs: { returnRate: number; stepMs: number }; requestLogSize: number };
      expect(info.knobs.returnRate).toBe(0.25);
      expect(info.requestLogSize).toBe(50);
      // Alone or inside the facade (SANDBOX_STEP_MS unset), a milestone every 3 s.
      expect(info.knobs.stepMs).toBe(3000);
      expect(loadConfig({}).sandbox.stepMs).toBe(info.knobs.stepMs);
    } finally {
      child.kill('SIGTERM');
      await exited(child);
    }
  });

  it('refuses a return rate above 1 with a usage error', async () => {
    const { child, output } = run(['--port', '0', '--return-rate', '2', '--public-key-file', path.join(scratch, 'key.pem')]);
    expect(await exited(child)).toBe(2);
    expect(output()).toContain('returnRate must be between 0 and 1');
  });
});
