// The webhook receiver's group commit (AppendBatcher), against a store whose
// commit is held open: events that arrive while a commit waits on its fsync go
// together in the next commit, not one commit per turn of the event loop; the
// log and the publications keep arrival order. While events come fast, a batch
// waits for the commit window (or its target) before it goes.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { EventBus } from '../../src/realtime/bus.js';
import type { AppendResult, Store, StoredEvent } from '../../src/store/store.js';
import type { WireWebhookEvent } from '../../src/upstream/wire.js';
import { AppendBatcher } from '../../src/webhooks/group-commit.js';

/** The test's own marker on each event (the receiver never reads it). */
const idOf = (payload: WireWebhookEvent) => (payload as unknown as { event_id: string }).event_id;

/** A store whose every commit waits until the test releases it; it records each commit's events. */
function heldStore() {
  const commits: string[][] = [];
  const releases: Array<() => void> = [];
  let seq = 0;
  const store = {
    async appendEvents(
      events: ReadonlyArray<{ payload: WireWebhookEvent; receivedAt: string }>,
    ): Promise<AppendResult[]> {
      commits.push(events.map((event) => idOf(event.payload)));
      await new Promise<void>((release) => releases.push(release));
      return events.map(
        (event) =>
          ({
            duplicate: false,
            event: { seq: ++seq, uid: idOf(event.payload) } as unknown as StoredEvent,
          }) as AppendResult,
      );
    },
  } as unknown as Store;
  return { store, commits, releaseNext: () => releases.shift()?.() };
}

/**
 * Lets the event loop turn until `met` holds (a commit is scheduled for the turn after the one that ended the last).
 */
async function turnsUntil(met: () => boolean): Promise<void> {
  for (let turn = 0; turn < 100 && !met(); turn += 1) await nextTurn();
  expect(met()).toBe(true);
}

/** The gathering alone, without the commit window (the last two tests hold that). */
const NO_WINDOW = { ms: 0, target: 1 };

const event = (id: number) => ({ event_id: `e${id}`, event_name: 'delivery.assigned' }) as unknown as WireWebhookEvent;

describe('AppendBatcher', () => {
  it('gathers what arrives during a commit, over many turns of the event loop, into the next commit', async () => {
    const { store, commits, releaseNext } = heldStore();
    const published: string[] = [];
    const bus = { publish: (stored: StoredEvent) => published.push(stored.uid) } as unknown as EventBus;
    const batcher = new AppendBatcher(store, bus, () => undefined, NO_WINDOW);

    const first = batcher.append(event(0), 'now');
    await nextTurn();
    expect(commits).toEqual([['e0']]);
    // Ten more, each in a turn of its own, while the first commit waits on its fsync.
    const later: Array<Promise<AppendResult>> = [];
    for (let id = 1; id <= 10; id += 1) {
      later.push(batcher.append(event(id), 'now'));
      await nextTurn();
    }
    expect(commits).toHaveLength(1);
    releaseNext();
    await first;
    await turnsUntil(() => commits.length === 2);
    expect(commits).toEqual([['e0'], ['e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 'e8', 'e9', 'e10']]);
    releaseNext();
    await Promise.all(later);
    expect(published).toEqual(['e0', 'e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 'e8', 'e9', 'e10']);
  });

  it('commits at most 512 events at once, the rest next', async () => {
    const { store, commits, releaseNext } = heldStore();
    const batcher = new AppendBatcher(
      store,
      { publish: () => undefined } as unknown as EventBus,
      () => undefined,
      NO_WINDOW,
    );
    const all = Array.from({ length: 600 }, (_, id) => batcher.append(event(id), 'now'));
    await turnsUntil(() => commits.length === 1);
    releaseNext();
    await all[511];
    await turnsUntil(() => commits.length === 2);
    releaseNext();
    await Promise.all(all);
    expect(commits.map((commit) => commit.length)).toEqual([512, 88]);
  });

  it('publishes a large stored batch a slice per turn of the loop, in log order, every event published and answered', async () => {
    const { store, commits, releaseNext } = heldStore();
    // Each publication costs what an event's subscribers' messages cost (a few of them: 0.2 ms).
    let turn = 0;
    const published: Array<{ uid: string; turn: number }> = [];
    const bus = {
      publish: (stored: StoredEvent) => {
        const until = performance.now() + 0.2;
        while (performance.now() < until);
        published.push({ uid: stored.uid, turn });
      },
    } as unknown as EventBus;
    const batcher = new AppendBatcher(store, bus, () => undefined, NO_WINDOW);
    const all = Array.from({ length: 300 }, (_, id) => batcher.append(event(id), 'now'));
    await turnsUntil(() => commits.length === 1);
    // A ticker of other work: one turn of the loop each.
    let ticking = true;
    const tick = () => {
      turn += 1;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    await nextTurn();
    releaseNext();
    const answers = await Promise.all(all);
    ticking = false;
    expect(published.map((p) => p.uid)).toEqual(Array.from({ length: 300 }, (_, id) => `e${id}`));
    expect(answers.map((answer) => answer.event.uid)).toEqual(published.map((p) => p.uid));
    // Spread over turns other work had between them (all 300 went out in one turn before: 60 ms of the loop).
    expect(new Set(published.map((p) => p.turn)).size).toBeGreaterThan(5);
  });

  it('while events come faster than two per window, a batch waits for the window or its target', async () => {
    const { store, commits, releaseNext } = heldStore();
    const batcher = new AppendBatcher(store, { publish: () => undefined } as unknown as EventBus, () => undefined, {
      ms: 60_000,
      target: 3,
    });
    // The first event has no rate to judge by: it goes at the next turn, with what came in the same turn.
    const first = [batcher.append(event(0), 'now'), batcher.append(event(1), 'now')];
    await turnsUntil(() => commits.length === 1);
    releaseNext();
    await Promise.all(first);
    // Events now come microseconds apart: the next batch waits, though no commit is under way.
    const next = [batcher.append(event(2), 'now'), batcher.append(event(3), 'now')];
    for (let turn = 0; turn < 20; turn += 1) await nextTurn();
    expect(commits).toEqual([['e0', 'e1']]);
    // Its target: it goes at once.
    next.push(batcher.append(event(4), 'now'));
    await turnsUntil(() => commits.length === 2);
    expect(commits[1]).toEqual(['e2', 'e3', 'e4']);
    releaseNext();
    await Promise.all(next);
  });

  it('a batch held for its window goes when the window ends', async () => {
    const { store, commits, releaseNext } = heldStore();
    const batcher = new AppendBatcher(store, { publish: () => undefined } as unknown as EventBus, () => undefined, {
      ms: 30,
      target: 100,
    });
    const first = [batcher.append(event(0), 'now'), batcher.append(event(1), 'now')];
    await turnsUntil(() => commits.length === 1);
    releaseNext();
    await Promise.all(first);
    const held = batcher.append(event(2), 'now');
    await nextTurn();
    expect(commits).toHaveLength(1);
    // Nothing else arrives: its timer sends it.
    for (let wait = 0; wait < 200 && commits.length === 1; wait += 1) await new Promise((ok) => setTimeout(ok, 5));
    expect(commits[1]).toEqual(['e2']);
    releaseNext();
    await held;
  });
});
