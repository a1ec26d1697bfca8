// The embedded upstream: a stateful, faithful stand-in for the delivery REST
// service of upstream-api.md, over real HTTP, with knobs for speed and faults.
// Used by `npm start` when no UPSTREAM_URL is set, by `npm run sandbox`, and by tests.
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { JsonObject } from './wire.js';
import { applyKnobs, DEFAULT_KNOBS } from './knobs.js';
import { LifecycleSimulator } from './lifecycle.js';
import { RequestLog } from './request-log.js';
import { seedOrder } from './partner-routes.js';
import { toWebhookEvent } from './representations.js';
import { createSandboxServer } from './server.js';
import { isFinished, planOf, readStatus, SandboxState } from './state.js';
import type { DeliveryHistory, Sandbox, SandboxKnobs, SandboxMerchant, SandboxOptions, Selector } from './types.js';
import { keptSigningKeyPem, loadSigningKeys, WebhookSender } from './webhooks.js';
import { SIGNING_KEY_FILE, WorldFile } from './world-file.js';

export { plannedWebhooks, OUTCOMES } from './state.js';
export { SandboxWorldInUseError, SIGNING_KEY_FILE, WORLD_FILE } from './world-file.js';
export { DEFAULT_WEBHOOK_HISTORY_SIZE } from './webhooks.js';
export type * from './types.js';

export const DEFAULT_PLATFORM_ID = 'sandbox-platform';

/**
 * Fixed keys for the sandbox that `npm start` embeds, so the README's examples
 * can be pasted as they are. They open nothing but the in-process simulator.
 */
export const DEMO_MERCHANTS = [
  { key: 'sk_test_demo_merchant', name: 'Demo Merchant', platformId: DEFAULT_PLATFORM_ID },
  { key: 'sk_test_second_merchant', name: 'Second Merchant', platformId: DEFAULT_PLATFORM_ID },
];
/** A second platform id, so "key not valid for this platform" can be exercised. */
export const OTHER_PLATFORM_ID = 'other-platform';
/** The `iss` claim: the service's short lowercase name. */
export const DEFAULT_ISSUER = 'lastmile';
/** Enough for any test's count, small enough that a long `npm start` does not grow without bound. */
export const DEFAULT_REQUEST_LOG_SIZE = 10_000;
/** Time between milestones unless set: the same standalone (`npm run sandbox`) and embedded (SANDBOX_STEP_MS). */
export { DEFAULT_STEP_MS } from './knobs.js';

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const platformId = options.platformId ?? DEFAULT_PLATFORM_ID;
  const merchants = (options.merchants ?? defaultMerchants(platformId)).map((m) => ({ ...m }));
  const issuer = options.issuer ?? DEFAULT_ISSUER;
  // Checked before anything is opened: a bad size starts nothing.
  const requests = new RequestLog(options.requestLogSize ?? DEFAULT_REQUEST_LOG_SIZE);
  const knobs: SandboxKnobs = { ...DEFAULT_KNOBS };
  applyKnobs(knobs, options.knobs);
  // The key given, else the one kept in a file (made the first time), else one for this run.
  const keyFile =
    options.signingKeyFile ??
    (options.dataDir === undefined ? undefined : path.join(options.dataDir, SIGNING_KEY_FILE));
  let keys = await loadSigningKeys(
    options.privateKeyPem ?? (keyFile === undefined ? undefined : await keptSigningKeyPem(keyFile)),
  );
  let webhookUrl = options.webhookUrl;
  let paused = options.paused ?? false;

  const lifetime = new AbortController();
  // Every request waiting out latencyMs listens to it: as many listeners as requests in flight, by design.
  setMaxListeners(0, lifetime.signal);
  const state = new SandboxState(merchants);
  // Both start paused: nothing moves or goes out before the server listens (and, when asked, before resume()).
  const webhooks = new WebhookSender(
    {
      knobs,
      issuer,
      privateKey: keys.privateKey,
      webhookUrl: () => webhookUrl,
      historySize: options.webhookHistorySize,
      changed: (uid) => world?.webhooksChanged(uid),
    },
    { paused: true },
  );
  const lifecycle = new LifecycleSimulator(
    state,
    knobs,
    (record, eventName, { final, location }) => {
      // Every change of a delivery is announced by an event: the world file keeps it as it is announced.
      world?.deliveryChanged(record.uid);
      webhooks.enqueue(
        record.uid,
        toWebhookEvent(record, eventName, state.origin, { location, partnerFields: knobs.partnerWebhookFields }),
        final,
        {
          readStatus: readStatus(record),
          script: record.webhookScript,
          seed: record.seed,
        },
      );
    },
    { paused: true },
  );
  // Opened once every option has been checked (the sender checks webhookHistorySize): a bad option leaves no lock
  // behind.
  const world = options.dataDir === undefined ? undefined : new WorldFile(options.dataDir);
  if (world) {
    let kept;
    try {
      kept = world.load(merchants);
    } catch (error) {
      world.close();
      throw error;
    }
    for (const record of kept.deliveries) state.restore(record);
    for (const [uid, snapshot] of kept.webhooks) webhooks.restore(uid, snapshot);
    for (const key of kept.revokedKeys) state.revokedKeys.add(key);
    state.booked = kept.booked;
    world.attach({ state, webhooks: (uid) => webhooks.snapshot(uid) });
  }
  const resume = () => {
    paused = false;
    lifecycle.resume();
    webhooks.resume();
  };
  const setWebhookUrl = (url: string | undefined) => {
    webhookUrl = url;
    // A host that learns its webhook URL once it listens started the sandbox paused: the URL is the signal.
    if (paused && url !== undefined) resume();
  };
  const revokeKey = (key: string) => {
    state.revokedKeys.add(key);
    world?.keyRevoked(key);
  };
  const mirrorKnobs = () => {
    state.deliveryMinuteOfDay = knobs.deliveryMinuteOfDay;
    state.readScope = knobs.readScope;
    state.createAnswerShape = knobs.createAnswerShape;
    state.seed = knobs.seed;
  };
  mirrorKnobs();
  const setKnobs = (patch: unknown) => {
    const stepMs = knobs.stepMs;
    applyKnobs(knobs, patch);
    mirrorKnobs();
    if (knobs.stepMs !== stepMs) lifecycle.reschedule();
  };
  const history = (uid: string): DeliveryHistory | undefined => {
    const record = state.deliveries.get(uid);
    const sent = webhooks.history(uid);
    if (!record || !sent) return undefined;
    const plan = planOf(record).map((m) => m.event);
    return {
      uid,
      outcome: record.outcome,
      status: readStatus(record),
      finished: isFinished(record),
      plan: record.canceled ? [...plan.slice(0, record.step + 1), 'delivery.canceled'] : plan,
      ...sent,
    };
  };
  const releaseWebhooks = async (uid: string, selectors?: readonly Selector[]): Promise<number[]> => {
    const released = state.deliveries.has(uid) ? await webhooks.release(uid, selectors) : undefined;
    if (released === undefined) throw new Error(`releaseWebhooks: no delivery ${uid}`);
    return released;
  };

  /** Another key of the merchant holding `key` (undefined for a key the sandbox does not know). */
  const addMerchantKey = (key: string): string | undefined => {
    const added = state.addKey(key);
    if (added) merchants.push(added);
    return added?.key;
  };

  const server = createSandboxServer({
    addMerchantKey,
    state,
    lifecycle,
    knobs,
    requests,
    get publicKeyPem() {
      return keys.publicKeyPem;
    },
    lifetime: lifetime.signal,
    setKnobs,
    setWebhookUrl,
    revokeKey,
    history,
    historySize: webhooks.historySize,
    releaseWebhooks,
    info: () => ({
      url: `${state.origin}/api/v1`,
      platformId,
      issuer,
      merchants: merchants.map((m) => ({ ...m })),
      webhookUrl: webhookUrl ?? null,
      knobs: { ...knobs },
      requestLogSize: requests.capacity,
      webhookHistorySize: webhooks.historySize,
      dataDir: options.dataDir ?? null,
      deliveries: state.deliveries.size,
    }),
  });

  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    // A busy port starts nothing: the world file's lock goes with it.
    world?.close();
    await webhooks.close();
    throw error;
  }
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  state.origin = `http://${host}:${address.port}`;
  // Restored deliveries go on from where they stood, and their webhooks not yet sent go out.
  if (!paused) resume();

  let stopping: Promise<void> | null = null;
  return {
    url: `${state.origin}/api/v1`,
    origin: state.origin,
    platformId,
    merchants,
    issuer,
    dataDir: options.dataDir,
    get deliveryCount() {
      return state.deliveries.size;
    },
    get publicKeyPem() {
      return keys.publicKeyPem;
    },
    async useSigningKey(privateKeyPem?: string) {
      const next = await loadSigningKeys(privateKeyPem);
      webhooks.useKey(next.privateKey);
      keys = next;
      return next.publicKeyPem;
    },
    knobs,
    setKnobs,
    get webhookUrl() {
      return webhookUrl;
    },
    setWebhookUrl,
    resume,
    requests: requests.records,
    resetRequests: () => requests.clear(),
    requestLogSize: requests.capacity,
    get requestCount() {
      return requests.count;
    },
    requestsSince: (mark) => requests.since(mark),
    revokeKey: (key) => {
      if (!state.merchantByKey(key)) throw new Error('revokeKey: not a sandbox merchant key');
      revokeKey(key);
    },
    addMerchantKey: (key) => {
      const added = addMerchantKey(key);
      if (added === undefined) throw new Error('addMerchantKey: not a sandbox merchant key');
      return added;
    },
    advance: (uid) => lifecycle.advance(uid),
    reassignCourier: async (uid) => lifecycle.reassign(uid),
    seedPartnerOrder: (key, body) => {
      const outcome = seedOrder(state, lifecycle, key, body as JsonObject);
      if (!outcome.ok) throw new Error(`seedPartnerOrder: ${outcome.message}`);
      return outcome.order;
    },
    webhookStats: () => webhooks.stats(),
    history,
    releaseWebhooks,
    idle: () => webhooks.idle(),
    stop: () =>
      (stopping ??= (async () => {
        lifetime.abort();
        lifecycle.stop();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // Keep-alive and in-flight sockets would hold close() open.
        server.closeAllConnections();
        // Written before the sender lets go of its queues: what was still to send goes out after a restart.
        world?.close();
        await Promise.all([closed, webhooks.close()]);
      })()),
  };
}

function defaultMerchants(platformId: string): SandboxMerchant[] {
  const key = () => `sk_test_${randomBytes(12).toString('hex')}`;
  return [
    { key: key(), name: 'Sandbox Bakery', platformId },
    { key: key(), name: 'Sandbox Florist', platformId },
    {
      key: key(),
      name: 'Elsewhere Books',
      platformId: platformId === OTHER_PLATFORM_ID ? `${OTHER_PLATFORM_ID}-2` : OTHER_PLATFORM_ID,
    },
  ];
}
