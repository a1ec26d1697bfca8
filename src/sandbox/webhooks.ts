// Outbound webhooks: each event is POSTed as JSON with `Authorization: Bearer
// <JWT>` (RS256; claims iss, iat, exp and `payload` = the same body), retried up
// to 5 times with doubling gaps. Events of one delivery go out one at a time in
// order, unless the duplicate/reorder knobs perturb that on purpose.
import { setMaxListeners } from 'node:events';
import { createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { SignJWT } from 'jose';
import { Agent, request } from 'undici';
import type { SandboxKnobs } from './index.js';
import type { SandboxWebhookEvent } from './representations.js';

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
}

interface DeliveryQueue {
  events: SandboxWebhookEvent[];
  running: boolean;
  /** An event the reorder knob holds back until the delivery's next event has gone first. */
  held: SandboxWebhookEvent | null;
}

export interface WebhookSenderOptions {
  knobs: SandboxKnobs;
  issuer: string;
  privateKey: KeyObject;
  /** Read on every attempt: the URL may change (or go away) while events wait. */
  webhookUrl: () => string | undefined;
}

export class WebhookSender {
  private readonly queues = new Map<string, DeliveryQueue>();
  private readonly counters = { sent: 0, delivered: 0, failed: 0, retries: 0 };
  private pending = 0;
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
   * Queues one event of delivery `uid`. `final` marks the delivery's last event:
   * it is never held back, and releases any event that is.
   */
  enqueue(uid: string, event: SandboxWebhookEvent, final: boolean): void {
    if (this.lifetime.signal.aborted) return;
    // With no URL on file no events are sent; state is only visible by polling.
    if (!this.options.webhookUrl()) return;
    const queue = this.queueFor(uid);
    const { reorderRate } = this.options.knobs;
    if (!final && queue.held === null && reorderRate > 0 && Math.random() < reorderRate) {
      queue.held = event;
      return;
    }
    this.push(queue, event);
    if (queue.held !== null) {
      this.push(queue, queue.held);
      queue.held = null;
    }
    void this.drain(uid, queue);
  }

  stats(): WebhookStats {
    return { ...this.counters, pending: this.pending };
  }

  /** Resolves once nothing is queued or in flight. A held-back event is not pending: it waits for the delivery's next event. */
  idle(): Promise<void> {
    if (this.pending === 0 || this.lifetime.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Stops sending: aborts in-flight requests and retry waits, closes sockets. */
  async close(): Promise<void> {
    if (this.lifetime.signal.aborted) return;
    this.lifetime.abort();
    this.queues.clear();
    this.pending = 0;
    this.notifyIdle();
    await this.agent.destroy().catch(() => undefined);
  }

  private queueFor(uid: string): DeliveryQueue {
    let queue = this.queues.get(uid);
    if (!queue) {
      queue = { events: [], running: false, held: null };
      this.queues.set(uid, queue);
    }
    return queue;
  }

  private push(queue: DeliveryQueue, event: SandboxWebhookEvent): void {
    const { duplicateRate } = this.options.knobs;
    const copies = duplicateRate > 0 && Math.random() < duplicateRate ? 2 : 1;
    for (let i = 0; i < copies; i++) queue.events.push(event);
    this.pending += copies;
  }

  /** One worker per delivery: the next event waits until the previous one is delivered or given up. */
  private async drain(uid: string, queue: DeliveryQueue): Promise<void> {
    if (queue.running) return;
    queue.running = true;
    try {
      for (let event = queue.events.shift(); event; event = queue.events.shift()) {
        await this.deliver(event);
        if (this.lifetime.signal.aborted) return;
        this.pending--;
        if (this.pending === 0) this.notifyIdle();
      }
    } finally {
      queue.running = false;
      if (queue.events.length === 0 && queue.held === null && this.queues.get(uid) === queue) this.queues.delete(uid);
    }
  }

  private async deliver(event: SandboxWebhookEvent): Promise<void> {
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
      if (url === undefined) return; // the URL was removed: nobody to tell any more
      if (await this.attempt(url, event)) {
        this.counters.delivered++;
        return;
      }
      if (this.lifetime.signal.aborted) return;
    }
    this.counters.failed++;
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

  private notifyIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
