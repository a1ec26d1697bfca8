// The shared fan-out's rules, on a plan that counts its executions: who shares
// (same plan, variables and key, or client-token key and scope), in whose
// context a group executes, what each member still has of its own (its source,
// its failures, its end), and what a failed execution does to the group.
import type { ExecutionResult } from 'graphql';
import { describe, expect, it } from 'vitest';
import type { Caller } from '../../src/access/caller.js';
import type { GraphQLContext } from '../../src/graphql/context.js';
import type { OperationPlan } from '../../src/pipeline/plan.js';
import { sharedText, SubscriptionFanout, type MessageFinish } from '../../src/realtime/fanout.js';
import { writingSharedFrames } from '../../src/realtime/frames.js';
import { EventQueue } from '../../src/realtime/queue.js';

type Event = { seq: number };

/** A plan whose source is the member's own queue and whose execution is `execute`, counted. */
function planOf(
  execute: (event: Event, context: GraphQLContext) => ExecutionResult | Promise<ExecutionResult> = (event) => ({
    data: { seq: event.seq },
  }),
) {
  const executions: Array<{ event: Event; context: GraphQLContext; given: unknown }> = [];
  const plan = {
    variablesOf: (variables: unknown) => variables,
    sourceStream: async (context: Member) => context.queue,
    executeEvent: (event: Event, context: GraphQLContext, given: unknown) => {
      executions.push({ event, context, given });
      return execute(event, context);
    },
  };
  return { plan: plan as unknown as OperationPlan, executions };
}

type Member = GraphQLContext & { queue: EventQueue<Event> };

/** A subscriber's context: its key, its client token's scope and expiry when it has one, and its own event queue. */
function member(key: string, token?: { uids: string[]; expiresAt?: Date }): Member {
  const queue = new EventQueue<Event>({ maxPending: 100, coalesceKey: () => undefined });
  const clientToken = token && {
    key,
    uids: token.uids,
    expiresAt: token.expiresAt ?? new Date(Date.now() + 60_000),
    token: `token-of-${token.uids.join('-')}`,
  };
  return { key, clientToken, scope: token && new Set(token.uids), queue } as unknown as Member;
}

const contexts: Array<{ caller: Caller }> = [];
const finish: MessageFinish = {
  finish: (result) => result,
  fail: (error) => ({
    errors: [
      {
        message: `masked: ${(error as Error).message}`,
        toJSON: () => ({ message: `masked: ${(error as Error).message}` }),
      },
    ] as never,
  }),
  overLimit: (text) =>
    text.length > 200
      ? { errors: [{ message: 'too large', toJSON: () => ({ message: 'too large' }) }] as never, data: null }
      : undefined,
  contextFor: (caller) => {
    const context = { caller, key: (caller as { key: string }).key } as unknown as GraphQLContext & { caller: Caller };
    contexts.push(context);
    return context;
  },
};

async function subscribe(
  fanout: SubscriptionFanout,
  plan: OperationPlan,
  context: Member,
  variables?: Record<string, unknown>,
) {
  return (await fanout.subscribe(plan, context, variables, finish)) as AsyncIterableIterator<ExecutionResult>;
}

describe('SubscriptionFanout', () => {
  it('executes an event once for the members of one plan, variables and key, and hands each the same result and text', async () => {
    const fanout = new SubscriptionFanout();
    const { plan, executions } = planOf();
    const members = [member('k1'), member('k1'), member('k1')];
    const streams = await Promise.all(members.map((m) => subscribe(fanout, plan, m, { uids: ['u'], first: 2 })));
    const event = { seq: 7 };
    for (const m of members) m.queue.push(event);
    const results = await Promise.all(streams.map(async (stream) => (await stream.next()).value as ExecutionResult));
    expect(executions).toHaveLength(1);
    expect(new Set(results).size).toBe(1);
    expect(sharedText(results[0]!)).toBe('{"data":{"seq":7}}');
    expect(fanout.counters).toEqual({ executions: 1, shared: 2 });
    // Executed in the group's own context, made for its key: not in any member's.
    expect(members).not.toContain(executions[0]!.context);
    expect((executions[0]!.context as unknown as { caller: Caller }).caller).toEqual({ kind: 'merchant', key: 'k1' });
    expect(fanout.groups).toBe(1);
    for (const stream of streams) await stream.return!();
    expect(fanout.groups).toBe(0);
  });

  it('keeps apart other keys, other variables, other plans, and a key from its client tokens; variables in any key order are the same', async () => {
    const fanout = new SubscriptionFanout();
    const { plan, executions } = planOf();
    const { plan: otherPlan, executions: otherExecutions } = planOf();
    const joined: Array<[Member, OperationPlan, Record<string, unknown>]> = [
      [member('k1'), plan, { a: 1, b: 2 }],
      [member('k1'), plan, { b: 2, a: 1 }],
      [member('k2'), plan, { a: 1, b: 2 }],
      [member('k1'), plan, { a: 1, b: 3 }],
      [member('k1'), otherPlan, { a: 1, b: 2 }],
      [member('k1', { uids: ['u'] }), plan, { a: 1, b: 2 }],
    ];
    const streams = await Promise.all(joined.map(([m, p, v]) => subscribe(fanout, p, m, v)));
    const event = { seq: 1 };
    for (const [m] of joined) m.queue.push(event);
    await Promise.all(streams.map((stream) => stream.next()));
    // The first two share; every other is a group of its own.
    expect(executions).toHaveLength(4);
    expect(otherExecutions).toHaveLength(1);
    expect(fanout.groups).toBe(5);
    for (const stream of streams) await stream.return!();
  });

  it('lets client tokens of one key and scope share, in a context of the group that no member’s expiry ends', async () => {
    const fanout = new SubscriptionFanout();
    const { plan, executions } = planOf();
    const soon = new Date(Date.now() + 1_000);
    const members = [
      member('k1', { uids: ['u2', 'u1'], expiresAt: soon }),
      member('k1', { uids: ['u1', 'u2'] }),
      member('k1', { uids: ['u1'] }),
    ];
    const streams = await Promise.all(members.map((m) => subscribe(fanout, plan, m)));
    const event = { seq: 3 };
    for (const m of members) m.queue.push(event);
    await Promise.all(streams.map((stream) => stream.next()));
    expect(executions).toHaveLength(2);
    const callers = executions.map(({ context }) => (context as unknown as { caller: Caller }).caller);
    expect(callers[0]).toMatchObject({ kind: 'client-token', key: 'k1', token: { uids: ['u1', 'u2'], token: '' } });
    const token = (callers[0] as Extract<Caller, { kind: 'client-token' }>).token;
    // Not the first member's token (its text, its expiry): the group's, which only the members' own streams outlive.
    expect(token.expiresAt.getTime()).toBeGreaterThan(Date.now() + 365 * 86_400_000);
    for (const stream of streams) await stream.return!();
  });

  it('shares nothing for a caller without a key', async () => {
    const fanout = new SubscriptionFanout();
    const { plan, executions } = planOf();
    const members = [member(''), member('')];
    const streams = await Promise.all(members.map((m) => subscribe(fanout, plan, m)));
    const event = { seq: 1 };
    for (const m of members) m.queue.push(event);
    await Promise.all(streams.map((stream) => stream.next()));
    expect(executions).toHaveLength(2);
    expect(executions.map(({ context }) => context)).toEqual(members);
  });

  it('does not wait for a member that does not read, and executes again only for events it has not seen', async () => {
    const fanout = new SubscriptionFanout();
    const { plan, executions } = planOf();
    const [idle, reading] = [member('k1'), member('k1')];
    const [, stream] = await Promise.all([subscribe(fanout, plan, idle), subscribe(fanout, plan, reading)]);
    const events = [{ seq: 1 }, { seq: 2 }, { seq: 3 }];
    for (const event of events) {
      idle.queue.push(event);
      reading.queue.push(event);
    }
    for (const event of events) expect((await stream!.next()).value).toMatchObject({ data: { seq: event.seq } });
    expect(executions).toHaveLength(3);
    expect(idle.queue.pending).toBe(3);
  });

  it('gives one member whose own stream fails its masked error and its end, and the others their messages', async () => {
    const fanout = new SubscriptionFanout();
    const { plan } = planOf();
    const [failing, fine] = [member('k1'), member('k1')];
    const [broken, stream] = await Promise.all([subscribe(fanout, plan, failing), subscribe(fanout, plan, fine)]);
    failing.queue.fail(new Error('too slow'));
    fine.queue.push({ seq: 1 });
    expect(await broken!.next()).toMatchObject({ done: false, value: { errors: [{ message: 'masked: too slow' }] } });
    expect(await broken!.next()).toEqual({ done: true, value: undefined });
    expect((await stream!.next()).value).toMatchObject({ data: { seq: 1 } });
    expect(fanout.groups).toBe(1);
  });

  it('gives every member the same masked error when the execution itself fails, and ends their streams', async () => {
    const fanout = new SubscriptionFanout();
    const { plan, executions } = planOf(() => Promise.reject(new Error('executor broke')));
    const members = [member('k1'), member('k1')];
    const streams = await Promise.all(members.map((m) => subscribe(fanout, plan, m)));
    const event = { seq: 1 };
    for (const m of members) m.queue.push(event);
    const results = await Promise.all(streams.map((stream) => stream.next()));
    expect(executions).toHaveLength(1);
    expect(results[0]!.value).toBe(results[1]!.value);
    expect(results[0]!.value).toMatchObject({ errors: [{ message: 'masked: executor broke' }] });
    for (const stream of streams) expect(await stream.next()).toEqual({ done: true, value: undefined });
    expect(fanout.groups).toBe(0);
  });

  it('puts the refusal in the place of a message whose text is over the limit', async () => {
    const fanout = new SubscriptionFanout();
    const { plan } = planOf((event) => ({ data: { seq: event.seq, padding: 'x'.repeat(500) } }));
    const m = member('k1');
    const stream = await subscribe(fanout, plan, m);
    m.queue.push({ seq: 1 });
    const { value } = await stream.next();
    expect(value).toMatchObject({ data: null, errors: [{ message: 'too large' }] });
    expect(sharedText(value as ExecutionResult)).toBe('{"data":null,"errors":[{"message":"too large"}]}');
  });
});

describe('writingSharedFrames', () => {
  it('writes each shared message as its text with the subscriber’s id, and hands graphql-ws what is not shared', async () => {
    const fanout = new SubscriptionFanout();
    const { plan } = planOf();
    const m = member('k1');
    const frames: string[] = [];
    const stream = writingSharedFrames(
      await subscribe(fanout, plan, m),
      'op "1"',
      async (frame) => void frames.push(frame),
    );
    m.queue.push({ seq: 1 });
    m.queue.push({ seq: 2 });
    const pulled = stream.next();
    while (frames.length < 2) await new Promise((resolve) => setImmediate(resolve));
    m.queue.fail(new Error('too slow'));
    // The two messages are written here; the stream's last error is yielded for graphql-ws to write, then its end.
    expect(await pulled).toMatchObject({ done: false, value: { errors: [{ message: 'masked: too slow' }] } });
    expect(frames).toEqual([
      '{"id":"op \\"1\\"","type":"next","payload":{"data":{"seq":1}}}',
      '{"id":"op \\"1\\"","type":"next","payload":{"data":{"seq":2}}}',
    ]);
    expect(frames.map((frame) => JSON.parse(frame))).toEqual(
      [1, 2].map((seq) => ({ id: 'op "1"', type: 'next', payload: { data: { seq } } })),
    );
    expect(await stream.next()).toEqual({ done: true, value: undefined });
  });

  it('writes nothing more once returned', async () => {
    const fanout = new SubscriptionFanout();
    const { plan } = planOf();
    const m = member('k1');
    const frames: string[] = [];
    let release!: () => void;
    const stream = writingSharedFrames(await subscribe(fanout, plan, m), '1', (frame) => {
      frames.push(frame);
      return new Promise((resolve) => (release = resolve));
    });
    m.queue.push({ seq: 1 });
    m.queue.push({ seq: 2 });
    const pulled = stream.next();
    await new Promise((resolve) => setImmediate(resolve));
    expect(frames).toHaveLength(1);
    await stream.return!();
    release();
    expect(await pulled).toEqual({ done: true, value: undefined });
    expect(frames).toHaveLength(1);
    expect(fanout.groups).toBe(0);
  });
});
