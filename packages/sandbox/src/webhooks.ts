// Outbound webhooks: each event is POSTed as JSON with `Authorization: Bearer
// <JWT>` (RS256; claims iss, iat, exp and `payload` = the same body), retried up
// to 5 times with doubling gaps. Events of one delivery go out one at a time in
// order, unless the fault knobs or the delivery's script (webhook-script.ts)
// drop, duplicate, reorder or hold them on purpose; every event is kept in the
// delivery's history with what became of it, until the delivery has finished and
// more than `historySize` others have finished after it.
import { setMaxListeners } from 'node:events';
import type { KeyObject } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import type { SandboxWebhookEvent } from './representations.js';
import { signWebhook } from './signing.js';
import type {
  SandboxKnobs,
  Selector,
  WebhookHistory,
  WebhookHistoryEntry,
  WebhookScript,
  WebhookStats,
} from './types.js';
import { arrange, deriveSeed, matchesAny, pick, seededRandom, type ScriptedEvent } from './webhook-script.js';

export const MAX_RETRIES = 5;

/** How many finished deliveries' webhook histories are kept unless told otherwise: a few kB each. */
export const DEFAULT_WEBHOOK_HISTORY_SIZE = 1_000;

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
  uid: string;
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
  /** The copy being sent (or waiting for its retry): taken off the queue, not yet settled. */
  inFlight: Outbound | null;
  running: boolean;
  /** The delivery's last event came: nothing more will be added. */
  finished: boolean;
  /** Once finished with nothing left to send or keep: its place among the finished (the oldest are forgotten first). */
  settled: number | null;
  /** Resolved when the queue is empty and nothing is in flight. */
  drained: (() => void)[];
}

export interface WebhookSenderOptions {
  knobs: SandboxKnobs;
  issuer: string;
  privateKey: KeyObject;
  /** Read on every attempt: the URL may change (or go away) while events wait. */
  webhookUrl: () => string | undefined;
  /**
   * How many finished deliveries' histories are kept: once a finished delivery
   * has nothing left to send or keep back it joins them, and the one finished
   * longest ago is forgotten. Default DEFAULT_WEBHOOK_HISTORY_SIZE.
   */
  historySize?: number;
  /** Told when a delivery's webhooks change (an event, a send, a fate) or are forgotten: the world file writes them. */
  changed?: (uid: string) => void;
}

/**
 * One delivery's webhooks as the world file keeps them: the history, and the
 * events not yet settled with their bodies (queued, in flight, kept back), so a
 * restarted sandbox sends what it had not (an event in flight at the stop goes
 * again: the document allows a webhook to arrive twice).
 */
export interface OutboxSnapshot {
  script: WebhookScript | null;
  order: WebhookScript['order'];
  seed: number | null;
  finished: boolean;
  settled: number | null;
  entries: WebhookHistoryEntry[];
  sent: number[];
  /** The bodies of the events below, by index. */
  bodies: Record<number, SandboxWebhookEvent>;
  /** Indexes to send, one per copy, the one in flight first. */
  queue: number[];
  held: number[];
  waiting: number[];
  reordered: number | null;
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
  /** Finished deliveries with nothing left to send, in the order they settled: the first is forgotten first. */
  private readonly settledUids: string[] = [];
  private settledCount = 0;
  /** How many finished deliveries' histories are kept. */
  readonly historySize: number;
  /** False while paused: restored events wait in their queues until resume(). */
  private sending: boolean;

  constructor(
    private readonly options: WebhookSenderOptions,
    { paused = false } = {},
  ) {
    this.historySize = options.historySize ?? DEFAULT_WEBHOOK_HISTORY_SIZE;
    if (!Number.isInteger(this.historySize) || this.historySize < 0)
      throw new RangeError('webhookHistorySize must be an integer >= 0');
    this.sending = !paused;
  }

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
      box.finished = true;
      this.send(box, this.arranged(box, box.waiting));
      box.waiting = [];
      if (box.reordered) this.send(box, this.copies(box, box.reordered));
      box.reordered = null;
    }
    this.changed(box);
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
    this.changed(box);
    void this.drain(box);
    await new Promise<void>((resolve) => (box.running || box.queue.length > 0 ? box.drained.push(resolve) : resolve()));
    return [...new Set(released.map((item) => item.index))];
  }

  /**
   * The webhooks of delivery `uid` so far; undefined when it has sent none, or its history was forgotten (historySize).
   */
  history(uid: string): WebhookHistory | undefined {
    const box = this.outboxes.get(uid);
    if (!box) return undefined;
    return {
      seed: box.seed,
      order: box.order,
      scripted: box.script !== null,
      events: box.entries.map((entry) => ({ ...entry })),
      sent: [...box.sent],
    };
  }

  /**
   * What the world file keeps of delivery `uid`'s webhooks; undefined when there is nothing (or no longer anything) to
   * keep.
   */
  snapshot(uid: string): OutboxSnapshot | undefined {
    const box = this.outboxes.get(uid);
    if (!box) return undefined;
    const unsent = [
      ...(box.inFlight ? [box.inFlight] : []),
      ...box.queue,
      ...box.held,
      ...box.waiting,
      ...(box.reordered ? [box.reordered] : []),
    ];
    return {
      script: box.script,
      order: box.order,
      seed: box.seed,
      finished: box.finished,
      settled: box.settled,
      entries: box.entries,
      sent: box.sent,
      bodies: Object.fromEntries(unsent.map((item) => [item.index, item.body])),
      queue: [...(box.inFlight ? [box.inFlight] : []), ...box.queue].map((item) => item.index),
      held: box.held.map((item) => item.index),
      waiting: box.waiting.map((item) => item.index),
      reordered: box.reordered?.index ?? null,
    };
  }

  /**
   * Takes back a delivery's webhooks as a world file kept them (before any of its
   * events, restored deliveries in the order they settled). What was queued or in
   * flight is sent again once the sender runs (at once, or at resume()).
   */
  restore(uid: string, snapshot: OutboxSnapshot): void {
    const occurrences = new Map<string, number>();
    const items = snapshot.entries.map((entry): Outbound | undefined => {
      const occurrence = (occurrences.get(entry.event_name) ?? 0) + 1;
      occurrences.set(entry.event_name, occurrence);
      const body = snapshot.bodies[entry.index];
      return body && { index: entry.index, eventName: entry.event_name, occurrence, body, entry };
    });
    const take = (indexes: readonly number[]) => indexes.flatMap((index) => items[index] ?? []);
    const box: Outbox = {
      uid,
      script: snapshot.script,
      order: snapshot.order,
      seed: snapshot.seed,
      // Its draws go on from a stream of their own: a restart is not part of a replayed run.
      random: snapshot.seed === null ? Math.random : seededRandom(deriveSeed(snapshot.seed, 'webhooks after restart')),
      entries: snapshot.entries,
      occurrences,
      sent: snapshot.sent,
      waiting: take(snapshot.waiting),
      held: take(snapshot.held),
      reordered: snapshot.reordered === null ? null : (items[snapshot.reordered] ?? null),
      queue: take(snapshot.queue),
      inFlight: null,
      running: false,
      finished: snapshot.finished,
      settled: null,
      drained: [],
    };
    this.outboxes.set(uid, box);
    this.pending += box.queue.length;
    this.kept += box.waiting.length + box.held.length + (box.reordered ? 1 : 0);
    if (snapshot.settled !== null) this.settle(box);
    else if (this.sending) void this.drain(box);
  }

  /** Starts sending what waits in the queues (restored events), after a paused start. */
  resume(): void {
    if (this.sending) return;
    this.sending = true;
    for (const box of this.outboxes.values()) void this.drain(box);
  }

  stats(): WebhookStats {
    return { ...this.counters, pending: this.pending, held: this.kept };
  }

  /**
   * Resolves once nothing is queued or in flight. A kept-back event is not pending: it waits for a release or the
   * delivery's next event.
   */
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
        uid,
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
        inFlight: null,
        running: false,
        finished: false,
        settled: null,
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

  /**
   * A scripted delivery: its script alone decides; the fault rate knobs leave it alone, so a test gets exactly what it
   * wrote.
   */
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
    if (box.running || !this.sending) return;
    box.running = true;
    try {
      for (let item = box.queue.shift(); item; item = box.queue.shift()) {
        box.inFlight = item;
        box.sent.push(item.index);
        this.changed(box);
        await this.deliver(item);
        if (this.lifetime.signal.aborted) return;
        box.inFlight = null;
        this.changed(box);
        this.pending--;
        if (this.pending === 0) this.notifyIdle();
      }
    } finally {
      box.running = false;
      if (box.queue.length === 0) this.notifyDrained(box);
      if (!this.lifetime.signal.aborted) this.settle(box);
    }
  }

  /**
   * A finished delivery with nothing left to send or keep back joins the settled
   * ones; past historySize of them, the one settled longest ago is forgotten.
   */
  private settle(box: Outbox): void {
    if (
      !box.finished ||
      box.settled !== null ||
      box.running ||
      box.queue.length > 0 ||
      box.held.length > 0 ||
      box.waiting.length > 0 ||
      box.reordered
    )
      return;
    box.settled = ++this.settledCount;
    this.settledUids.push(box.uid);
    this.changed(box);
    while (this.settledUids.length > this.historySize) {
      const uid = this.settledUids.shift()!;
      this.outboxes.delete(uid);
      this.options.changed?.(uid);
    }
  }

  private changed(box: Outbox): void {
    this.options.changed?.(box.uid);
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
    return signWebhook(event, this.options.issuer, this.signingKey ?? this.options.privateKey);
  }

  /** The key set by useKey, once the upstream has changed keys (the options' key until then). */
  private signingKey: KeyObject | undefined;

  /**
   * Signs every event from now on with this key: a key change, as the upstream's account manager would announce one.
   */
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
