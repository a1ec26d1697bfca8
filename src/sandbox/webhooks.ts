// Outbound webhooks: each event is POSTed as JSON with `Authorization: Bearer
// <JWT>` (RS256; claims iss, iat, exp and `payload` = the same body), retried up
// to 5 times with doubling gaps. Events of one delivery go out one at a time in
// order, unless the fault knobs or the delivery's script (webhook-script.ts)
// drop, duplicate, reorder or hold them on purpose; every event is kept in the
// delivery's history with what became of it.
import { setMaxListeners } from 'node:events';
import { createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { SignJWT } from 'jose';
import { Agent, request } from 'undici';
import type { SandboxWebhookEvent } from './representations.js';
import type { SandboxKnobs, Selector, WebhookHistory, WebhookHistoryEntry, WebhookScript, WebhookStats } from './types.js';
import { arrange, deriveSeed, matchesAny, pick, seededRandom, type ScriptedEvent } from './webhook-script.js';

export const MAX_RETRIES = 5;
/** The JWT outlives the slowest retry schedule a receiver could see. */
const JWT_LIFETIME_S = 300;

export interface SigningKeys {
  privateKey: KeyObject;
  publicKeyPem: string;
}

/** Imports the given PKCS8 PEM, or generates a fresh 2048-bit RSA pair for this run. */
export async function loadSigningKeys(privateKeyPem?: string): Promise<SigningKeys> {
  const privateKey = privateKeyPem
    ? createPrivateKey({ key: privateKeyPem, format: 'pem' })
    : (await promisify(generateKeyPair)('rsa', { modulusLength: 2048 })).privateKey;
  if (privateKey.asymmetricKeyType !== 'rsa') throw new Error('the webhook signing key must be an RSA key');
  const publicKeyPem = createPublicKey(privateKey).export({ type: 'spki', format: 'pem' }).toString();
  return { privateKey, publicKeyPem };
}

/** What the sandbox knows of the delivery an event belongs to; a bare enqueue (a test's own sender) has none. */
export interface EventOrigin {
  /** The read status right after the event. */
  readStatus: string;
  /** The delivery's `sandbox_webhooks` script; null for none. Read with its first event. */
  script: WebhookScript | null;
  /** The delivery's seed. Read with its first event. */
  seed: number;
}

/** One event on its way out: its body, its place in the true order, and its entry in the history. */
interface Outbound extends ScriptedEvent {
  body: SandboxWebhookEvent;
  entry: WebhookHistoryEntry;
}

/** One delivery's webhooks: the history, and the events kept back or queued. */
interface Outbox {
  script: WebhookScript | null;
  order: WebhookScript['order'];
  seed: number | null;
  /** Draws for the fault knobs and the shuffle. */
  random: () => number;
  entries: WebhookHistoryEntry[];
  occurrences: Map<string, number>;
  sent: number[];
  /** Gathered until the delivery ends (an order other than as_emitted). */
  waiting: Outbound[];
  /** Held until released. */
  held: Outbound[];
  /** The one event reorderRate holds back until the delivery's next one has gone. */
  reordered: Outbound | null;
  /** To send, one item per copy, in order. */
  queue: Outbound[];
  running: boolean;
  /** Resolved when the queue is empty and nothing is in flight. */
  drained: (() => void)[];
}

export interface WebhookSenderOptions {
  knobs: SandboxKnobs;
  issuer: string;
  privateKey: KeyObject;
  /** Read on every attempt: the URL may change (or go away) while events wait. */
  webhookUrl: () => string | undefined;
}

export class WebhookSender {
  private readonly outboxes = new Map<string, Outbox>();
  private readonly counters = { sent: 0, delivered: 0, failed: 0, retries: 0, dropped: 0 };
  private pending = 0;
  private kept = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly lifetime = ((controller) => {
    // Every webhook attempt in flight listens to it until it settles: as many listeners as attempts, by design.
    setMaxListeners(0, controller.signal);
    return controller;
  })(new AbortController());
  // A private pool so stop() can close every socket the sandbox opened.
  private readonly agent = new Agent({ keepAliveTimeout: 2_000, connections: 64 });

  constructor(private readonly options: WebhookSenderOptions) {}

  /**
   * Takes one event of delivery `uid`, as it happens. `final` marks the
   * delivery's last event: it is never held back by reorderRate, and sends
   * what that knob or the delivery's order kept back. `origin` ties the event to
   * the sandbox's delivery (its script, seed and history).
   */
  enqueue(uid: string, event: SandboxWebhookEvent, final: boolean, origin?: EventOrigin): void {
    if (this.lifetime.signal.aborted) return;
    const box = this.outboxFor(uid, origin);
    const item = this.record(box, event, origin?.readStatus ?? null);
    // With no URL on file no events are sent; state is only visible by polling.
    if (!this.options.webhookUrl()) item.entry.fate = 'not_sent';
    else if (box.script) this.takeScripted(box, item);
    else this.takeUnscripted(box, item, final);
    if (final) {
      this.send(box, this.arranged(box, box.waiting));
      box.waiting = [];
      if (box.reordered) this.send(box, this.copies(box, box.reordered));
      box.reordered = null;
    }
    void this.drain(box);
  }

  /**
   * Sends events of delivery `uid` kept back (held, or gathered until the
   * delivery ends): those the selectors pick, in the selectors' order, or with
   * none given, everything kept (the gathered ones arranged, then the held ones
   * in true order). Resolves with their indexes once the receiver has
   * acknowledged them (or they were given up); undefined for a delivery with no events.
   */
  async release(uid: string, selectors?: readonly Selector[]): Promise<number[] | undefined> {
    const box = this.outboxes.get(uid);
    if (!box) return undefined;
    let released: Outbound[];
    if (selectors === undefined) {
      released = [...this.arranged(box, box.waiting), ...box.held.flatMap((item) => this.copies(box, item))];
      box.waiting = [];
      box.held = [];
    } else {
      const kept = [...box.waiting, ...box.held].sort((a, b) => a.index - b.index);
      const { sequence, picked } = pick(kept, selectors, (item) => this.copiesOf(box, item));
      released = sequence;
      box.waiting = box.waiting.filter((item) => !picked.has(item));
      box.held = box.held.filter((item) => !picked.has(item));
    }
    this.send(box, released);
    void this.drain(box);
    await new Promise<void>((resolve) => (box.running || box.queue.length > 0 ? box.drained.push(resolve) : resolve()));
    return [...new Set(released.map((item) => item.index))];
  }

  /** The webhooks of delivery `uid` so far; undefined when it has sent none. */
  history(uid: string): WebhookHistory | undefined {
    const box = this.outboxes.get(uid);
    if (!box) return undefined;
    return { seed: box.seed, order: box.order, scripted: box.script !== null, events: box.entries.map((entry) => ({ ...entry })), sent: [...box.sent] };
  }

  stats(): WebhookStats {
    return { ...this.counters, pending: this.pending, held: this.kept };
  }

  /** Resolves once nothing is queued or in flight. A kept-back event is not pending: it waits for a release or the delivery's next event. */
  idle(): Promise<void> {
    if (this.pending === 0 || this.lifetime.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Stops sending: aborts in-flight requests and retry waits, closes sockets. */
  async close(): Promise<void> {
    if (this.lifetime.signal.aborted) return;
    this.lifetime.abort();
    for (const box of this.outboxes.values()) this.notifyDrained(box);
    this.outboxes.clear();
    this.pending = 0;
    this.notifyIdle();
    await this.agent.destroy().catch(() => undefined);
  }

  private outboxFor(uid: string, origin: EventOrigin | undefined): Outbox {
    let box = this.outboxes.get(uid);
    if (!box) {
      const script = origin?.script ?? null;
      const seed = origin?.seed ?? null;
      box = {
        script,
        // The order is fixed with the delivery's first event: a knob change applies to later bookings.
        order: script ? script.order : this.options.knobs.webhookOrder,
        seed,
        random: seed === null ? Math.random : seededRandom(deriveSeed(seed, 'webhooks')),
        entries: [],
        occurrences: new Map(),
        sent: [],
        waiting: [],
        held: [],
        reordered: null,
        queue: [],
        running: false,
        drained: [],
      };
      this.outboxes.set(uid, box);
    }
    return box;
  }

  /** Adds the event to the delivery's history, in true order. */
  private record(box: Outbox, body: SandboxWebhookEvent, readStatus: string | null): Outbound {
    const occurrence = (box.occurrences.get(body.event_name) ?? 0) + 1;
    box.occurrences.set(body.event_name, occurrence);
    const entry: WebhookHistoryEntry = {
      index: box.entries.length,
      event_name: body.event_name,
      status: body.status ?? null,
      read_status: readStatus,
      at: new Date().toISOString(),
      fate: 'queued',
      copies: 0,
      acknowledged: 0,
    };
    box.entries.push(entry);
    return { index: entry.index, eventName: body.event_name, occurrence, body, entry };
  }

  /** A scripted delivery: its script alone decides; the fault rate knobs leave it alone, so a test gets exactly what it wrote. */
  private takeScripted(box: Outbox, item: Outbound): void {
    const script = box.script!;
    if (matchesAny(script.drop, item)) this.drop(item);
    else if (matchesAny(script.hold, item)) this.keep(box.held, item, 'held');
    else if (box.order !== 'as_emitted') this.keep(box.waiting, item, 'waiting');
    else this.send(box, this.copies(box, item));
  }

  /** Any other delivery: the dropRate, webhookOrder, reorderRate and duplicateRate knobs. */
  private takeUnscripted(box: Outbox, item: Outbound, final: boolean): void {
    const { dropRate, reorderRate } = this.options.knobs;
    if (dropRate > 0 && box.random() < dropRate) return this.drop(item);
    if (box.order !== 'as_emitted') return this.keep(box.waiting, item, 'waiting');
    if (!final && box.reordered === null && reorderRate > 0 && box.random() < reorderRate) {
      box.reordered = item;
      item.entry.fate = 'waiting';
      this.kept++;
      return;
    }
    this.send(box, this.copies(box, item));
    if (box.reordered !== null) {
      this.send(box, this.copies(box, box.reordered));
      box.reordered = null;
    }
  }

  private drop(item: Outbound): void {
    item.entry.fate = 'dropped';
    this.counters.dropped++;
  }

  private keep(list: Outbound[], item: Outbound, fate: 'held' | 'waiting'): void {
    item.entry.fate = fate;
    list.push(item);
    this.kept++;
  }

  /** How many copies of the event go out: two for a duplicate (the script's `duplicate`, else a duplicateRate draw). */
  private copiesOf(box: Outbox, item: Outbound): number {
    if (box.script) return matchesAny(box.script.duplicate, item) ? 2 : 1;
    const { duplicateRate } = this.options.knobs;
    return duplicateRate > 0 && box.random() < duplicateRate ? 2 : 1;
  }

  private copies(box: Outbox, item: Outbound): Outbound[] {
    return Array<Outbound>(this.copiesOf(box, item)).fill(item);
  }

  /** The gathered events in the delivery's order, with their copies. */
  private arranged(box: Outbox, batch: readonly Outbound[]): Outbound[] {
    return arrange(batch, box.order, (item) => this.copiesOf(box, item), box.random);
  }

  /** Queues the items (one per copy) to go out in this order. */
  private send(box: Outbox, items: readonly Outbound[]): void {
    for (const item of items) {
      // An event kept back is no longer kept once it is on its way (count it once, not per copy).
      if (item.entry.fate === 'held' || item.entry.fate === 'waiting') this.kept--;
      if (item.entry.fate !== 'delivered') item.entry.fate = 'queued';
      item.entry.copies++;
      box.queue.push(item);
      this.pending++;
    }
  }

  /** One worker per delivery: the next event waits until the previous one is delivered or given up. */
  private async drain(box: Outbox): Promise<void> {
    if (box.running) return;
    box.running = true;
    try {
      for (let item = box.queue.shift(); item; item = box.queue.shift()) {
        box.sent.push(item.index);
        await this.deliver(item);
        if (this.lifetime.signal.aborted) return;
        this.pending--;
        if (this.pending === 0) this.notifyIdle();
      }
    } finally {
      box.running = false;
      if (box.queue.length === 0) this.notifyDrained(box);
    }
  }

  private async deliver(item: Outbound): Promise<void> {
    const { entry } = item;
    this.counters.sent++;
    for (let attempt = 0; attempt <= MAX_RETRIES; attempt++) {
      if (attempt > 0) {
        // Gaps grow: base, 2×base, 4×base, ...
        const gap = this.options.knobs.retryBaseMs * 2 ** (attempt - 1);
        try {
          await sleep(gap, undefined, { signal: this.lifetime.signal });
        } catch {
          return; // stopped
        }
        this.counters.retries++;
      }
      const url = this.options.webhookUrl();
      if (url === undefined) {
        // The URL was removed: nobody to tell any more.
        if (entry.acknowledged === 0) entry.fate = 'not_sent';
        return;
      }
      if (await this.attempt(url, item.body)) {
        this.counters.delivered++;
        entry.acknowledged++;
        entry.fate = 'delivered';
        return;
      }
      if (this.lifetime.signal.aborted) return;
    }
    this.counters.failed++;
    if (entry.acknowledged === 0) entry.fate = 'failed';
  }

  /** One POST; true when answered 2xx within webhookTimeoutMs. */
  private async attempt(url: string, event: SandboxWebhookEvent): Promise<boolean> {
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), this.options.knobs.webhookTimeoutMs);
    const onStop = () => timeout.abort();
    this.lifetime.signal.addEventListener('abort', onStop, { once: true });
    try {
      const token = await this.sign(event);
      const response = await request(url, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify(event),
        signal: timeout.signal,
      });
      // Read the answer to the end so the socket can be reused.
      await response.body.dump();
      return response.statusCode >= 200 && response.statusCode < 300;
    } catch {
      return false; // refused, reset, or too slow: all count as a failed attempt
    } finally {
      clearTimeout(timer);
      this.lifetime.signal.removeEventListener('abort', onStop);
    }
  }

  private sign(event: SandboxWebhookEvent): Promise<string> {
    return new SignJWT({ payload: event })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
      .setIssuer(this.options.issuer)
      .setIssuedAt()
      .setExpirationTime(`${JWT_LIFETIME_S}s`)
      .sign(this.signingKey ?? this.options.privateKey);
  }

  /** The key set by useKey, once the upstream has changed keys (the options' key until then). */
  private signingKey: KeyObject | undefined;

  /** Signs every event from now on with this key: a key change, as the upstream's account manager would announce one. */
  useKey(privateKey: KeyObject): void {
    this.signingKey = privateKey;
  }

  private notifyDrained(box: Outbox): void {
    const waiters = box.drained;
    box.drained = [];
    for (const resolve of waiters) resolve();
  }

  private notifyIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
