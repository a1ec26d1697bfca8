// A delivery's webhook script: `sandbox_webhooks` in its payload says which of
// its webhooks go out in which order, which are lost, sent twice or held back
// until a test releases them. The document allows all of it ("An event can
// arrive more than once and status events can arrive out of order", "at most
// five" retries), so tests script it exactly; the seeded draws live here too.
import { createHash, randomInt } from 'node:crypto';
import { DELIVERY_EVENT_NAMES, LOCATION_EVENT_NAMES } from './wire.js';
import type { Selector, WebhookOrderName, WebhookScript } from './types.js';

/**
 * The payload entry (`platform_payload`, or a seeded order's `partner_payload`) that scripts one delivery's webhooks.
 */
export const WEBHOOKS_PAYLOAD_FIELD = 'sandbox_webhooks';

/** How a batch of webhooks is arranged; an array lists selectors to send first, in that order. */
export const WEBHOOK_ORDERS = ['as_emitted', 'reversed', 'shuffled'] as const satisfies readonly WebhookOrderName[];

const SCRIPT_KEYS = ['order', 'seed', 'drop', 'duplicate', 'hold'] as const;
const EVENT_NAMES: ReadonlySet<string> = new Set<string>([...DELIVERY_EVENT_NAMES, ...LOCATION_EVENT_NAMES]);
/** Seeds are 32-bit: what the generator keeps of any larger number. */
export const MAX_SEED = 2 ** 32 - 1;

/** What is wrong with a `sandbox_webhooks` value, one message per problem, naming the entry; empty when it is fine. */
export function webhookScriptProblems(value: unknown, at: string): string[] {
  const problems: string[] = [];
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return [`The ${at} field must be an object with any of ${SCRIPT_KEYS.join(', ')}.`];
  for (const [name, entry] of Object.entries(value)) {
    if (!(SCRIPT_KEYS as readonly string[]).includes(name)) {
      problems.push(`The ${at}.${name} field is not known; use ${SCRIPT_KEYS.join(', ')}.`);
      continue;
    }
    if (name === 'seed') {
      if (!isSeed(entry)) problems.push(`The ${at}.seed field must be an integer from 0 to ${MAX_SEED}.`);
      continue;
    }
    if (name === 'order' && typeof entry === 'string') {
      if (!(WEBHOOK_ORDERS as readonly string[]).includes(entry))
        problems.push(`The ${at}.order field must be one of ${WEBHOOK_ORDERS.join(', ')}, or a list of selectors.`);
      continue;
    }
    problems.push(...selectorListProblems(entry, `${at}.${name}`));
  }
  return problems;
}

/** What is wrong with a list of selectors, one message per problem; empty when it is fine. */
export function selectorListProblems(value: unknown, at: string): string[] {
  if (!Array.isArray(value)) return [`The ${at} field must be a list of selectors (event indexes or names).`];
  return value.flatMap((selector) => {
    const problem = selectorProblem(selector);
    return problem ? [`The ${at} field has ${JSON.stringify(selector)}: ${problem}.`] : [];
  });
}

/** The script a valid `sandbox_webhooks` value describes (validation ran first); null when the payload has none. */
export function webhookScriptOf(payload: unknown): WebhookScript | null {
  const value =
    typeof payload === 'object' && payload !== null && !Array.isArray(payload)
      ? (payload as Record<string, unknown>)[WEBHOOKS_PAYLOAD_FIELD]
      : undefined;
  if (value === undefined) return null;
  const entries = value as Partial<Record<(typeof SCRIPT_KEYS)[number], unknown>>;
  const list = (entry: unknown): Selector[] => (Array.isArray(entry) ? (entry as Selector[]) : []);
  return {
    order: Array.isArray(entries.order)
      ? list(entries.order)
      : ((entries.order as WebhookOrderName | undefined) ?? 'as_emitted'),
    seed: isSeed(entries.seed) ? entries.seed : null,
    drop: list(entries.drop),
    duplicate: list(entries.duplicate),
    hold: list(entries.hold),
  };
}

/** The raw `sandbox_webhooks` entry of a payload, if any. */
export function webhookScriptInPayload(payload: unknown): unknown {
  return typeof payload === 'object' && payload !== null && !Array.isArray(payload)
    ? (payload as Record<string, unknown>)[WEBHOOKS_PAYLOAD_FIELD]
    : undefined;
}

export function isSeed(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= MAX_SEED;
}

function selectorProblem(selector: unknown): string | null {
  if (typeof selector === 'number')
    return Number.isInteger(selector) && selector >= 0 ? null : 'an index must be an integer >= 0';
  if (typeof selector !== 'string') return 'a selector is an index or an event name';
  if (selector === '*' || selector === 'delivery.*' || selector === 'location.*') return null;
  const [name, nth] = selector.split('#', 2) as [string, string | undefined];
  if (!EVENT_NAMES.has(name)) return 'not an event name (delivery.* or location.* as the document lists them)';
  if (nth !== undefined && !/^[1-9]\d*$/.test(nth)) return 'the occurrence after # counts from 1';
  return null;
}

/** What a selector is matched against: the event's index, name, and which occurrence of that name it is (1-based). */
export interface ScriptedEvent {
  index: number;
  eventName: string;
  occurrence: number;
}

export function matches(selector: Selector, event: ScriptedEvent): boolean {
  if (typeof selector === 'number') return event.index === selector;
  if (selector === '*') return true;
  if (selector.endsWith('.*')) return event.eventName.startsWith(selector.slice(0, -1));
  const [name, nth] = selector.split('#', 2);
  return event.eventName === name && (nth === undefined || Number(nth) === event.occurrence);
}

export const matchesAny = (selectors: readonly Selector[], event: ScriptedEvent) =>
  selectors.some((s) => matches(s, event));

/**
 * The events of `batch` (in true order), each once per copy, arranged:
 * `reversed` and `as_emitted` put an event's second copy right after it;
 * `shuffled` shuffles the copies too; a selector list sends what the selectors
 * pick (see `pick`), then whatever none picked, in true order.
 */
export function arrange<T extends ScriptedEvent>(
  batch: readonly T[],
  order: WebhookScript['order'],
  copiesOf: (event: T) => number,
  random: () => number,
): T[] {
  const withCopies = (events: readonly T[]) => events.flatMap((event) => Array<T>(copiesOf(event)).fill(event));
  if (order === 'as_emitted') return withCopies(batch);
  if (order === 'reversed') return withCopies([...batch].reverse());
  if (order === 'shuffled') return shuffle(withCopies(batch), random);
  const { sequence, picked } = pick(batch, order, copiesOf);
  return [...sequence, ...withCopies(batch.filter((event) => !picked.has(event)))];
}

/**
 * What each selector picks of `batch`, selector by selector (each selector's
 * events in true order): an event picked twice is sent twice; one the script
 * duplicates gets its second copy right after its first.
 */
export function pick<T extends ScriptedEvent>(
  batch: readonly T[],
  selectors: readonly Selector[],
  copiesOf: (event: T) => number,
): { sequence: T[]; picked: Set<T> } {
  const picked = new Set<T>();
  const sequence: T[] = [];
  for (const selector of selectors) {
    for (const event of batch) {
      if (!matches(selector, event)) continue;
      sequence.push(event);
      if (!picked.has(event)) for (let copy = 1; copy < copiesOf(event); copy++) sequence.push(event);
      picked.add(event);
    }
  }
  return { sequence, picked };
}

/** Fisher-Yates with the given draw. */
function shuffle<T>(items: T[], random: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

// ---------------------------------------------------------------------------
// Seeded draws

/** mulberry32: a small 32-bit generator, enough to replay a test's faults exactly from its seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A seed derived from another and a label: one delivery's, or one stream of draws of a delivery. */
export function deriveSeed(seed: number, label: string | number): number {
  return createHash('sha256').update(`${seed}:${label}`).digest().readUInt32BE(0);
}

/** A fresh seed, for a delivery nobody seeded: shown in its history, so a failing run can be replayed. */
export function freshSeed(): number {
  return randomInt(0, 2 ** 32 - 1);
}
