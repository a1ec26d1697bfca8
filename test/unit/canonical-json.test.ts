// The canonical JSON of an event is what de-duplicates it (its SHA-256 is stored
// with every event), so its text must never change: the recursive form written
// for speed gives, for every value, the text of the iterative form stored hashes
// were made with (copied here as the reference), the iterative form itself
// still writing values nested deeper than the recursion goes.
import { describe, expect, it } from 'vitest';
import { canonicalJson, fingerprint } from '../../src/domain/canonical-json.js';

/** The iterative canonical JSON as every stored hash was made with it (src/domain/canonical-json.ts at 73fe34c). */
function reference(value: unknown): string {
  const out: string[] = [];
  const work: Array<{ text: string } | { value: unknown }> = [{ value }];
  while (work.length > 0) {
    const next = work.pop()!;
    if ('text' in next) {
      out.push(next.text);
      continue;
    }
    const current = next.value;
    if (Array.isArray(current)) {
      const pieces: Array<{ text: string } | { value: unknown }> = [{ text: '[' }];
      current.forEach((inner, index) => {
        if (index > 0) pieces.push({ text: ',' });
        pieces.push({ value: inner === undefined ? null : inner });
      });
      pieces.push({ text: ']' });
      for (let i = pieces.length - 1; i >= 0; i -= 1) work.push(pieces[i]!);
    } else if (current && typeof current === 'object') {
      const entries = Object.entries(current as Record<string, unknown>)
        .filter(([, inner]) => inner !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      const pieces: Array<{ text: string } | { value: unknown }> = [{ text: '{' }];
      entries.forEach(([key, inner], index) => {
        pieces.push({ text: `${index > 0 ? ',' : ''}${JSON.stringify(key)}:` }, { value: inner });
      });
      pieces.push({ text: '}' });
      for (let i = pieces.length - 1; i >= 0; i -= 1) work.push(pieces[i]!);
    } else {
      out.push(JSON.stringify(current ?? null));
    }
  }
  return out.join('');
}

/** A small deterministic generator (mulberry32), so a failure reproduces. */
function random(seed: number) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const KEYS = [
  'uid',
  'event_name',
  'a',
  'B',
  'b',
  'Z',
  '_',
  '10',
  '2',
  '1',
  '',
  'é',
  'e\u0301',
  '\ud83d\ude00',
  '__proto__',
  'key with "quotes"',
  'line\nbreak',
  'driver_location',
];
const STRINGS = ['', 'x', 'Dropoff Enroute', 'ünïcödé', '\u2028', '"quoted"', 'back\\slash', '\ud83d\ude00', 'tab\t'];
const NUMBERS = [0, -0, 1, -1, 37.7749, -122.4194, 1e21, 1e-7, Number.MAX_SAFE_INTEGER, NaN, Infinity, 0.1 + 0.2];

function value(next: () => number, depth: number): unknown {
  const pick = <T>(items: readonly T[]) => items[Math.floor(next() * items.length)]!;
  const kind = depth > 5 ? Math.floor(next() * 5) : Math.floor(next() * 8);
  switch (kind) {
    case 0:
      return pick(STRINGS);
    case 1:
      return pick(NUMBERS);
    case 2:
      return pick([true, false, null, undefined]);
    case 3:
      return pick(STRINGS) + String(Math.floor(next() * 1000));
    case 4:
      return Math.floor(next() * 2 ** 31) - 2 ** 30;
    case 5:
    case 6: {
      const object: Record<string, unknown> = {};
      const size = Math.floor(next() * 6);
      for (let k = 0; k < size; k += 1) {
        const key = next() < 0.8 ? pick(KEYS) : `k${Math.floor(next() * 50)}`;
        // JSON.parse makes __proto__ an own key: so does defineProperty.
        Object.defineProperty(object, key, {
          value: value(next, depth + 1),
          enumerable: true,
          configurable: true,
          writable: true,
        });
      }
      return object;
    }
    default:
      return Array.from({ length: Math.floor(next() * 5) }, () => value(next, depth + 1));
  }
}

describe('canonical JSON', () => {
  it('writes the text the iterative form wrote, for thousands of values', () => {
    const next = random(32);
    for (let n = 0; n < 5_000; n += 1) {
      const v = value(next, 0);
      expect(canonicalJson(v)).toBe(reference(v));
    }
  });

  it('writes the same for events as JSON.parse gives them, sparse arrays, dates and functions', () => {
    const event = JSON.parse(
      '{"uid":"u1","event_name":"delivery.assigned","__proto__":{"x":1},"driver_location":{"lng":-122.4,"lat":37.7},"items":[{"b":2,"a":1}],"status":null}',
    );
    // eslint-disable-next-line no-sparse-arrays -- holes are what this case is about
    const odd = [[1, , 3], [, 2], { when: new Date(0), call: () => 1, gone: undefined }, [undefined, () => 1]];
    for (const v of [event, ...odd]) expect(canonicalJson(v)).toBe(reference(v));
  });

  it('writes values nested deeper than its recursion goes, as the iterative form did', () => {
    let deep: unknown = { leaf: [1, 2] };
    for (let level = 0; level < 10_000; level += 1)
      deep = level % 2 ? { [`k${level}`]: deep, a: level } : [deep, level];
    expect(canonicalJson(deep)).toBe(reference(deep));
  });

  it('keeps the hash of a stored event', () => {
    const payload = {
      uid: '00000000-0000-4000-9000-000000000001',
      event_name: 'delivery.dropoff_enroute',
      status: 'e1',
      driver_location: { lat: 37, lng: -122 },
    };
    expect(canonicalJson(payload)).toBe(
      '{"driver_location":{"lat":37,"lng":-122},"event_name":"delivery.dropoff_enroute","status":"e1","uid":"00000000-0000-4000-9000-000000000001"}',
    );
    expect(fingerprint(payload)).toBe(fingerprint(JSON.parse(reference(payload))));
  });
});
