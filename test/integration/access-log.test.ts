// The access log of streamed operations, as an operator reads it: over WebSocket
// a line per operation when it ends (its name, type, duration, how it ended,
// its error codes, the close code when the socket's close ended it) and a line
// per socket when it closes, with the upgrade's request id; over server-sent
// events the request's own line says how the stream ended. And the real
// process's last line when it has stopped.
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { deliveryInput, makeDataDir, startStack, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const root = new URL('../..', import.meta.url).pathname;
const BOOK = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const FOLLOW = `subscription Follow($uid: ID!) { deliveryUpdated(uid: $uid) { name status } }`;

type Line = Record<string, any>;
let stack: Stack;
const lines: Line[] = [];

beforeAll(async () => {
  const logger = createLogger('info', { write: (text: string) => void lines.push(JSON.parse(text) as Line) });
  // Steps slow enough that a subscriber is live before the delivery moves, fast enough that it ends in a second.
  stack = await startStack({ logger, sandbox: { knobs: { stepMs: 60 } } });
});
afterAll(async () => {
  await stack?.stop();
});

async function book(): Promise<string> {
  return (await stack.gql(BOOK, { input: deliveryInput() })).data.createDelivery.data.uid as string;
}

const linesOf = (message: string, reqId?: string) =>
  lines.filter((line) => line.msg === message && (reqId === undefined || line.reqId === reqId));

/** The request id of the last upgrade logged. */
const lastUpgrade = () => linesOf('upgrade').at(-1)!.reqId as string;

describe('over WebSocket', () => {
  it('logs each operation as it ends and the socket as it closes, with the upgrade’s request id', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key, { lazy: false });
    // Ended by the server: the delivery reaches its final state.
    const followed = collect(client, FOLLOW, { uid });
    await followed.done;
    expect(followed.completed).toBe(true);
    const reqId = lastUpgrade();
    // Refused: a delivery the key cannot see; a document that does not parse.
    const refused = collect(client, FOLLOW, { uid: '00000000-0000-4000-8000-000000000000' });
    await refused.done;
    const unparsed = collect(client, 'subscription {');
    await unparsed.done;
    // Stopped by the client.
    const other = await book();
    const stopped = collect(client, FOLLOW, { uid: other });
    await stopped.waitFor(1);
    stopped.dispose();
    await waitUntil(() => linesOf('operation', reqId).length === 4, 'four operation lines');
    // A query, and then the socket closes.
    const read = collect(client, 'query Read($uid: ID!) { delivery(uid: $uid) { status } }', { uid });
    await read.done;
    await client.dispose();
    await waitUntil(() => linesOf('websocket closed', reqId).length === 1, 'the socket line');

    const operations = linesOf('operation', reqId);
    if (process.env.SHOW_LINES)
      console.log(
        [...linesOf('upgrade', reqId), ...operations, ...linesOf('websocket closed', reqId)]
          .map((l) => JSON.stringify(l))
          .join('\n'),
      );
    expect(operations.map((line) => [line.operation, line.operationType, line.result])).toEqual([
      ['Follow', 'subscription', 'complete'],
      ['Follow', 'subscription', 'error'],
      [null, undefined, 'error'],
      ['Follow', 'subscription', 'stopped'],
      ['Read', 'query', 'complete'],
    ]);
    expect(operations[1]!.errorCodes).toEqual(['NOT_FOUND']);
    expect(operations[2]!.errorCodes).toEqual(['GRAPHQL_PARSE_FAILED']);
    for (const line of operations) {
      expect(line).toMatchObject({ level: 30, transport: 'websocket', id: expect.any(String) });
      expect(line.durationMs).toBeGreaterThanOrEqual(0);
    }
    // The stream that followed the delivery to its end ran for as long as that took.
    expect(operations[0]!.durationMs).toBeGreaterThan(operations[4]!.durationMs);
    expect(linesOf('websocket closed', reqId)).toEqual([
      expect.objectContaining({
        transport: 'websocket',
        path: '/graphql',
        operations: 5,
        closeCode: 1000,
        durationMs: expect.any(Number),
      }),
    ]);
  });

  it('an operation its socket’s close ended says so, with the close code; a socket refused at init logs its code', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key, { lazy: false });
    const followed = collect(client, FOLLOW, { uid });
    await followed.waitFor(1);
    const reqId = lastUpgrade();
    await client.dispose();
    await waitUntil(() => linesOf('websocket closed', reqId).length === 1, 'the socket line');
    expect(linesOf('operation', reqId)).toEqual([
      expect.objectContaining({ operation: 'Follow', result: 'closed', closeCode: 1000 }),
    ]);

    const keyless = wsClient(stack.app.url, undefined, { lazy: false });
    const refused = collect(keyless, '{ __typename }');
    await refused.done;
    const refusedId = lastUpgrade();
    await waitUntil(() => linesOf('websocket closed', refusedId).length === 1, 'the refused socket line');
    expect(linesOf('websocket closed', refusedId)[0]).toMatchObject({
      operations: 0,
      closeCode: 4403,
      closeReason: 'no merchant key or client token in connection_init',
    });
    await keyless.dispose();
  });
});

describe('over server-sent events', () => {
  async function follow(uid: string): Promise<{ reqId: string; text: string }> {
    const response = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${stack.key}`,
      },
      body: JSON.stringify({ query: FOLLOW, variables: { uid } }),
    });
    return { reqId: response.headers.get('x-request-id')!, text: await response.text() };
  }

  it('the request’s line says whether the stream was ended by the server or closed by the client', async () => {
    const { reqId, text } = await follow(await book());
    expect(text).toContain('DROPOFF_COMPLETE');
    await waitUntil(() => linesOf('request', reqId).length === 1, 'the request line');
    expect(linesOf('request', reqId)[0]).toMatchObject({
      operation: 'Follow',
      operationType: 'subscription',
      status: 200,
      result: 'complete',
    });

    // Closed by the client once its first event has come.
    const gone = new AbortController();
    const response = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${stack.key}`,
      },
      body: JSON.stringify({ query: FOLLOW, variables: { uid: await book() } }),
      signal: gone.signal,
    });
    const abortedId = response.headers.get('x-request-id')!;
    const reader = response.body!.getReader();
    let seen = '';
    while (!seen.includes('event: next')) seen += new TextDecoder().decode((await reader.read()).value);
    gone.abort();
    await waitUntil(() => linesOf('request', abortedId).length === 1, 'the aborted request line');
    if (process.env.SHOW_LINES)
      console.log(
        [...linesOf('request', reqId), ...linesOf('request', abortedId)].map((l) => JSON.stringify(l)).join('\n'),
      );
    expect(linesOf('request', abortedId)[0]).toMatchObject({
      operation: 'Follow',
      operationType: 'subscription',
      result: 'closed',
      aborted: true,
    });
  });
});

describe('the process', () => {
  it('writes a last line once it has stopped', async () => {
    const dataDir = makeDataDir();
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      await waitUntil(() => /serving on http/.test(stderr), 'serving', 20_000);
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      expect(await exited, `${child.signalCode} ${stdout.slice(-1500)}`).toBe(0);
      const logged = stdout
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Line);
      expect(logged.find((line) => line.msg === 'stopping')).toMatchObject({ signal: 'SIGTERM' });
      expect(logged.at(-1)).toMatchObject({ level: 30, msg: 'stopped', signal: 'SIGTERM', exitCode: 0 });
      expect(logged.at(-1)!.durationMs).toBeGreaterThanOrEqual(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 40_000);
});
