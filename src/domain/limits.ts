// Bounds on what merchants put into a booking and on what an event may hold.
// The upstream echoes a booking's fields (items, payload, names) in every webhook,
// and a webhook's JWT travels in one HTTP header: inputs within these bounds give
// events well under WEBHOOK_MAX_TOKEN_BYTES (test/integration/large-webhooks.test.ts
// books a delivery with every field at its bound and checks the sandbox's token).

/** Deepest nesting accepted in a webhook event (the event object itself is level 1). */
export const MAX_EVENT_DEPTH = 64;

/** Bounds on DeliveryInput fields, beyond the upstream's own rules (pickup phone 15, pickup instructions 512). */
export const INPUT_LIMITS = {
  /** Names, address parts, emails, phones, references, vehicle size: one line of text. */
  shortText: 200,
  /** Dropoff instructions and the package description. */
  longText: 2_000,
  items: 100,
  /** An item's name, ids and barcode. */
  itemText: 100,
  itemDescription: 300,
  requirements: 20,
  requirementText: 100,
  /** The platform or partner payload, as JSON text. */
  payloadBytes: 32_768,
  payloadDepth: 16,
  /**
   * The whole request body as JSON. Every field at its bound in plain ASCII gives
   * about 130 KB; this catches the rest (text that UTF-8 or JSON escaping inflates).
   * An event carries the body plus about 2 KB, and its token is 4/3 of the event:
   * about 220 KB, under the default WEBHOOK_MAX_TOKEN_BYTES of 256 KiB.
   */
  bodyBytes: 163_840,
} as const;

/**
 * Whether a JSON value nests deeper than `limit` levels (a scalar is level 0, an
 * object or array one more than its deepest member). Iterative: a value nested
 * thousands of levels deep costs a loop, not the call stack.
 */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const pending: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (pending.length > 0) {
    const { value: current, depth } = pending.pop()!;
    if (current === null || typeof current !== 'object') continue;
    if (depth + 1 > limit) return true;
    for (const inner of Array.isArray(current) ? current : Object.values(current)) {
      if (inner !== null && typeof inner === 'object') pending.push({ value: inner, depth: depth + 1 });
    }
  }
  return false;
}
