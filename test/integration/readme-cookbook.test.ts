// The README's cookbook, run as a newcomer pastes it: every ```sh block of the
// "Cookbook" section, in order, in one bash, against the real entry point started
// as `npm start` starts it (on free ports, which the blocks read from PORT and
// SANDBOX_PORT). A block that stops working fails this test.
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeDataDir } from '../helpers/stack.js';

const root = new URL('../..', import.meta.url).pathname;

/**
 * The ```sh blocks between `## Cookbook` and the next `## ` heading; a block that installs or starts something is left
 * out.
 */
function cookbookBlocks(): string[] {
  const readme = readFileSync(new URL('README.md', `file://${root}`), 'utf8');
  const start = readme.indexOf('\n## Cookbook\n');
  expect(start, 'the README has a "## Cookbook" section').toBeGreaterThan(-1);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)]
    .map((block) => block[1]!)
    .filter(
      (block) =>
        !block.split('\n').some((line) => !line.trim().startsWith('#') && /\bnpm (ci|start|install)\b/.test(line)),
    );
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe('the README cookbook', () => {
  const dataDir = makeDataDir();
  let server: ReturnType<typeof spawn>;
  let env: Record<string, string>;

  beforeAll(async () => {
    env = { PORT: String(await freePort()), SANDBOX_PORT: String(await freePort()) };
    server = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', DATA_DIR: dataDir, SANDBOX_RETURN_RATE: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    await new Promise<void>((resolve, reject) => {
      let output = '';
      const timer = setTimeout(() => reject(new Error(`npm start did not come up:\n${output}`)), 30_000);
      // The banner is on stderr (stdout is a pipe: JSON logs only).
      server.stderr!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('serving on')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  }, 40_000);

  afterAll(() => {
    server?.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('runs every block, in order, and each answers what it says', () => {
    const blocks = cookbookBlocks();
    expect(blocks.length).toBeGreaterThan(5);
    const script = ['set -euo pipefail', ...blocks].join('\n');
    const run = spawnSync('bash', ['-c', script], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env },
      encoding: 'utf8',
      timeout: 60_000,
    });
    const output = `${run.stdout}\n${run.stderr}`;
    expect(run.status, output).toBe(0);
    // No GraphQL error anywhere, and the steps the cookbook walks through all happened.
    expect(output).not.toContain('"errors"');
    expect(output).toContain('"available":true');
    expect(output).toMatch(/"fee":\{"amount":"\d+\.\d\d","currency":"[A-Z]{3}"\}/);
    expect(output).toMatch(/booked [0-9a-f-]{36}/);
    expect(output).toContain('the same booking');
    expect(output).toMatch(/"status":"CANCELED"/);
    expect(output).toMatch(/"partnerReference":"PO-/);
    // The customer's link is for a delivery still under way, not the one cancelled above.
    const live = /following ([0-9a-f-]{36})/.exec(output)?.[1];
    expect(live).toBeDefined();
    const read = new RegExp(`"delivery":\\{"uid":"${live}","status":"([A-Z_]+)"`).exec(output);
    expect(read?.[1]).toBeDefined();
    expect(['CANCELED', 'FAILED', 'RETURNED', 'DROPOFF_COMPLETE']).not.toContain(read![1]);
    expect(output).toMatch(/tracking link for the customer: http:\/\/127\.0\.0\.1:\d+\/#token=\S+/);
  }, 90_000);
});
