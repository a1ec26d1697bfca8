// Issue 29, "compiles stall everyone": a graphql-jit compile holds the event
// loop for as long as it takes (80 to 300 ms for the fragment-heavy
// document), so compiling is a privilege with a budget. A client token's
// documents never compile; an accepted merchant key's compile from their second
// run, only when their expanded selection is at most GRAPHQL_COMPILE_MAX_FIELDS
// fields, and only GRAPHQL_COMPILES_PER_MINUTE a minute for the process, a
// third of them for one key.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const CREATE_DELIVERY = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CREATE_TOKEN = `mutation($uids: [ID!]!) { createClientToken(uids: $uids) { ... on MutationCreateClientTokenSuccess { data { token } } } }`;
const FIELDS =
  'uid status price { amount currency } pickup { name address { street city } } courier { name location { lat lng } }';

/** A small read, distinct for every n: 14 fields. */
const smallRead = (n: number) => `query ($uid: ID!) { read${n}: delivery(uid: $uid) { ${FIELDS} } }`;
/** Issue 29's shape: 28 aliased reads spreading one fragment, 392 fields for 1 KB of text. */
const fragmentHeavy = (n: number) =>
  `query ($uid: ID!) { ${Array.from({ length: 28 }, (_, k) => `h${n}_${k}: delivery(uid: $uid) { ...D${n} }`).join(' ')} } fragment D${n} on Delivery { ${FIELDS} }`;

async function compilesIn(stack: Stack): Promise<Record<string, number>> {
  const text = await (await fetch(`${stack.app.url}/metrics`)).text();
  return Object.fromEntries(
    [...text.matchAll(/^delivery_graph_graphql_compiles_total\{result="(\w+)"\} (\d+)$/gm)].map(([, result, value]) => [
      result!,
      Number(value),
    ]),
  );
}

describe('who compiles', () => {
  let stack: Stack;
  let uid: string;
  let token: string;
  beforeAll(async () => {
    stack = await startStack();
    uid = (await stack.gql(CREATE_DELIVERY, { input: deliveryInput() })).data.createDelivery.data.uid;
    token = (await stack.gql(CREATE_TOKEN, { uids: [uid] })).data.createClientToken.data.token;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** Runs a text three times as `credential`; the cache's bytes after the first run and after the third. */
  async function thrice(text: string, credential: string): Promise<{ first: number; third: number }> {
    const run = async () => {
      const answer = await stack.gql(text, { uid }, credential);
      expect(answer.errors).toBeUndefined();
      expect(Object.values(answer.data).every((read) => (read as { uid: string }).uid === uid)).toBe(true);
    };
    await run();
    const first = stack.app.pipeline.documents.size.bytes;
    await run();
    await run();
    return { first, third: stack.app.pipeline.documents.size.bytes };
  }

  it("never compiles a client token's documents: they run on graphql-js, from the shared cache, and weigh no generated code", async () => {
    const before = await compilesIn(stack);
    for (const text of [smallRead(1), fragmentHeavy(1)]) {
      const { first, third } = await thrice(text, token);
      // Cached (the tracking page's documents are shared by every visitor), never grown by a compile.
      expect(first).toBeGreaterThan(0);
      expect(third).toBe(first);
    }
    expect((await compilesIn(stack)).compiled ?? 0).toBe(before.compiled ?? 0);
  });

  it("compiles an accepted merchant key's plan from its second run, but never one over GRAPHQL_COMPILE_MAX_FIELDS (100)", async () => {
    await stack.gql('{ availability { group } }');
    const before = await compilesIn(stack);
    const small = await thrice(smallRead(2), stack.key);
    expect(small.third).toBeGreaterThan(small.first);
    const heavy = await thrice(fragmentHeavy(2), stack.key);
    expect(heavy.third).toBe(heavy.first);
    const after = await compilesIn(stack);
    expect(after.compiled).toBe((before.compiled ?? 0) + 1);
    expect(after.too_large).toBe((before.too_large ?? 0) + 1);
  });
});

describe('GRAPHQL_COMPILES_PER_MINUTE', () => {
  let stack: Stack;
  const platformId = 'compile-budget';
  const keys = Array.from({ length: 4 }, () => `sk_test_${randomBytes(12).toString('hex')}`);
  beforeAll(async () => {
    stack = await startStack({
      // Three a minute for the process: one for each key.
      env: { GRAPHQL_COMPILES_PER_MINUTE: '3' },
      sandbox: { platformId, merchants: keys.map((key, i) => ({ key, name: `Merchant ${i}`, platformId })) },
    });
    // Each key accepted by the upstream first (until then nothing it sends is cached or compiled).
    for (const key of keys) expect((await stack.gql('{ availability { group } }', {}, key)).errors).toBeUndefined();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** Runs a distinct small read twice as `key` (the second run may compile); whether the cache grew by a compile. */
  async function compiled(n: number, key: string): Promise<boolean> {
    const text = smallRead(n);
    const uid = '00000000-0000-4000-8000-000000000000';
    expect((await stack.gql(text, { uid }, key)).data).toEqual({ [`read${n}`]: null });
    const once = stack.app.pipeline.documents.size.bytes;
    expect((await stack.gql(text, { uid }, key)).data).toEqual({ [`read${n}`]: null });
    return stack.app.pipeline.documents.size.bytes > once;
  }

  it('gives one key a third of the budget and the process all of it; a plan put off compiles on a later run once there is budget', async () => {
    const [first, second, third, fourth] = keys as [string, string, string, string];
    expect(await compiled(10, first)).toBe(true);
    // The first key's third is spent; the others still compile, until the process's three are.
    expect(await compiled(11, first)).toBe(false);
    expect(await compiled(12, second)).toBe(true);
    expect(await compiled(13, third)).toBe(true);
    expect(await compiled(14, fourth)).toBe(false);
    const counted = await compilesIn(stack);
    expect(counted.compiled).toBe(3);
    expect(counted.over_budget).toBe(2);
    // Put off, not refused: the plan still runs (on graphql-js), and its runs keep asking.
    const answer = await stack.gql(smallRead(11), { uid: '00000000-0000-4000-8000-000000000000' }, first);
    expect(answer).toEqual({ data: { read11: null } });
    expect((await compilesIn(stack)).over_budget).toBe(3);
  });
});
