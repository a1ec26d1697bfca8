// Reconciliation's read budget shared across merchants (src/realtime/fair-reads.ts),
// and the memory of merchant keys it reads unfollowed deliveries with
// (src/realtime/owner-keys.ts): in turns, the most urgent first within a turn;
// keys by owner, bounded, never printed.
import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { fairPick, type DueRead } from '../../src/realtime/fair-reads.js';
import { OwnerKeys } from '../../src/realtime/owner-keys.js';

type Read = DueRead & { id: string };
const read = (owner: string, id: string, priority = 2, lateness = 0): Read => ({ owner, id, priority, lateness });
const ids = (reads: Read[]) => reads.map((each) => each.id);

describe('fairPick', () => {
  it('serves one read of each merchant in turn, however many one of them has due', () => {
    const due = [
      ...Array.from({ length: 10_000 }, (_, n) => read('a', `a${n}`, 2, 10_000 - n)),
      read('b', 'b0'),
      read('c', 'c0'),
    ];
    const { picked, last } = fairPick(due, 5, undefined);
    expect(ids(picked)).toEqual(['a0', 'b0', 'c0', 'a1', 'a2']);
    expect(last).toBe('a');
  });

  it('starts after the merchant served last, so that a budget of one read a tick still goes round', () => {
    const due = [read('a', 'a0'), read('a', 'a1'), read('b', 'b0'), read('c', 'c0')];
    let last: string | undefined;
    const order: string[] = [];
    for (let tick = 0; tick < 4; tick += 1) {
      const turn = fairPick(
        due.filter((each) => !order.includes(each.id)),
        1,
        last,
      );
      order.push(...ids(turn.picked));
      last = turn.last;
    }
    expect(order).toEqual(['a0', 'b0', 'c0', 'a1']);
  });

  it('within a merchant: a contradiction, then a confirmation, then the latest for its cadence', () => {
    const due = [
      read('a', 'followed, a little late', 2, 0.2),
      read('a', 'unfollowed, late', 2, 1.5),
      read('a', 'confirmation', 1, 0),
      read('a', 'contradiction', 0, 0),
    ];
    expect(ids(fairPick(due, 4, undefined).picked)).toEqual([
      'contradiction',
      'confirmation',
      'unfollowed, late',
      'followed, a little late',
    ]);
  });

  it('takes no more than the budget, and nothing when nothing is due', () => {
    expect(fairPick([read('a', 'a0'), read('b', 'b0')], 0, undefined).picked).toEqual([]);
    expect(fairPick([], 5, 'a')).toEqual({ picked: [], last: 'a' });
  });
});

describe('OwnerKeys', () => {
  const ownerOf = (key: string) => key.split(':')[0]!;

  it('keeps the most recent key of each owner, drops a refused one, and forgets the least recently heard past its bound', () => {
    const keys = new OwnerKeys({ ownerOf, max: 2 });
    const gained: string[] = [];
    keys.onRemember((owner) => gained.push(owner));
    keys.remember('a:1');
    keys.remember('a:2');
    keys.remember('b:1');
    expect(keys.keyOf('a')).toBe('a:2');
    // A refusal of a key the owner no longer uses leaves the newer one.
    keys.forget('a:1');
    expect(keys.keyOf('a')).toBe('a:2');
    keys.remember('a:2');
    keys.remember('c:1');
    // b was heard from least recently.
    expect(keys.owners()).toEqual(['a', 'c']);
    keys.forget('c:1');
    expect(keys.keyOf('c')).toBeUndefined();
    expect(gained).toEqual(['a', 'b', 'c']);
  });

  it('never shows a key, printed or serialised', () => {
    const keys = new OwnerKeys();
    keys.remember('sk_test_secret_value');
    expect(keys.size).toBe(1);
    expect(inspect(keys)).not.toContain('sk_test_secret_value');
    expect(JSON.stringify({ keys })).not.toContain('sk_test_secret_value');
    expect(`${JSON.stringify(keys)}`).toBe('{"owners":1}');
  });
});
