// The sandbox's vocabulary: the types every part of it shares (knobs, merchants,
// outcomes, webhook scripts and histories). It imports nothing of the sandbox, so
// the files that use these types form no import circle; index.ts re-exports them.
import type { WireDeliveryRequest, WireOrder } from './wire.js';

/**
 * How a delivery ends (state.ts has each outcome's milestones, and OUTCOMES lists
 * them in order). The document lists the events but not the transitions: each
 * outcome is one sequence it allows, so the facade is tested against each.
 */
export type Outcome =
  | 'delivered'
  | 'failed_then_returned'
  | 'canceled_then_returned'
  | 'failed_then_delivered'
  | 'canceled_after_pickup_then_returned'
  | 'canceled_before_pickup'
  | 'failed_before_pickup';

/** How a batch of webhooks is arranged (webhook-script.ts's WEBHOOK_ORDERS lists them). */
export type WebhookOrderName = 'as_emitted' | 'reversed' | 'shuffled';

/**
 * Picks events of one delivery: a number is the event's index in the true
 * order (0 = delivery.created); a string is an event name (every occurrence),
 * `name#n` its n-th occurrence (1-based), `delivery.*` / `location.*` a family,
 * and `*` every event.
 */
export type Selector = number | string;

export interface WebhookScript {
  /**
   * `as_emitted` sends each event as it happens; anything else gathers them until the delivery ends (or a release),
   * then sends them arranged.
   */
  order: WebhookOrderName | readonly Selector[];
  /** Seeds `shuffled` (and the delivery's other draws); drawn at random and shown in the history when absent. */
  seed: number | null;
  /** Never sent, as if every retry had failed. */
  drop: readonly Selector[];
  /** Sent twice. */
  duplicate: readonly Selector[];
  /** Kept back until released (`releaseWebhooks`, `POST /sandbox/deliveries/<uid>/webhooks/release`). */
  hold: readonly Selector[];
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
  /**
   * The time of day of a read's delivery_date, in minutes after midnight UTC (the document does not say which; 0 =
   * midnight).
   */
  deliveryMinuteOfDay: number;
  /**
   * Whose deliveries a key may read (GET by uid, both groups): `merchant`, only its
   * own; `platform`, any of its platform's, as the document's 404 ("no delivery
   * with this uid belongs to the platform") allows. Cancels stay the merchant's own.
   */
  readScope: 'merchant' | 'platform';
  /**
   * Whether a partner order's webhooks also carry partner_reference and partner_payload (the document's body has
   * neither).
   */
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

/**
 * What became of one event's webhook: `not_sent` (no URL on file), `dropped`
 * (never sent, on purpose), `held` (until released), `waiting` (gathered until
 * the delivery ends, or held back by reorderRate), `queued` (to be sent or being
 * sent), `delivered` (a copy acknowledged), `failed` (given up after the retries).
 */
export type WebhookFate = 'not_sent' | 'dropped' | 'held' | 'waiting' | 'queued' | 'delivered' | 'failed';

/** One event of a delivery, in the true order, and what became of its webhook. */
export interface WebhookHistoryEntry {
  /** Its place in the delivery's true order, from 0 (delivery.created): what a script's number selects. */
  index: number;
  event_name: string;
  /** The webhook's human-readable status. */
  status: string | null;
  /** What a read answered right after the event: the upstream's true state then. */
  read_status: string | null;
  /** When it happened (ISO 8601). */
  at: string;
  fate: WebhookFate;
  /** Copies handed to the sender: 2 for a duplicate. */
  copies: number;
  /** Copies the receiver acknowledged with a 2xx. */
  acknowledged: number;
}

/** The webhooks of one delivery: every event in true order, and the order they were sent in. */
export interface WebhookHistory {
  /** The seed of the delivery's draws, to replay a run. */
  seed: number | null;
  /** How its webhooks are ordered: `as_emitted`, `reversed`, `shuffled`, or a script's selector list. */
  order: WebhookScript['order'];
  /** Whether a payload's `sandbox_webhooks` scripts them (the fault rate knobs then leave it alone). */
  scripted: boolean;
  events: WebhookHistoryEntry[];
  /** Indexes of the events in the order they were handed to the receiver, one per copy. */
  sent: number[];
}

/** A delivery's whole story, for tests: its outcome and true state, and each event with what became of its webhook. */
export interface DeliveryHistory extends WebhookHistory {
  uid: string;
  /** null while undecided (drawn at pickup). */
  outcome: Outcome | null;
  /** What a read answers now: the upstream's true state. */
  status: string;
  /** Nothing more will happen to it. */
  finished: boolean;
  /**
   * The delivery.* events of its plan, in order (the delivered path while the outcome is open; a merchant cancel cuts
   * it short).
   */
  plan: string[];
}

export interface WebhookStats {
  /** Events handed to the sender, duplicates included: each got a first attempt. */
  sent: number;
  /** Events a receiver acknowledged with a 2xx. */
  delivered: number;
  /** Events given up after the last retry. */
  failed: number;
  /** Attempts after the first, over all events. */
  retries: number;
  /** Events waiting in a queue or in flight (including waiting for a retry). */
  pending: number;
  /** Events never sent on purpose (a script's `drop`, the dropRate knob): lost as after five failed retries. */
  dropped: number;
  /** Events kept back: held until released, gathered until their delivery ends, or held back by reorderRate. */
  held: number;
}

export interface SandboxOptions {
  /** Default 0: any free port. */
  port?: number;
  /** Default 127.0.0.1. Any address beyond loopback needs a `controlToken`. */
  host?: string;
  /**
   * When set, every `/sandbox/*` control route but the public key and the proof images needs it, sent as the
   * `Sandbox-Control-Token` header (16 characters or more). Required to listen beyond loopback.
   */
  controlToken?: string;
  /**
   * In production the control routes change nothing: every one that would (knobs, the webhook URL, advancing,
   * releasing, reassigning, keys, seeded orders) and `/sandbox/info` (the merchant keys) answer 403, whatever the
   * token. The host still changes it in process (setKnobs, setWebhookUrl …).
   */
  production?: boolean;
  platformId?: string;
  merchants?: SandboxMerchant[];
  webhookUrl?: string;
  issuer?: string;
  /** PKCS8 PEM RSA key for RS256 webhook signatures; else the one in `signingKeyFile`, else one made for the run. */
  privateKeyPem?: string;
  /**
   * A file holding the PKCS8 PEM signing key: read, or made (2048-bit RSA) and
   * written the first time, so restarts sign with the same key. Default
   * `<dataDir>/signing-key.pem` with a `dataDir`, else none.
   */
  signingKeyFile?: string;
  /**
   * A folder the sandbox keeps its world in (deliveries, their webhooks not yet
   * sent and their histories, revoked keys; world.sqlite) and its signing key: a
   * sandbox started again on it goes on where the last one stood. One process
   * at a time (SandboxWorldInUseError). Default: nothing kept, a world per run.
   */
  dataDir?: string;
  /**
   * Start with no clock running and no kept webhook going out until resume(), or
   * until setWebhookUrl() gives a URL: for a host that learns its webhook URL
   * once it listens (the facade), so a restored delivery does not move unheard.
   */
  paused?: boolean;
  knobs?: Partial<SandboxKnobs>;
  /** How many of the most recent requests `requests` keeps; default 10,000. */
  requestLogSize?: number;
  /** How many finished deliveries' webhook histories are kept (the most recent to finish); default 1,000. */
  webhookHistorySize?: number;
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
  /** Where webhooks go now; undefined: nowhere (polling only). */
  readonly webhookUrl: string | undefined;
  /**
   * Changes where webhooks go, from the next attempt on (undefined: nowhere); also `PUT /sandbox/webhook-url`. Resumes
   * a paused sandbox.
   */
  setWebhookUrl(url: string | undefined): void;
  /** Starts the clocks and the kept webhooks of a sandbox started `paused`; nothing when it runs already. */
  resume(): void;
  /** The folder its world is kept in, when it is. */
  readonly dataDir: string | undefined;
  /** Deliveries and orders it holds, those kept from before a restart included. */
  readonly deliveryCount: number;
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
  /**
   * Moves one delivery to its next milestone now (emitting its events). Rejects for an unknown or finished delivery.
   */
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
   * now. Undefined for an unknown uid, and once its history is forgotten (`webhookHistorySize`
   * deliveries finished after it). Also `GET /sandbox/deliveries/<uid>/history`.
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
