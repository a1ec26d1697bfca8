// docs/clients.md as a reader runs it: every ```ts clients-test block, with the
// page's address and key swapped for a real stack's, run as its own Node process
// (node --import tsx) from the repository, so its imports resolve as a user's do.
// A preload records what each block's fetch sent, to show APQ on the wire.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const root = new URL('../..', import.meta.url).pathname;
const page = readFileSync(join(root, 'docs/clients.md'), 'utf8');

/** The page's tested blocks, by the heading they sit under. */
function blocks(): Map<string, string> {
  const found = new Map<string, string>();
  let heading = '';
  for (const part of page.split(/^(## .*)$/m)) {
    if (part.startsWith('## ')) heading = part.slice(3).trim();
    else for (const match of part.matchAll(/^```ts clients-test\n([\s\S]*?)^```$/gm)) found.set(heading, match[1]!);
  }
  return found;
}

/** Whether a package resolves from the repository, as a block's import would. */
function installed(name: string): boolean {
  try {
    createRequire(join(root, 'package.json')).resolve(name);
    return true;
  } catch {
    return false;
  }
}

// Writes one line to stderr per request: its method, whether it carried query text, whether a hash.
const RECORD_FETCH = `
const original = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const body = init?.body ? JSON.parse(String(init.body)) : {};
  process.stderr.write('wire ' + JSON.stringify({ method: init?.method ?? 'GET', text: typeof body.query === 'string', hash: Boolean(body.extensions?.persistedQuery) }) + '\\n');
  return original(input, init);
};
`;

let stack: Stack;
let dir: string;

beforeAll(async () => {
  stack = await startStack({ sandbox: { knobs: { stepMs: 30 } } });
  // Inside the repository, so bare imports resolve from its node_modules.
  dir = mkdtempSync(join(root, '.clients-doc-'));
  writeFileSync(join(dir, 'record-fetch.mjs'), RECORD_FETCH);
});
afterAll(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Runs the block under `heading` against the stack; resolves with its output. */
async function run(
  heading: string,
  args: string[] = [],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const code = blocks().get(heading);
  expect(code, `docs/clients.md has a clients-test block under "## ${heading}"`).toBeDefined();
  const file = join(dir, `${heading.replace(/\W+/g, '-')}.ts`);
  writeFileSync(file, code!.replaceAll('sk_test_demo_merchant', stack.key));
  // The blocks read the facade's port from PORT, as the README's Cookbook does.
  const child = spawn(process.execPath, ['--import', 'tsx', '--import', join(dir, 'record-fetch.mjs'), file, ...args], {
    cwd: root,
    env: { ...process.env, PORT: String(stack.app.port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exitCode = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code: exitCode, stdout, stderr };
}

function wire(stderr: string): Array<{ method: string; text: boolean; hash: boolean }> {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('wire '))
    .map((line) => JSON.parse(line.slice(5)));
}

describe('docs/clients.md', () => {
  it('has a tested block for each client', () => {
    expect([...blocks().keys()]).toEqual([
      'Select `... on Error` in every mutation',
      'Apollo Client, with automatic persisted queries',
      'urql',
      'graphql-sse (server-sent events)',
    ]);
  });

  it('shows that a mutation selecting only its success type answers {} for invalid input, and the error with ... on Error', async () => {
    const { code, stdout, stderr } = await run('Select `... on Error` in every mutation');
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('success only: {"data":{"createDelivery":{}}}');
    expect(stdout).toMatch(
      /with Error: +\{"data":\{"createDelivery":\{"code":"VALIDATION_FAILED","message":"[^"]+"\}\}\}/,
    );
    // And what the page prints is what the block prints.
    expect(page).toContain('success only: {"data":{"createDelivery":{}}}');
  }, 30_000);

  it('Apollo Client books and reads a delivery, each operation first by hash alone', async () => {
    const { code, stdout, stderr } = await run('Apollo Client, with automatic persisted queries');
    expect(code, stderr).toBe(0);
    expect(stdout).toMatch(/^apollo read [0-9a-f-]{36} [A-Z_]+$/m);
    // Two operations, each: hash alone, PersistedQueryNotFound, then hash with text.
    expect(wire(stderr)).toEqual([
      { method: 'POST', text: false, hash: true },
      { method: 'POST', text: true, hash: true },
      { method: 'POST', text: false, hash: true },
      { method: 'POST', text: true, hash: true },
    ]);
  }, 30_000);

  it('urql reads availability of both groups', async () => {
    const { code, stdout, stderr } = await run('urql');
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('urql availability PLATFORM true');
    expect(stdout).toContain('urql availability PARTNER true');
  }, 30_000);

  it.skipIf(!installed('graphql-sse'))(
    'graphql-sse follows a delivery to its end',
    async () => {
      const booked = await stack.gql(
        'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
        { input: deliveryInput() },
      );
      const uid = booked.data.createDelivery.data.uid as string;
      const { code, stdout, stderr } = await run('graphql-sse (server-sent events)', [uid]);
      expect(code, stderr).toBe(0);
      // The snippet starts in a process of its own, by when the sandbox (30 ms a step) may have moved the
      // delivery on: it sees the state it finds first, then each later one, and the stream ends at the last.
      const lines = stdout.trim().split('\n');
      expect(
        lines.every((line) => /^sse [A-Z_]+$/.test(line)),
        stdout,
      ).toBe(true);
      expect(lines.at(-1)).toBe('sse DROPOFF_COMPLETE');
    },
    30_000,
  );
});
