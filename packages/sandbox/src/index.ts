// The embedded upstream: a stateful, faithful stand-in for the delivery REST
// service of upstream-api.md, over real HTTP, with knobs for speed and faults.
// Used by `npm start` when no UPSTREAM_URL is set, by `npm run sandbox`, and by tests.
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { JsonObject } from './wire.js';
import { checkControlOptions } from './control-access.js';
import { applyKnobs, DEFAULT_KNOBS } from './knobs.js';
import { LifecycleSimulator } from './lifecycle.js';
import { RequestLog } from './request-log.js';
import { seedOrder } from './partner-routes.js';
import { toWebhookEvent } from './representations.js';
import type { ServerDeps } from './routing.js';
import { createSandboxServer } from './server.js';
import { isFinished, planOf, readStatus, SandboxState } from './state.js';
import type { DeliveryHistory, Sandbox, SandboxKnobs, SandboxMerchant, SandboxOptions, Selector } from './types.js';
import { keptSigningKeyPem, loadSigningKeys, type SigningKeys } from './signing.js';
import { WebhookSender } from './webhooks.js';
import { SIGNING_KEY_FILE, WorldFile } from './world-file.js';

export { plannedWebhooks, OUTCOMES } from './state.js';
export { SandboxWorldInUseError, SIGNING_KEY_FILE, WORLD_FILE } from './world-file.js';
export { DEFAULT_WEBHOOK_HISTORY_SIZE } from './webhooks.js';
export { CONTROL_TOKEN_HEADER, isLoopbackHost, MIN_CONTROL_TOKEN_LENGTH } from './control-access.js';
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
  const host = options.host ?? '127.0.0.1';
  // Checked before anything is opened: a bad option starts nothing.
  checkControlOptions(host, options.controlToken);
  const requests = new RequestLog(options.requestLogSize ?? DEFAULT_REQUEST_LOG_SIZE);
  const knobs: SandboxKnobs = { ...DEFAULT_KNOBS };
  applyKnobs(knobs, options.knobs);
  const keys = await signingKeys(options);
  const core = new SandboxCore(options, knobs, requests, keys);
  const server = createSandboxServer(core.serverDeps());
  await listen(server, options.port ?? 0, host, core);
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  core.state.origin = `http://${shown}:${address.port}`;
  // Restored deliveries go on from where they stood, and their webhooks not yet sent go out.
  if (!core.paused) core.resume();
  return core.handle(server);
}

/** The key given, else the one kept in a file (made the first time), else one for this run. */
async function signingKeys(options: SandboxOptions): Promise<SigningKeys> {
  const keyFile =
    options.signingKeyFile ??
    (options.dataDir === undefined ? undefined : path.join(options.dataDir, SIGNING_KEY_FILE));
  return loadSigningKeys(
    options.privateKeyPem ?? (keyFile === undefined ? undefined : await keptSigningKeyPem(keyFile)),
  );
}

async function listen(server: Server, port: number, host: string, core: SandboxCore): Promise<void> {
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    // A busy port starts nothing: the world file's lock goes with it.
    core.world?.close();
    await core.webhooks.close();
    throw error;
  }
}

/** The parts of a running sandbox and what its HTTP routes and its handle do with them. */
class SandboxCore {
  readonly platformId: string;
  readonly merchants: SandboxMerchant[];
  readonly issuer: string;
  readonly lifetime = new AbortController();
  readonly state: SandboxState;
  readonly webhooks: WebhookSender;
  readonly lifecycle: LifecycleSimulator;
  readonly world: WorldFile | undefined;
  webhookUrl: string | undefined;
  paused: boolean;

  constructor(
    private readonly options: SandboxOptions,
    readonly knobs: SandboxKnobs,
    readonly requests: RequestLog,
    private keys: SigningKeys,
  ) {
    this.platformId = options.platformId ?? DEFAULT_PLATFORM_ID;
    this.merchants = (options.merchants ?? defaultMerchants(this.platformId)).map((m) => ({ ...m }));
    this.issuer = options.issuer ?? DEFAULT_ISSUER;
    this.webhookUrl = options.webhookUrl;
    this.paused = options.paused ?? false;
    // Every request waiting out latencyMs listens to it: as many listeners as requests in flight, by design.
    setMaxListeners(0, this.lifetime.signal);
    this.state = new SandboxState(this.merchants);
    // Both start paused: nothing moves or goes out before the server listens (and, when asked, before resume()).
    this.webhooks = new WebhookSender(
      {
        knobs,
        issuer: this.issuer,
        privateKey: keys.privateKey,
        webhookUrl: () => this.webhookUrl,
        historySize: options.webhookHistorySize,
        changed: (uid) => this.world?.webhooksChanged(uid),
      },
      { paused: true },
    );
    this.lifecycle = new LifecycleSimulator(
      this.state,
      knobs,
      (record, eventName, { final, location }) => {
        // Every change of a delivery is announced by an event: the world file keeps it as it is announced.
        this.world?.deliveryChanged(record.uid);
        const event = toWebhookEvent(record, eventName, this.state.origin, {
          location,
          partnerFields: knobs.partnerWebhookFields,
        });
        this.webhooks.enqueue(record.uid, event, final, {
          readStatus: readStatus(record),
          script: record.webhookScript,
          seed: record.seed,
        });
      },
      { paused: true },
    );
    // Opened once every option has been checked (the sender checks webhookHistorySize): a bad option leaves no lock
    // behind.
    this.world = options.dataDir === undefined ? undefined : this.openWorld(options.dataDir);
    this.mirrorKnobs();
  }

  /** The world kept in `dataDir`, read back: deliveries, their webhooks, revoked keys, bookings counted. */
  private openWorld(dataDir: string): WorldFile {
    const world = new WorldFile(dataDir);
    let kept;
    try {
      kept = world.load(this.merchants);
    } catch (error) {
      world.close();
      throw error;
    }
    for (const record of kept.deliveries) this.state.restore(record);
    for (const [uid, snapshot] of kept.webhooks) this.webhooks.restore(uid, snapshot);
    for (const key of kept.revokedKeys) this.state.revokedKeys.add(key);
    this.state.booked = kept.booked;
    world.attach({ state: this.state, webhooks: (uid) => this.webhooks.snapshot(uid) });
    return world;
  }

  get publicKeyPem(): string {
    return this.keys.publicKeyPem;
  }

  async useSigningKey(privateKeyPem?: string): Promise<string> {
    const next = await loadSigningKeys(privateKeyPem);
    this.webhooks.useKey(next.privateKey);
    this.keys = next;
    return next.publicKeyPem;
  }

  resume(): void {
    this.paused = false;
    this.lifecycle.resume();
    this.webhooks.resume();
  }

  setWebhookUrl(url: string | undefined): void {
    this.webhookUrl = url;
    // A host that learns its webhook URL once it listens started the sandbox paused: the URL is the signal.
    if (this.paused && url !== undefined) this.resume();
  }

  revokeKey(key: string): void {
    this.state.revokedKeys.add(key);
    this.world?.keyRevoked(key);
  }

  private mirrorKnobs(): void {
    this.state.deliveryMinuteOfDay = this.knobs.deliveryMinuteOfDay;
    this.state.readScope = this.knobs.readScope;
    this.state.createAnswerShape = this.knobs.createAnswerShape;
    this.state.seed = this.knobs.seed;
  }

  setKnobs(patch: unknown): void {
    const stepMs = this.knobs.stepMs;
    applyKnobs(this.knobs, patch);
    this.mirrorKnobs();
    if (this.knobs.stepMs !== stepMs) this.lifecycle.reschedule();
  }

  history(uid: string): DeliveryHistory | undefined {
    const record = this.state.deliveries.get(uid);
    const sent = this.webhooks.history(uid);
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
  }

  async releaseWebhooks(uid: string, selectors?: readonly Selector[]): Promise<number[]> {
    const released = this.state.deliveries.has(uid) ? await this.webhooks.release(uid, selectors) : undefined;
    if (released === undefined) throw new Error(`releaseWebhooks: no delivery ${uid}`);
    return released;
  }

  /** Another key of the merchant holding `key` (undefined for a key the sandbox does not know). */
  addMerchantKey(key: string): string | undefined {
    const added = this.state.addKey(key);
    if (added) this.merchants.push(added);
    return added?.key;
  }

  info(): JsonObject {
    return {
      url: `${this.state.origin}/api/v1`,
      platformId: this.platformId,
      issuer: this.issuer,
      merchants: this.merchants.map((m) => ({ ...m })),
      webhookUrl: this.webhookUrl ?? null,
      knobs: { ...this.knobs },
      requestLogSize: this.requests.capacity,
      webhookHistorySize: this.webhooks.historySize,
      dataDir: this.options.dataDir ?? null,
      deliveries: this.state.deliveries.size,
    };
  }

  serverDeps(): ServerDeps {
    const publicKeyPem = () => this.publicKeyPem;
    return {
      state: this.state,
      lifecycle: this.lifecycle,
      knobs: this.knobs,
      requests: this.requests,
      get publicKeyPem() {
        return publicKeyPem();
      },
      lifetime: this.lifetime.signal,
      control: { token: this.options.controlToken, production: this.options.production ?? false },
      info: () => this.info(),
      setKnobs: (patch) => this.setKnobs(patch),
      setWebhookUrl: (url) => this.setWebhookUrl(url),
      revokeKey: (key) => this.revokeKey(key),
      history: (uid) => this.history(uid),
      historySize: this.webhooks.historySize,
      releaseWebhooks: (uid, selectors) => this.releaseWebhooks(uid, selectors),
      addMerchantKey: (key) => this.addMerchantKey(key),
    };
  }

  /** The `Sandbox` a caller holds: this core behind the documented interface, stopped once. */
  handle(server: Server): Sandbox {
    const { state, requests } = this;
    const current = { publicKeyPem: () => this.publicKeyPem, webhookUrl: () => this.webhookUrl };
    let stopping: Promise<void> | null = null;
    return {
      url: `${this.state.origin}/api/v1`,
      origin: this.state.origin,
      platformId: this.platformId,
      merchants: this.merchants,
      issuer: this.issuer,
      dataDir: this.options.dataDir,
      get deliveryCount() {
        return state.deliveries.size;
      },
      get publicKeyPem() {
        return current.publicKeyPem();
      },
      useSigningKey: (privateKeyPem) => this.useSigningKey(privateKeyPem),
      knobs: this.knobs,
      setKnobs: (patch) => this.setKnobs(patch),
      get webhookUrl() {
        return current.webhookUrl();
      },
      setWebhookUrl: (url) => this.setWebhookUrl(url),
      resume: () => this.resume(),
      requests: this.requests.records,
      resetRequests: () => this.requests.clear(),
      requestLogSize: this.requests.capacity,
      get requestCount() {
        return requests.count;
      },
      requestsSince: (mark) => this.requests.since(mark),
      revokeKey: (key) => {
        if (!this.state.merchantByKey(key)) throw new Error('revokeKey: not a sandbox merchant key');
        this.revokeKey(key);
      },
      addMerchantKey: (key) => {
        const added = this.addMerchantKey(key);
        if (added === undefined) throw new Error('addMerchantKey: not a sandbox merchant key');
        return added;
      },
      advance: (uid) => this.lifecycle.advance(uid),
      reassignCourier: async (uid) => this.lifecycle.reassign(uid),
      seedPartnerOrder: (key, body) => {
        const outcome = seedOrder(this.state, this.lifecycle, key, body as JsonObject);
        if (!outcome.ok) throw new Error(`seedPartnerOrder: ${outcome.message}`);
        return outcome.order;
      },
      webhookStats: () => this.webhooks.stats(),
      history: (uid) => this.history(uid),
      releaseWebhooks: (uid, selectors) => this.releaseWebhooks(uid, selectors),
      idle: () => this.webhooks.idle(),
      stop: () => (stopping ??= this.stop(server)),
    };
  }

  private async stop(server: Server): Promise<void> {
    this.lifetime.abort();
    this.lifecycle.stop();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Keep-alive and in-flight sockets would hold close() open.
    server.closeAllConnections();
    // Written before the sender lets go of its queues: what was still to send goes out after a restart.
    this.world?.close();
    await Promise.all([closed, this.webhooks.close()]);
  }
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
