// Issue 29, item 2: every operation of a caller without an accepted key (none,
// a refused one, a made-up one, an Authorization that is not a Bearer
// credential) is charged to its address by the work it costs, measured, not by
// its refusals; introspection is costed by what its lists hold; the keyless
// body bound follows the trust decision, not the presence of a header; and no
// such caller names a metric label.
import { request as httpRequest } from 'node:http';
import { getIntrospectionQuery } from 'graphql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { KEYLESS_BYTES_PER_WORK_MS } from '../../src/access/rate-limit.js';

const FULL_INTROSPECTION = getIntrospectionQuery({
  descriptions: true,
  specifiedByUrl: true,
  directiveIsRepeatable: true,
  inputValueDeprecation: true,
});

/**
 * 220 fragments on Query, each selecting __typename, all spread at the root: valid, cheap to answer, slow to validate
 * (40 ms and more).
 */
const FRAGMENT_HEAVY = (n: number) =>
  `query Fragments${n} { ${Array.from({ length: 220 }, (_, i) => `...F${i}`).join(' ')} }\n` +
  Array.from({ length: 220 }, (_, i) => `fragment F${i} on Query { __typename }`).join('\n');

interface Answer {
  status: number;
  body: GraphQLResponse;
  retryAfter: string | null;
}

async function post(stack: Stack, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return {
    status: response.status,
    body: text ? (JSON.parse(text) as GraphQLResponse) : {},
    retryAfter: response.headers.get('retry-after'),
  };
}

const codes = (answer: Answer) => answer.body.errors?.map((error) => error.extensions?.code);
const from = (address: string) => ({ 'x-forwarded-for': address });

/**
 * Sends `body` until the address is refused RATE_LIMITED (the answer that was), or `most` times (undefined: never
 * refused).
 */
async function untilLimited(
  stack: Stack,
  body: (n: number) => unknown,
  headers: Record<string, string>,
  most: number,
): Promise<{ answer: Answer; sent: number } | undefined> {
  for (let n = 0; n < most; n += 1) {
    const answer = await post(stack, body(n), headers);
    if (codes(answer)?.includes('RATE_LIMITED')) return { answer, sent: n + 1 };
    expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).toBe(200);
  }
  return undefined;
}

describe('the work of callers without an accepted key, charged to their address (development: introspection on)', () => {
  let stack: Stack;
  beforeAll(async () => {
    // TRUST_PROXY: each test speaks for addresses of its own through X-Forwarded-For.
    stack = await startStack({ env: { KEYLESS_WORK_MS_PER_MINUTE: '100', TRUST_PROXY: '1' } });
    // The merchant's key, accepted by the upstream before any flood.
    expect((await stack.gql('{ availability { group } }')).errors).toBeUndefined();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('refuses a keyless address RATE_LIMITED after a few full introspections, and nobody else', async () => {
    // Each answer is about 100 KB: a unit and a half of its bytes alone, plus the milliseconds it took.
    const limited = await untilLimited(stack, () => ({ query: FULL_INTROSPECTION }), from('198.51.100.1'), 80);
    expect(limited, 'never refused').toBeDefined();
    expect(limited!.answer.status).toBe(429);
    expect(Number(limited!.answer.retryAfter)).toBeGreaterThan(0);
    expect(limited!.answer.body.errors?.[0]?.extensions?.retryAfterSeconds).toBeGreaterThan(0);
    // Even what costs nothing is refused to that address now, unread.
    expect(codes(await post(stack, { query: '{ __typename }' }, from('198.51.100.1')))).toEqual(['RATE_LIMITED']);
    // Another address without a key still introspects, and the merchant's reads run as before.
    expect((await post(stack, { query: FULL_INTROSPECTION }, from('198.51.100.2'))).body.data?.__schema).toBeDefined();
    const own = await post(
      stack,
      { query: '{ availability { group } __schema { queryType { name } } }' },
      { authorization: `Bearer ${stack.key}`, ...from('198.51.100.1') },
    );
    expect(own.status).toBe(200);
    expect(own.body.errors).toBeUndefined();
    expect(own.body.data?.availability?.length).toBeGreaterThan(0);
  });

  it('charges a made-up Bearer key like no key: the same budget, nothing more after one try', async () => {
    const limited = await untilLimited(
      stack,
      () => ({ query: FULL_INTROSPECTION }),
      { authorization: 'Bearer sk_made_up_never_judged', ...from('198.51.100.3') },
      80,
    );
    expect(limited, 'never refused').toBeDefined();
    expect(limited!.answer.status).toBe(429);
    // Neither that key, nor another made-up one, nor none gets more from that address.
    for (const headers of [
      { authorization: 'Bearer sk_made_up_never_judged' },
      { authorization: 'Bearer sk_another_made_up_key' },
      {},
    ] as Array<Record<string, string>>) {
      expect(codes(await post(stack, { query: '{ __typename }' }, { ...headers, ...from('198.51.100.3') }))).toEqual([
        'RATE_LIMITED',
      ]);
    }
  });

  it('charges an Authorization that is not a Bearer credential like none', async () => {
    const limited = await untilLimited(
      stack,
      () => ({ query: FULL_INTROSPECTION }),
      { authorization: 'Basic x', ...from('198.51.100.4') },
      80,
    );
    expect(limited, 'never refused').toBeDefined();
    expect(codes(await post(stack, { query: '{ __typename }' }, from('198.51.100.4')))).toEqual(['RATE_LIMITED']);
  });

  it('counts the aliases of _service { sdl }: each is the whole schema, read and answered again', async () => {
    const sdl = { query: `{ ${Array.from({ length: 12 }, (_, i) => `s${i}: _service { sdl }`).join(' ')} }` };
    // About 35 KB an alias: some 400 KB an answer, over six units of bytes alone.
    const limited = await untilLimited(stack, () => sdl, from('198.51.100.5'), 20);
    expect(limited, 'never refused').toBeDefined();
    expect(limited!.sent).toBeLessThanOrEqual(17);
  });

  it('refuses an introspection whose lists hold more than the cost limit, before running it', async () => {
    // Every type with its fields, arguments and values, 20 times over under aliases: some 60,000 values, 1.5 MB.
    const types =
      'types { name kind description fields(includeDeprecated: true) { name description isDeprecated args { name description defaultValue type { name kind ofType { name kind } } } ' +
      'type { name kind ofType { name kind ofType { name kind } } } } enumValues(includeDeprecated: true) { name description } inputFields { name description type { name kind ofType { name kind } } } }';
    const started = stack.app.pipeline.documents.size;
    const answer = await post(
      stack,
      { query: `{ __schema { ${Array.from({ length: 20 }, (_, i) => `t${i}: ${types}`).join(' ')} } }` },
      from('198.51.100.6'),
    );
    // A validation error: 200 under application/json, as GraphQL over HTTP has it.
    expect(codes(answer)).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    expect(answer.body.errors?.[0]?.message).toMatch(/Operation cost limit of 50000 exceeded/);
    expect(answer.body.data).toBeUndefined();
    expect(stack.app.pipeline.documents.size).toEqual(started);
    // Four listings (about 14,000) are within the limit of an accepted key, not of a caller without one.
    const four = { query: `{ __schema { ${Array.from({ length: 4 }, (_, i) => `t${i}: ${types}`).join(' ')} } }` };
    const keyless = await post(stack, four, from('198.51.100.7'));
    expect(codes(keyless)).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    expect(keyless.body.errors?.[0]?.message).toMatch(
      /Without an accepted key, an operation may cost at most 10000; found \d+/,
    );
    const keyed = await post(stack, four, { authorization: `Bearer ${stack.key}` });
    expect(keyed.body.errors).toBeUndefined();
    expect(keyed.body.data?.__schema?.t3?.length).toBeGreaterThan(10);
  });
});

describe('a key nobody has judged yet, during a flood without keys', () => {
  let stack: Stack;
  afterAll(async () => {
    await stack?.stop();
  });

  it('is never refused for what other addresses spent (KEYLESS_TOTAL_WORK_MS_PER_MINUTE)', async () => {
    stack = await startStack({
      env: { KEYLESS_TOTAL_WORK_MS_PER_MINUTE: '1', KEYLESS_WORK_MS_PER_MINUTE: '6000', TRUST_PROXY: '1' },
    });
    // Forty addresses introspect at once, each body padded to 64 KiB (a unit of work as read): the first body read
    // spends the whole total, which then refills for a minute, however long what follows takes on a loaded machine
    // (a budget spent by the operations' own milliseconds refilled within a second when introspection ran fast).
    const pad = 'x'.repeat(KEYLESS_BYTES_PER_WORK_MS);
    const flood = await Promise.all(
      Array.from({ length: 40 }, (_, n) =>
        post(stack, { query: FULL_INTROSPECTION, variables: { pad } }, from(`198.18.0.${n + 1}`)),
      ),
    );
    expect(flood.every((answer) => answer.status === 200 || answer.status === 429)).toBe(true);
    expect(flood.filter((answer) => answer.status === 429).length).toBeGreaterThan(0);
    // The total is spent: an address that sent nothing before, without a key, is refused.
    expect(codes(await post(stack, { query: '{ __typename }' }, from('198.18.1.1')))).toEqual(['RATE_LIMITED']);
    // Thirty merchant keys this process has never seen (as after a restart), each from an address of its own: the
    // upstream judges them, and every first request runs.
    const keys = Array.from({ length: 30 }, () => stack.sandbox.addMerchantKey(stack.key));
    const firsts = await Promise.all(
      keys.map((key, n) =>
        post(
          stack,
          { query: '{ availability { group } }' },
          { authorization: `Bearer ${key}`, ...from(`198.18.2.${n + 1}`) },
        ),
      ),
    );
    for (const answer of firsts) {
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      expect(answer.body.errors).toBeUndefined();
      expect(answer.body.data?.availability).toHaveLength(2);
    }
    // A made-up key is judged too, refused by the upstream, and then held to the budgets of callers without one.
    const madeUp = await post(
      stack,
      { query: '{ __typename }' },
      { authorization: 'Bearer sk_made_up_during_the_flood', ...from('198.18.3.1') },
    );
    expect(codes(madeUp)).toEqual(['RATE_LIMITED']);
  }, 60_000);
});

describe('a key nobody has judged yet, from an address that spent its own budget', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { KEYLESS_WORK_MS_PER_MINUTE: '100', TRUST_PROXY: '1' } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('is put to the upstream before that budget refuses it: a real key runs, a made-up one is refused', async () => {
    const limited = await untilLimited(stack, () => ({ query: FULL_INTROSPECTION }), from('198.19.0.1'), 80);
    expect(limited, 'never refused').toBeDefined();
    const key = stack.sandbox.addMerchantKey(stack.key);
    const asked = stack.sandbox.requests.length;
    const first = await post(
      stack,
      { query: '{ availability { group } }' },
      { authorization: `Bearer ${key}`, ...from('198.19.0.1') },
    );
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.data?.availability).toHaveLength(2);
    expect(stack.sandbox.requests.length).toBeGreaterThan(asked);
    // A made-up key from the same address is judged, refused, and held to the address's spent budget.
    const madeUp = await post(
      stack,
      { query: '{ __typename }' },
      { authorization: 'Bearer sk_made_up_from_a_spent_address', ...from('198.19.0.1') },
    );
    expect(codes(madeUp)).toEqual(['RATE_LIMITED']);
    // And without a key that address still waits.
    expect(codes(await post(stack, { query: '{ __typename }' }, from('198.19.0.1')))).toEqual(['RATE_LIMITED']);
  }, 60_000);
});

describe('fragment-heavy documents in production', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production', KEYLESS_WORK_MS_PER_MINUTE: '100', TRUST_PROXY: '1' } });
    expect((await stack.gql('{ availability { group } }')).errors).toBeUndefined();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('are refused without a key before validation compares their fragments, and a flood of them is charged all the same', async () => {
    const refused = await post(stack, { query: FRAGMENT_HEAVY(0) }, from('203.0.113.1'));
    expect(codes(refused)).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    expect(refused.body.errors?.[0]?.message).toMatch(/at most 20 fragments; found 220/);
    // Each still costs its reading and parsing: the address runs out.
    let limited: Answer | undefined;
    for (let n = 1; n < 400 && !limited; n += 1) {
      const answer = await post(stack, { query: FRAGMENT_HEAVY(n) }, from('203.0.113.1'));
      if (codes(answer)?.includes('RATE_LIMITED')) limited = answer;
      else expect(codes(answer)).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    }
    expect(limited, 'never refused').toBeDefined();
    // With a made-up key, the same; with the merchant's accepted key, the document runs.
    expect(
      codes(
        await post(
          stack,
          { query: FRAGMENT_HEAVY(500) },
          { authorization: 'Bearer sk_made_up_fragments', ...from('203.0.113.2') },
        ),
      ),
    ).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    const own = await post(
      stack,
      { query: FRAGMENT_HEAVY(501) },
      { authorization: `Bearer ${stack.key}`, ...from('203.0.113.1') },
    );
    expect(own.body).toEqual({ data: { __typename: 'Query' } });
  });

  it('charge what they may still run by its validation time: twenty fragments apiece', async () => {
    // Twenty fragments spread at the root: valid, allowed, and each validation measured.
    const chain = (n: number) =>
      `query Twenty${n} { ${Array.from({ length: 20 }, (_, i) => `...T${n}_${i}`).join(' ')} }\n` +
      Array.from({ length: 20 }, (_, i) => `fragment T${n}_${i} on Query { __typename }`).join('\n');
    expect((await post(stack, { query: chain(0) }, from('203.0.113.3'))).body).toEqual({
      data: { __typename: 'Query' },
    });
    const limited = await untilLimited(stack, (n) => ({ query: chain(n + 1) }), from('203.0.113.3'), 1_000);
    expect(limited, 'never refused').toBeDefined();
    expect(limited!.answer.status).toBe(429);
  });
});

describe('the keyless body bound follows the trust decision', () => {
  let stack: Stack;
  /** A valid request of about 800 KB: the document that needs no key, and a variable that nothing reads. */
  const large = JSON.stringify({ query: '{ __typename }', variables: { filler: 'x'.repeat(800_000) } });
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('refuses 800 KB with `Authorization: Basic x` 413 before reading it, as without any header', async () => {
    for (const headers of [{ authorization: 'Basic x' }, { authorization: 'Token abc' }, {}] as Array<
      Record<string, string>
    >) {
      const answer = await post(stack, large, headers);
      expect(answer.status, JSON.stringify(headers)).toBe(413);
      expect(codes(answer)).toEqual(['REQUEST_ENTITY_TOO_LARGE']);
    }
  });

  it('does so for a body sent without a length, and for a body yoga would read itself (not application/json)', async () => {
    const chunked = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        `${stack.app.url}/graphql`,
        { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Basic x' } },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      // The server may close once it has answered; what it answered is what counts.
      req.on('error', (error) => (req.destroyed ? undefined : reject(error)));
      for (let i = 0; i < 20; i += 1) req.write(large.slice(i * 40_000, (i + 1) * 40_000));
      req.end(large.slice(800_000));
    });
    expect(chunked).toBe(413);
    const graphqlBody = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/graphql', authorization: 'Basic x' },
      body: `{ __typename }\n#${'x'.repeat(800_000)}`,
    });
    expect(graphqlBody.status).toBe(413);
  });

  it('holds a made-up Bearer key to it too (the upstream refuses the key when asked), and reads a real key’s first large body', async () => {
    const madeUp = await post(stack, large, { authorization: 'Bearer sk_made_up_for_a_large_body' });
    expect(madeUp.status).toBe(413);
    // otherKey has not been used yet: nobody has judged it, so the upstream is asked before the rest is read.
    const before = stack.sandbox.requests.length;
    const firstTry = await post(stack, large, { authorization: `Bearer ${stack.otherKey}` });
    expect(firstTry.status).toBe(200);
    expect(firstTry.body).toEqual({ data: { __typename: 'Query' } });
    expect(stack.sandbox.requests.length).toBeGreaterThan(before);
    // Accepted now: no second question.
    const asked = stack.sandbox.requests.length;
    expect((await post(stack, large, { authorization: `Bearer ${stack.otherKey}` })).status).toBe(200);
    expect(stack.sandbox.requests.length).toBe(asked);
  });
});

describe('operation-name labels', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { TRUST_PROXY: '1' } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('are never taken by a caller without an accepted key: its names all count as "other"', async () => {
    for (let n = 0; n < 210; n += 1) {
      const headers: Record<string, string> =
        n % 3 === 0 ? { authorization: 'Bearer sk_made_up_labels' } : n % 3 === 1 ? { authorization: 'Basic x' } : {};
      expect(
        (await post(stack, { query: `query Junk${n} { __typename }` }, { ...headers, ...from(`192.0.2.${n % 200}`) }))
          .body.data?.__typename,
      ).toBe('Query');
    }
    // The merchant's operations come after, and still get names of their own.
    expect((await stack.gql('query MerchantRead { availability { group } }')).errors).toBeUndefined();
    expect((await stack.gql('query MerchantAgain { __typename }')).errors).toBeUndefined();
    const text = await (await fetch(`${stack.app.url}/metrics`)).text();
    expect(text).not.toMatch(/name="Junk\d+"/);
    expect(text).toMatch(/delivery_graph_graphql_operations_total\{type="query",name="other",outcome="ok"\} 210\b/);
    // A key's first operation (the one the upstream accepted it on) is named too.
    expect(text).toMatch(
      /delivery_graph_graphql_operations_total\{type="query",name="MerchantRead",outcome="ok"\} 1\b/,
    );
    expect(text).toMatch(
      /delivery_graph_graphql_operations_total\{type="query",name="MerchantAgain",outcome="ok"\} 1\b/,
    );
  });
});
