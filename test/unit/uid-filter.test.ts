import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { UidFilter } from '../../src/store/uid-filter.js';

describe('UidFilter', () => {
  it('never says "no" for a uid it was given, and says "maybe" for about 1 % of others at capacity', () => {
    const filter = new UidFilter(20_000);
    const added = Array.from({ length: 20_000 }, () => randomUUID());
    for (const uid of added) filter.add(uid);
    expect(added.every((uid) => filter.mayHave(uid))).toBe(true);
    const others = Array.from({ length: 20_000 }, () => randomUUID());
    const maybes = others.filter((uid) => filter.mayHave(uid)).length;
    expect(maybes / others.length).toBeLessThan(0.02);
    expect(filter.bytes).toBe(UidFilter.bytesFor(20_000));
  });
});
