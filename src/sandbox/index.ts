// The embedded upstream: a stateful, faithful stand-in for the delivery REST
// service of upstream-api.md, over real HTTP, with knobs for speed and faults.
// Used by `npm start` when no UPSTREAM_URL is set, by `npm run sandbox`, and by tests.
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { JsonObject, WireDeliveryRequest, WireOrder } from '../upstream/wire.js';
import { applyKnobs, DEFAULT_KNOBS } from './knobs.js';
import { LifecycleSimulator } from './lifecycle.js';
import { RequestLog } from './request-log.js';
import { seedOrder } from './partner-routes.js';
import { toWebhookEvent } from './representations.js';
import { createSandboxServer } from './server.js';
import { isFinished, planOf, readStatus, SandboxState, type Outcome } from './state.js';
import type { Selector, WebhookOrderName } from './webhook-script.js';
import { loadSigningKeys, WebhookSender, type WebhookHistory, type WebhookStats } from './webhooks.js';

export { plannedWebhooks, OUTCOMES, type Outcome } from './state.js';
export type { Selector, WebhookScript } from './webhook-script.js';
export type { WebhookFate, WebhookHistory, WebhookHistoryEntry } from './webhooks.js';

/** A delivery's whole story, for tests: its outcome and true state, and each event with what became of its webhook. */
export interface DeliveryHistory extends WebhookHistory {
  uid: string;
  /** null while undecided (drawn at pickup). */
  outcome: Outcome | null;
  /** What a read answers now: the upstream's true state. */
  status: string;
  /** Nothing more will happen to it. */
  finished: boolean;
  /** The delivery.* events of its plan, in order (the delivered path while the outcome is open; a merchant cancel cuts it short). */
  plan: string[];
}

export interface SandboxMerchant {
  key: string;
  name: string;
  platformId: string;
  /**
   * Keys with the same merchantId are one merchant's (as after a key rotation):
   * each reads, cancels and finds by partner reference what the others booked.
   * Without it a key is a merchant of its own.
   */
  merchantId?: string;
}

export interface SandboxKnobs {
  /** Time between lifecycle milestones; 0 = manual (only advance() moves a delivery). */
  stepMs: number;
  /** Extra location.* events with interpolated coordinates while en route. */
  locationTicks: number;
  /** Added to every /api/v1 response. */
  latencyMs: number;
  /** 0..1: share of /api/v1 requests answered 503 `unavailable`. */
  errorRate: number;
  /** 0..1: share of webhooks sent twice. */
  duplicateRate: number;
  /** 0..1: share of webhooks held back and sent after the delivery's next one. */
  reorderRate: number;
  /** 0..1: share of webhooks never sent, as if all five retries had failed (the read still tells the truth). */
  dropRate: number;
  /**
   * The order of the webhooks of each delivery booked from now on: `as_emitted`
   * (as they happen), or gathered until the delivery ends and then sent
   * `reversed` or `shuffled`. A payload's `sandbox_webhooks` overrides it.
   */
  webhookOrder: WebhookOrderName;
  /**
   * null, or a number that makes every later booking's draws (outcome,
   * reassignment, webhook faults, shuffles) follow from it and the booking's
   * place in line (both groups counted), so a run can be replayed.
   */
  seed: number | null;
  /**
   * null (outcomes follow returnRate, drawn at pickup), or weights by outcome,
   * drawn at booking: e.g. `{delivered: 3, failed_then_delivered: 1}`. A
   * payload's `sandbox_outcome` overrides it.
   */
  outcomeWeights: Readonly<Partial<Record<Outcome, number>>> | null;
  /**
   * 0..1: share of picked-up deliveries that are not delivered: they fail at the
   * door or are canceled by the provider on the way, then go back to the pickup
   * (return_in_progress, returned). Decided at pickup; a payload's
   * `sandbox_outcome` overrides it for one delivery.
   */
  returnRate: number;
  /**
   * 0..1: share of deliveries that get another courier once, right after
   * pickup_enroute (delivery.assigned and location.assigned_driver naming the new
   * driver; the milestone stays). reassignCourier() does it on demand.
   */
  reassignRate: number;
  /** The receiver must answer 2xx within this. */
  webhookTimeoutMs: number;
  /** Retry n waits retryBaseMs * 2^(n-1); at most 5 retries. */
  retryBaseMs: number;
  /** The time of day of a read's delivery_date, in minutes after midnight UTC (the document does not say which; 0 = midnight). */
  deliveryMinuteOfDay: number;
  /**
   * Whose deliveries a key may read (GET by uid, both groups): `merchant`, only its
   * own; `platform`, any of its platform's, as the document's 404 ("no delivery
   * with this uid belongs to the platform") allows. Cancels stay the merchant's own.
   */
  readScope: 'merchant' | 'platform';
  /** Whether a partner order's webhooks also carry partner_reference and partner_payload (the document's body has neither). */
  partnerWebhookFields: boolean;
  /**
   * POST /deliveries books the delivery (its lifecycle and webhooks start) and only
   * then waits this long before answering: a caller with a shorter timeout loses
   * the answer of a booking that exists. 0 = answer at once.
   */
  createAnswerDelayMs: number;
  /**
   * Where create's answer puts `uid` and `tracking_link` (the document shows
   * neither the shape nor the status code): `top-level` with 201, or `data`,
   * wrapped as reads are, with 200.
   */
  createAnswerShape: 'top-level' | 'data';
}

export interface SandboxOptions {
  /** Default 0: any free port. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  platformId?: string;
  merchants?: SandboxMerchant[];
  webhookUrl?: string;
  issuer?: string;
  /** PKCS8 PEM RSA key for RS256 webhook signatures; generated when absent. */
  privateKeyPem?: string;
  knobs?: Partial<SandboxKnobs>;
  /** How many of the most recent requests `requests` keeps; default 10,000. */
  requestLogSize?: number;
}

export interface SandboxRequestRecord {
  /** 1 for the sandbox's first request, then one more for each: never reset, never reused. */
  seq: number;
  method: string;
  path: string;
  group: 'platform' | 'partner' | 'control';
  status: number;
  /** Arrival time, ms since the epoch. */
  at: number;
}

export interface Sandbox {
  /** Base URL ending in /api/v1. */
  url: string;
  origin: string;
  platformId: string;
  merchants: SandboxMerchant[];
  issuer: string;
  /** SPKI PEM of the webhook signing key (the current one, after useSigningKey). */
  readonly publicKeyPem: string;
  /**
   * Changes the webhook signing key, as the upstream may (its document is silent
   * on key changes): every event from now on, retries included, is signed with
   * the given PKCS#8 PEM private key, or a new one. Returns the new SPKI PEM public key.
   */
  useSigningKey(privateKeyPem?: string): Promise<string>;
  /** Live: the running sandbox reads these on every decision. Change them through setKnobs. */
  knobs: SandboxKnobs;
  setKnobs(knobs: Partial<SandboxKnobs>): void;
  setWebhookUrl(url: string | undefined): void;
  /**
   * The most recent requests (at most `requestLogSize`), oldest first, for tests
   * that count upstream calls. Live: the same array is trimmed and emptied in place.
   */
  requests: SandboxRequestRecord[];
  /** Empties `requests`; `requestCount` goes on counting. */
  resetRequests(): void;
  /** How many requests `requests` keeps at most. */
  readonly requestLogSize: number;
  /** Requests answered since start: only ever grows. Take it as a mark for requestsSince. */
  readonly requestCount: number;
  /**
   * The requests answered after `mark` (an earlier `requestCount`), oldest first.
   * Throws a RangeError when some of them are no longer kept (trimmed or reset), so a count is never short.
   */
  requestsSince(mark: number): SandboxRequestRecord[];
  /**
   * Revokes a merchant key, as a merchant may in its dashboard: from now on every
   * /api/v1 call with it is answered 401 invalid_api_key. Throws for a key the sandbox does not know.
   */
  revokeKey(key: string): void;
  /**
   * Makes another key for the merchant holding `key`, as a merchant rotating
   * its key does in its dashboard: both are accepted until one is revoked.
   * Returns the new key. Also `POST /sandbox/merchant-keys` with `Authorization: Bearer <key>`.
   */
  addMerchantKey(key: string): string;
  /** Moves one delivery to its next milestone now (emitting its events). Rejects for an unknown or finished delivery. */
  advance(uid: string): Promise<void>;
  /**
   * Gives one delivery another courier now (new driver_id, name, phones, vehicle),
   * announced by delivery.assigned and location.assigned_driver; the milestone stays.
   * Rejects for an unknown or finished delivery, or one with no courier yet.
   */
  reassignCourier(uid: string): Promise<void>;
  /** The partner group has no create endpoint: book an order for `key` directly. Throws when invalid. */
  seedPartnerOrder(key: string, body: Partial<WireDeliveryRequest> & { partner_reference: string }): WireOrder;
  webhookStats(): WebhookStats;
  /**
   * Every event of one delivery in true order, what became of each webhook
   * (sent, dropped, held, ...), the order they were sent in, and the true state
   * now. Undefined for an unknown uid. Also `GET /sandbox/deliveries/<uid>/history`.
   */
  history(uid: string): DeliveryHistory | undefined;
  /**
   * Sends webhooks of one delivery that were kept back (its script's `hold`, or
   * gathered for its order): those the selectors pick, in that order, or all.
   * Resolves with their indexes once the receiver acknowledged them (or they
   * were given up). Rejects for an unknown uid. Also `POST /sandbox/deliveries/<uid>/webhooks/release`.
   */
  releaseWebhooks(uid: string, selectors?: readonly Selector[]): Promise<number[]>;
  /** Resolves when no webhook is queued, in flight or waiting for a retry. */
  idle(): Promise<void>;
  /** Closes the server, its sockets, timers and outbound webhook connections. */
  stop(): Promise<void>;
}

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
  let keys = await loadSigningKeys(options.privateKeyPem);
  const knobs: SandboxKnobs = { ...DEFAULT_KNOBS };
  applyKnobs(knobs, options.knobs);
  let webhookUrl = options.webhookUrl;

  const lifetime = new AbortController();
  // Every request waiting out latencyMs listens to it: as many listeners as requests in flight, by design.
  setMaxListeners(0, lifetime.signal);
  const state = new SandboxState(merchants);
  const webhooks = new WebhookSender({ knobs, issuer, privateKey: keys.privateKey, webhookUrl: () => webhookUrl });
  const lifecycle = new LifecycleSimulator(state, knobs, (record, eventName, { final, location }) =>
    webhooks.enqueue(record.uid, toWebhookEvent(record, eventName, state.origin, { location, partnerFields: knobs.partnerWebhookFields }), final, {
      readStatus: readStatus(record),
      script: record.webhookScript,
      seed: record.seed,
    }),
  );
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
    history,
    releaseWebhooks,
    info: () => ({
      url: `${state.origin}/api/v1`,
      platformId,
      issuer,
      merchants: merchants.map((m) => ({ ...m })),
      webhookUrl: webhookUrl ?? null,
      knobs: { ...knobs },
      requestLogSize: requests.capacity,
    }),
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  state.origin = `http://${host}:${address.port}`;

  let stopping: Promise<void> | null = null;
  return {
    url: `${state.origin}/api/v1`,
    origin: state.origin,
    platformId,
    merchants,
    issuer,
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
    setWebhookUrl: (url) => {
      webhookUrl = url;
    },
    requests: requests.records,
    resetRequests: () => requests.clear(),
    requestLogSize: requests.capacity,
    get requestCount() {
      return requests.count;
    },
    requestsSince: (mark) => requests.since(mark),
    revokeKey: (key) => {
      if (!state.merchantByKey(key)) throw new Error('revokeKey: not a sandbox merchant key');
      state.revokedKeys.add(key);
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
        await Promise.all([closed, webhooks.close()]);
      })()),
  };
}

function defaultMerchants(platformId: string): SandboxMerchant[] {
  const key = () => `sk_test_${randomBytes(12).toString('hex')}`;
  return [
    { key: key(), name: 'Sandbox Bakery', platformId },
    { key: key(), name: 'Sandbox Florist', platformId },
    { key: key(), name: 'Elsewhere Books', platformId: platformId === OTHER_PLATFORM_ID ? `${OTHER_PLATFORM_ID}-2` : OTHER_PLATFORM_ID },
  ];
}
