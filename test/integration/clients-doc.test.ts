// docs/clients.md as a reader runs it: each of its examples is a file of
// examples/clients/, shown whole on the page (checked here byte for byte), and
// run here as it is, with node, against a real facade whose sandbox has the
// demo merchant the files name: from the repository, as the page's first
// command does, and copied into an `npm init -y` project of its own, as its
// second does. A preload records what each run's fetch sent, to show APQ on the
// wire and that subscriptions took the WebSocket. The Apollo example's
// possibleTypes are checked against the schema's implementations of Error.
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildSchema, type GraphQLInterfaceType } from 'graphql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_MERCHANTS } from '@delivery-graph/sandbox';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const root = new URL('../..', import.meta.url).pathname;
const examples = join(root, 'examples/clients');
const page = readFileSync(join(root, 'docs/clients.md'), 'utf8');

/** The page's example blocks, by the file each names in its fence: ```js examples/clients/<file>. */
function shown(): Map<string, string> {
  return new Map(
    [...page.matchAll(/^```js (examples\/clients\/[\w.-]+)\n([\s\S]*?)^```$/gm)].map((match) => [match[1]!, match[2]!]),
  );
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
  // The sandbox's demo merchants, whose key the examples name, as npm start's sandbox has them.
  stack = await startStack({ sandbox: { merchants: DEMO_MERCHANTS, knobs: { stepMs: 30 } } });
  dir = mkdtempSync(join(tmpdir(), 'delivery-graph-clients-'));
  writeFileSync(join(dir, 'record-fetch.mjs'), RECORD_FETCH);
});
afterAll(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `node <file> ...args` in `cwd` against the stack (PORT), as the page's commands do. */
async function run(file: string, args: string[] = [], cwd = root): Promise<Run> {
  const child = spawn(process.execPath, ['--import', join(dir, 'record-fetch.mjs'), file, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '', PORT: String(stack.app.port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code, stdout, stderr };
}

function wire(stderr: string): Array<{ method: string; text: boolean; hash: boolean }> {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('wire '))
    .map((line) => JSON.parse(line.slice(5)));
}

/** `<prefix> <STATUS>` lines: each state the subscription reported, in order. */
const updates = (stdout: string, prefix: string) =>
  stdout
    .split('\n')
    .filter((line) => line.startsWith(`${prefix} `))
    .map((line) => line.slice(prefix.length + 1));

describe('docs/clients.md', () => {
  it('shows every file of examples/clients/ whole, and nothing else as an example', () => {
    const files = readdirSync(examples).filter((name) => name.endsWith('.mjs'));
    expect([...shown().keys()].sort()).toEqual(files.map((name) => `examples/clients/${name}`).sort());
    for (const [file, code] of shown()) expect(code, file).toBe(readFileSync(join(root, file), 'utf8'));
  });

  it("lists in the Apollo example's possibleTypes every type that implements Error, as the schema has them", () => {
    const schema = buildSchema(readFileSync(join(root, 'schema.graphql'), 'utf8'));
    const implementing = schema
      .getPossibleTypes(schema.getType('Error') as GraphQLInterfaceType)
      .map((type) => type.name)
      .sort();
    const listed = /possibleTypes: \{\s*Error: \[([^\]]*)\]/.exec(readFileSync(join(examples, 'apollo.mjs'), 'utf8'));
    expect(listed, 'apollo.mjs has possibleTypes: { Error: [...] }').not.toBeNull();
    expect([...listed![1]!.matchAll(/'(\w+)'/g)].map((match) => match[1]).sort()).toEqual(implementing);
    expect(implementing).toContain('CancelRefusedError');
  });

  it('errors.mjs shows that a mutation selecting only its success type answers {} for invalid input', async () => {
    const { code, stdout, stderr } = await run('examples/clients/errors.mjs');
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('success only: {"data":{"createDelivery":{}}}');
    expect(stdout).toMatch(
      /with Error: +\{"data":\{"createDelivery":\{"code":"VALIDATION_FAILED","message":"[^"]+"\}\}\}/,
    );
    // And what the page prints is what the file prints.
    expect(page).toContain('success only: {"data":{"createDelivery":{}}}');
  }, 30_000);

  it('apollo.mjs books and reads over HTTP, each operation first by hash alone, and follows the delivery over GraphQLWsLink to its end', async () => {
    const { code, stdout, stderr } = await run('examples/clients/apollo.mjs');
    expect(code, stderr).toBe(0);
    expect(stdout).toMatch(/^apollo read [0-9a-f-]{36} [A-Z_]+$/m);
    const statuses = updates(stdout, 'apollo update');
    expect(statuses.length).toBeGreaterThan(1);
    expect(statuses.at(-1)).toBe('DROPOFF_COMPLETE');
    // Two operations over HTTP, each: hash alone, PersistedQueryNotFound, then hash with text. The subscription sent
    // nothing through fetch: it went over the WebSocket.
    expect(wire(stderr)).toEqual([
      { method: 'POST', text: false, hash: true },
      { method: 'POST', text: true, hash: true },
      { method: 'POST', text: false, hash: true },
      { method: 'POST', text: true, hash: true },
    ]);
  }, 30_000);

  it('urql.mjs reads availability and books over fetchExchange, and follows the delivery over subscriptionExchange to its end', async () => {
    const { code, stdout, stderr } = await run('examples/clients/urql.mjs');
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('urql availability PLATFORM true');
    expect(stdout).toContain('urql availability PARTNER true');
    const statuses = updates(stdout, 'urql update');
    expect(statuses.length).toBeGreaterThan(1);
    expect(statuses.at(-1)).toBe('DROPOFF_COMPLETE');
    // The query and the mutation; the subscription took the WebSocket.
    expect(wire(stderr)).toHaveLength(2);
  }, 30_000);

  it('sse.mjs follows a delivery to its end', async () => {
    const booked = await stack.gql(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const uid = booked.data.createDelivery.data.uid as string;
    const { code, stdout, stderr } = await run('examples/clients/sse.mjs', [uid]);
    expect(code, stderr).toBe(0);
    // The file starts in a process of its own, by when the sandbox (30 ms a step) may have moved the delivery on: it
    // sees the state it finds first, then each later one, and the stream ends at the last.
    expect(updates(stdout, 'sse').at(-1)).toBe('DROPOFF_COMPLETE');
  }, 30_000);

  it('each runs copied into an `npm init -y` project (CommonJS by default), as the page says', async () => {
    const project = mkdtempSync(join(tmpdir(), 'try-delivery-graph-'));
    try {
      // What `npm init -y` writes, and the packages the page's npm install brings (here, the repository's).
      writeFileSync(
        join(project, 'package.json'),
        JSON.stringify({ name: 'try-delivery-graph', version: '1.0.0', main: 'index.js', license: 'ISC' }, null, 2),
      );
      symlinkSync(join(root, 'node_modules'), join(project, 'node_modules'), 'dir');
      for (const file of ['apollo.mjs', 'urql.mjs']) {
        copyFileSync(join(examples, file), join(project, file));
        const { code, stdout, stderr } = await run(file, [], project);
        expect(code, `${file}: ${stderr}`).toBe(0);
        expect(updates(stdout, `${file.slice(0, -4)} update`).at(-1), file).toBe('DROPOFF_COMPLETE');
      }
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  }, 60_000);
});
