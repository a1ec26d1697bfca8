// The sandbox's world kept in a folder (startSandbox({ dataDir })): a sandbox
// started again on it goes on where the last one stood. Deliveries are read and
// move on, webhooks not yet sent go out, held ones stay held, a revoked key stays
// revoked, the signing key stays the same; one process holds a folder at a time.
// And the bound on the webhook histories a long-running sandbox keeps.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  DEMO_MERCHANTS,
  SandboxWorldInUseError,
  startSandbox,
  type Sandbox,
  type SandboxOptions,
} from '../src/index.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../../test/helpers/webhook-receiver.js';

const scratch = mkdtempSync(path.join(tmpdir(), 'sandbox-world-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
let folders = 0;
const folder = () => path.join(scratch, `world-${++folders}`);

const KEY = DEMO_MERCHANTS[0]!.key;
const QUIET = { stepMs: 0, locationTicks: 0, retryBaseMs: 10, webhookTimeoutMs: 1000 };
const running: Sandbox[] = [];
const receivers: WebhookReceiver[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((sandbox) => sandbox.stop()));
  await Promise.all(receivers.splice(0).map((receiver) => receiver.close()));
});

async function sandboxOn(dataDir: string, options: SandboxOptions = {}): Promise<Sandbox> {
  const sandbox = await startSandbox({
    merchants: DEMO_MERCHANTS,
    dataDir,
    ...options,
    knobs: { ...QUIET, ...options.knobs },
  });
  running.push(sandbox);
  return sandbox;
}

async function stop(sandbox: Sandbox): Promise<void> {
  running.splice(running.indexOf(sandbox), 1);
  await sandbox.stop();
}

async function receiverFor(sandbox: Sandbox): Promise<WebhookReceiver> {
  const receiver = await startWebhookReceiver({ publicKeyPem: sandbox.publicKeyPem, issuer: sandbox.issuer });
  receivers.push(receiver);
  return receiver;
}

async function api(
  sandbox: Sandbox,
  method: string,
  route: string,
  body?: unknown,
  key = KEY,
): Promise<{ status: number; body: any }> {
  const response = await fetch(`${sandbox.url}/${sandbox.platformId}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

async function book(sandbox: Sandbox, payload: Record<string, unknown> = {}): Promise<string> {
  const booked = await api(sandbox, 'POST', '/deliveries', {
    pickup_address_street: 'E 10th St',
    pickup_address_city: 'New York',
    pickup_address_country: 'US',
    pickup_name: 'Corner Deli',
    email: 'deli@example.com',
    dropoff_address_street: 'W 42nd St',
    dropoff_address_city: 'New York',
    dropoff_address_country: 'US',
    dropoff_name: 'Grace Hopper',
    package_delivery_mode: 'NOW',
    platform_payload: payload,
  });
  expect(booked.status, JSON.stringify(booked.body)).toBe(201);
  return booked.body.uid as string;
}

const readStatus = async (sandbox: Sandbox, uid: string) =>
  (await api(sandbox, 'GET', `/deliveries/${uid}`)).body.data?.status;

describe('a sandbox started again on its folder', () => {
  it('goes on with an unfinished delivery from where it stood, signing its webhooks with the same key', async () => {
    const dataDir = folder();
    const first = await sandboxOn(dataDir);
    const receiver = await receiverFor(first);
    first.setWebhookUrl(receiver.url);
    const uid = await book(first);
    await first.advance(uid);
    await first.advance(uid);
    await first.idle();
    await stop(first);

    // Its clock running this time: the delivery moves on by itself.
    const second = await sandboxOn(dataDir, { webhookUrl: receiver.url, knobs: { stepMs: 20 } });
    expect(second.publicKeyPem).toBe(first.publicKeyPem);
    expect(second.deliveryCount).toBe(1);
    await receiver.waitFor(
      (events) => events.some((event) => event.event_name === 'delivery.dropoff_complete'),
      10_000,
    );
    expect(receiver.rejected).toBe(0);
    expect(await readStatus(second, uid)).toBe('DROPOFF_COMPLETE');
    const history = second.history(uid)!;
    // One history across both lives: every event once, in order, each acknowledged.
    expect(history.events.map((event) => event.index)).toEqual(history.events.map((_, index) => index));
    expect(history.events.slice(0, 5).map((event) => event.event_name)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'location.assigned_driver',
      'delivery.pickup_enroute',
      'location.pickup_enroute',
    ]);
    expect(history.events.filter((event) => event.fate !== 'delivered')).toEqual([]);
    expect(
      receiver
        .events()
        .filter((event) => event.uid === uid)
        .map((event) => event.event_name),
    ).toEqual(history.events.map((event) => event.event_name));
    // The courier assigned before the restart is the one who delivers it.
    expect(new Set(receiver.events().flatMap((event) => (event.driver_id == null ? [] : [event.driver_id]))).size).toBe(
      1,
    );
  });

  it('sends the webhooks it had not sent, once a paused start is given a URL, and keeps held ones held', async () => {
    const dataDir = folder();
    const first = await sandboxOn(dataDir, { knobs: { retryBaseMs: 60_000 } });
    const receiver = await receiverFor(first);
    // The unscripted delivery's delivery.created is refused: it waits for its retry, a minute away, when the sandbox
    // stops.
    receiver.respondWith((event) => (event.platform_payload?.sandbox_webhooks ? 200 : 503));
    first.setWebhookUrl(receiver.url);
    const waiting = await book(first);
    const held = await book(first, { sandbox_webhooks: { hold: ['delivery.assigned'] } });
    await first.advance(held);
    await receiver.waitFor((events) =>
      events.some((event) => event.uid === held && event.event_name === 'location.assigned_driver'),
    );
    await receiver.waitFor(() => receiver.attempts.some((attempt) => attempt.event.uid === waiting));
    expect(first.history(waiting)!.events[0]!.fate).toBe('queued');
    expect(first.history(held)!.events.map((event) => event.fate)).toEqual(['delivered', 'held', 'delivered']);
    await stop(first);

    receiver.respondWith(() => 200);
    const second = await sandboxOn(dataDir, { paused: true });
    // Paused: it waits for somewhere to send to.
    expect(second.webhookStats().pending).toBe(1);
    expect(second.history(waiting)!.events[0]!.fate).toBe('queued');
    second.setWebhookUrl(receiver.url);
    await second.idle();
    expect(
      receiver
        .events()
        .filter((event) => event.uid === waiting)
        .map((event) => event.event_name),
    ).toEqual(['delivery.created']);
    expect(second.history(waiting)!.events[0]!.fate).toBe('delivered');
    expect(second.history(held)!.events.map((event) => event.fate)).toEqual(['delivered', 'held', 'delivered']);
    expect(await second.releaseWebhooks(held)).toEqual([1]);
    expect(
      receiver
        .events()
        .filter((event) => event.uid === held)
        .map((event) => event.event_name),
    ).toEqual(['delivery.created', 'location.assigned_driver', 'delivery.assigned']);
  });

  it('keeps a revoked key revoked, and cancels as before', async () => {
    const dataDir = folder();
    const first = await sandboxOn(dataDir);
    const uid = await book(first);
    first.revokeKey(DEMO_MERCHANTS[1]!.key);
    await stop(first);

    const second = await sandboxOn(dataDir);
    expect((await api(second, 'GET', '/availability', undefined, DEMO_MERCHANTS[1]!.key)).status).toBe(401);
    const canceled = await api(second, 'POST', `/deliveries/${uid}/cancel`, {});
    expect([canceled.status, canceled.body.data?.status]).toEqual([200, 'Canceled']);
    expect(await readStatus(second, uid)).toBe('Canceled');
  });

  it('leaves out deliveries of merchants it does not have (no key is written down, only its digest)', async () => {
    const dataDir = folder();
    const first = await sandboxOn(dataDir);
    const uid = await book(first);
    await stop(first);
    const other = await sandboxOn(dataDir, {
      merchants: [{ key: 'sk_test_someone_else', name: 'Else', platformId: first.platformId }],
    });
    expect(other.deliveryCount).toBe(0);
    expect((await api(other, 'GET', `/deliveries/${uid}`, undefined, 'sk_test_someone_else')).status).toBe(404);
  });
});

describe('one sandbox per folder', () => {
  it('refuses a second sandbox on a folder in use, and a start that fails (a busy port, a bad option) lets go of it', async () => {
    const dataDir = folder();
    const first = await sandboxOn(dataDir);
    await expect(startSandbox({ dataDir })).rejects.toThrow(SandboxWorldInUseError);
    await expect(startSandbox({ dataDir })).rejects.toThrow(
      `the sandbox world in ${dataDir} is in use by another process (pid ${process.pid})`,
    );
    await stop(first);

    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()));
    const busy = (blocker.address() as { port: number }).port;
    try {
      await expect(startSandbox({ dataDir, port: busy })).rejects.toMatchObject({ code: 'EADDRINUSE' });
    } finally {
      blocker.close();
    }
    // Neither does a bad option.
    await expect(startSandbox({ dataDir, webhookHistorySize: -1 })).rejects.toThrow(
      'webhookHistorySize must be an integer >= 0',
    );
    const again = await sandboxOn(dataDir);
    expect(again.dataDir).toBe(dataDir);
  });
});

describe('webhook histories', () => {
  it('keeps those of the webhookHistorySize deliveries that finished last, and of every unfinished one, across a restart too', async () => {
    const dataDir = folder();
    const first = await sandboxOn(dataDir, { webhookHistorySize: 2 });
    const receiver = await receiverFor(first);
    first.setWebhookUrl(receiver.url);
    const unfinished = await book(first);
    const finished: string[] = [];
    for (let n = 0; n < 3; n++) {
      const uid = await book(first);
      // A merchant cancel is a delivery's last event.
      expect((await api(first, 'POST', `/deliveries/${uid}/cancel`, {})).status).toBe(200);
      await first.idle();
      finished.push(uid);
    }
    expect(first.history(finished[0]!)).toBeUndefined();
    const gone = await fetch(`${first.origin}/sandbox/deliveries/${finished[0]}/history`);
    expect(gone.status).toBe(410);
    expect(((await gone.json()) as any).error).toBe('history_not_kept');
    expect(first.history(finished[1]!)?.events.map((event) => event.event_name)).toEqual([
      'delivery.created',
      'delivery.canceled',
    ]);
    expect(first.history(finished[2]!)).toBeDefined();
    expect(first.history(unfinished)).toBeDefined();
    // The delivery itself is still there: only its webhook history went.
    expect(await readStatus(first, finished[0]!)).toBe('Canceled');
    await stop(first);

    const second = await sandboxOn(dataDir, { webhookHistorySize: 2 });
    expect([finished[0], ...finished.slice(1), unfinished].map((uid) => second.history(uid!) !== undefined)).toEqual([
      false,
      true,
      true,
      true,
    ]);
    // One more finishes: the oldest kept one goes, as it would have without the restart.
    const last = await book(second);
    expect((await api(second, 'POST', `/deliveries/${last}/cancel`, {})).status).toBe(200);
    await second.idle();
    expect([...finished, last].map((uid) => second.history(uid) !== undefined)).toEqual([false, false, true, true]);
  });
});
