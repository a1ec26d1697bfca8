// Which caps hold which caller, what a refusal says, and that every slot comes
// back however a subscription's stream ends (src/access/subscription-slots.ts).
import { describe, expect, it } from 'vitest';
import type { Caller } from '../../src/access/caller.js';
import { holdingSlot, SubscriptionSlots, type SubscriptionSlot } from '../../src/access/subscription-slots.js';
import { TooManySubscriptionsError } from '../../src/errors.js';

const merchant = (key: string): Caller => ({ kind: 'merchant', key });
const token = (key: string, text: string): Caller => ({
  kind: 'client-token',
  key,
  token: { key, uids: ['u1'], expiresAt: new Date(Date.now() + 60_000), token: text },
});

function held(taken: SubscriptionSlot | TooManySubscriptionsError): SubscriptionSlot {
  if (taken instanceof TooManySubscriptionsError) throw new Error(`refused: ${taken.message}`);
  return taken;
}

function refusal(taken: SubscriptionSlot | TooManySubscriptionsError): { setting: string; limit: number } {
  expect(taken).toBeInstanceOf(TooManySubscriptionsError);
  const { setting, limit } = taken as TooManySubscriptionsError;
  return { setting, limit };
}

describe('SubscriptionSlots', () => {
  it('holds an accepted key to its own cap alone, from any address', () => {
    const slots = new SubscriptionSlots({ perKey: 3, perClientToken: 1, perAddress: 1 });
    for (const address of ['192.0.2.1', '192.0.2.1', '192.0.2.2'])
      held(slots.take(merchant('key-a'), address, 'earned'));
    expect(refusal(slots.take(merchant('key-a'), '192.0.2.3', 'earned'))).toEqual({
      setting: 'SUBSCRIPTIONS_PER_KEY',
      limit: 3,
    });
    held(slots.take(merchant('key-b'), '192.0.2.1', 'earned'));
    expect(slots.open).toBe(4);
    expect(slots.counters.refused).toEqual({ socket: 0, key: 1, client_token: 0, address: 0 });
  });

  it('holds a client token to its own cap, its key’s and its address’s; a key not yet accepted to its address’s too', () => {
    const slots = new SubscriptionSlots({ perKey: 5, perClientToken: 2, perAddress: 3 });
    held(slots.take(token('key-a', 't1'), '192.0.2.1', 'earned'));
    held(slots.take(token('key-a', 't1'), '192.0.2.9', 'earned'));
    expect(refusal(slots.take(token('key-a', 't1'), '192.0.2.7', 'earned'))).toEqual({
      setting: 'SUBSCRIPTIONS_PER_CLIENT_TOKEN',
      limit: 2,
    });
    held(slots.take(token('key-a', 't2'), '192.0.2.1', 'earned'));
    // A key nobody has judged yet counts on its address: 192.0.2.1 now holds three.
    held(slots.take(merchant('key-new'), '192.0.2.1', 'trying'));
    expect(refusal(slots.take(token('key-a', 't3'), '192.0.2.1', 'earned'))).toEqual({
      setting: 'SUBSCRIPTIONS_PER_ADDRESS',
      limit: 3,
    });
    // IPv6: one /64 is one address.
    held(slots.take(token('key-b', 'v1'), '2001:db8:1:2::1', 'earned'));
    held(slots.take(token('key-b', 'v2'), '2001:db8:1:2::2', 'earned'));
    held(slots.take(token('key-b', 'v3'), '2001:db8:1:2:ffff::3', 'earned'));
    expect(refusal(slots.take(token('key-b', 'v4'), '2001:db8:1:2::4', 'earned'))).toEqual({
      setting: 'SUBSCRIPTIONS_PER_ADDRESS',
      limit: 3,
    });
    // Key a's tokens hold three of its five; the key itself takes the other two.
    held(slots.take(merchant('key-a'), '198.51.100.1', 'earned'));
    held(slots.take(merchant('key-a'), '198.51.100.1', 'earned'));
    expect(refusal(slots.take(token('key-a', 't4'), '198.51.100.2', 'earned'))).toEqual({
      setting: 'SUBSCRIPTIONS_PER_KEY',
      limit: 5,
    });
  });

  it('takes nothing when it refuses, gives each slot back once, and forgets a caller with none left', () => {
    const slots = new SubscriptionSlots({ perKey: 2, perClientToken: 0, perAddress: 0 });
    const first = held(slots.take(token('key-a', 't1'), '192.0.2.1', 'earned'));
    const second = held(slots.take(token('key-a', 't1'), '192.0.2.1', 'earned'));
    slots.take(token('key-a', 't1'), '192.0.2.1', 'earned');
    first.release();
    first.release();
    expect(slots.open).toBe(1);
    held(slots.take(merchant('key-a'), '192.0.2.1', 'earned')).release();
    second.release();
    expect(slots.open).toBe(0);
    expect(slots.ids).toBe(0);
  });

  it('caps nothing set to 0', () => {
    const slots = new SubscriptionSlots({ perKey: 0, perClientToken: 0, perAddress: 0 });
    for (let i = 0; i < 1000; i += 1) held(slots.take(token('key-a', 't1'), '192.0.2.1', 'earned'));
    expect(slots.open).toBe(1000);
  });

  it('names the cap and what to do in its message, never the key or the token', () => {
    const slots = new SubscriptionSlots({ perKey: 1, perClientToken: 1, perAddress: 1 });
    held(slots.take(token('sk_secret_key', 'eyJ.secret.token.text.x'), '192.0.2.1', 'earned'));
    for (const caller of [token('sk_secret_key', 'eyJ.secret.token.text.x'), merchant('sk_secret_key')]) {
      const error = slots.take(caller, '192.0.2.1', 'earned') as TooManySubscriptionsError;
      expect(error.code).toBe('TOO_MANY_SUBSCRIPTIONS');
      expect(error.message).toContain(error.setting);
      expect(error.message).toMatch(/complete one/i);
      expect(error.message).not.toContain('secret');
    }
  });
});

describe('holdingSlot', () => {
  const slots = new SubscriptionSlots({ perKey: 0, perClientToken: 0, perAddress: 0 });
  const slot = () => held(slots.take(merchant('key-a'), '192.0.2.1', 'earned'));
  async function* events(count: number, failAt?: number) {
    for (let i = 0; i < count; i += 1) {
      if (i === failAt) throw new Error('stream failed');
      yield i;
    }
  }

  it('gives the slot back when the stream ends, fails, or is returned or thrown into', async () => {
    const ended = holdingSlot(events(2), slot());
    expect(await ended.next()).toEqual({ done: false, value: 0 });
    await ended.next();
    expect(slots.open).toBe(1);
    expect(await ended.next()).toEqual({ done: true, value: undefined });
    expect(slots.open).toBe(0);

    const failing = holdingSlot(events(2, 1), slot());
    await failing.next();
    await expect(failing.next()).rejects.toThrow('stream failed');
    expect(slots.open).toBe(0);

    const stopped = holdingSlot(events(5), slot());
    await stopped.next();
    expect(await stopped.return!()).toEqual({ done: true, value: undefined });
    expect(slots.open).toBe(0);

    const broken = holdingSlot(events(5), slot());
    await broken.next();
    await expect(broken.throw!(new Error('client gone'))).rejects.toThrow('client gone');
    expect(slots.open).toBe(0);
    expect(slots.ids).toBe(0);
  });
});
