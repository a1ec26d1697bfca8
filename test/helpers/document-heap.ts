// Measures what the shared document cache holds in the heap against what it
// counts. Run as a child process with --expose-gc (document-weights.test.ts):
// it starts a whole stack, sends each shape's distinct documents over real HTTP
// as a merchant key or a client token would (each one `runs` times: the second
// run of an accepted key's plan may compile), and reports what the heap grew by
// next to what the cache counted for them. What a request leaves besides its
// document (the sandbox's records, sockets) is measured first, by sending one
// cached document as many times, and taken off. The growth is measured rather
// than what emptying the cache gives back: V8 keeps the code graphql-jit
// generated in its compilation cache until it ages out (a few natural major
// collections; never under gc()), so an entry holds it for as long as it is
// cached, and a while after.
//   node --expose-gc --import tsx test/helpers/document-heap.ts '<json: {env, shapes: [{shape, count, runs, caller}]}>'
// or, for the store of automatic persisted queries: '<json: {persistedQueries: [{count, length}]}>'
import { createHash } from 'node:crypto';
import { startStack, deliveryInput, type Stack } from './stack.js';

/** The fields of a delivery a tracking page or a merchant's dashboard reads. */
const DELIVERY_FIELDS = `uid status rawStatus group mode trackingUrl partnerReference deliveryDate tip
  price { amount currency } distance { value unit }
  pickup { name phone address { street city postalCode country latitude longitude } }
  dropoff { name phone address { street city postalCode country latitude longitude } }
  courier { name location { lat lng } vehicle { make model } }
  events(first: 1) { edges { cursor node { uid name status receivedAt } } }`;

export type ShapeName = 'plain' | 'wide' | 'fragment-heavy' | 'invalid';

/**
 * The document shapes measured, each distinct for every n. Anonymous
 * operations: a new operation name adds a metric label, which is not the
 * cache's to count.
 */
export const SHAPES: Record<ShapeName, (n: number, uid: string) => string> = {
  /** One read of a delivery, its uid a variable: what a merchant's backend sends. */
  plain: (n: number) => `query ($uid: ID!) {
  read${n}: delivery(uid: $uid) {
    uid status rawStatus
    price { amount currency } distance { value unit } tip
    pickup { name phone address { street city } windowStart }
    dropoff { name phone address { street city } }
    courier { name location { lat lng } }
    trackingUrl deliveryDate estimatedDropoffAt
    package { description itemsCount weight declaredValue }
    expectedCancellationFee { amount currency }
  }
}`,
  /** Eight aliased reads, each written out in full: about 5 KB of text, 500 fields. */
  wide: (n: number, uid: string) =>
    `{\n${Array.from({ length: 8 }, (_, k) => `  w${n}_${k}: delivery(uid: "${uid}") {\n    ${DELIVERY_FIELDS}\n  }`).join('\n')}\n}`,
  /**
   * Issue 29's document: 28 aliased `delivery(uid:)` fields spreading one
   * fragment. About 2 KB of text that resolves some 1,500 fields: a compiled
   * executor of 2.4 MB of generated source. The aliases differ with n, as they
   * would from an attacker: the same generated source twice is one script to V8.
   */
  'fragment-heavy': (n: number, uid: string) =>
    `{ ${Array.from({ length: 28 }, (_, k) => `h${n}_${k}: delivery(uid: "${uid}") { ...D${n} }`).join(' ')} } fragment D${n} on Delivery { ${DELIVERY_FIELDS.replace(/\s+/g, ' ')} }`,
  /** A document that does not validate: kept with its errors. */
  invalid: (n: number) =>
    `query ($uid: ID!) { wrong${n}: delivery(uid: $uid) { uid ${Array.from({ length: 20 }, (_, k) => `nope${k}`).join(' ')} } }`,
};

export interface ShapeRun {
  shape: ShapeName;
  /** Distinct documents sent. */
  count: number;
  /** Times each is sent (the second run of an accepted key's plan compiles). */
  runs: number;
  caller: 'merchant' | 'client-token';
}

export interface ShapeMeasure extends ShapeRun {
  entries: number;
  /** What the cache counted for them (documents.size.bytes). */
  counted: number;
  /**
   * What the heap grew by while they were sent, less what as many requests of
   * one cached document leave behind (the sandbox's records, the logs): what
   * the entries hold, the generated code V8's compilation cache keeps beside
   * them included.
   */
  held: number;
  compiled: number;
}

const gc = (globalThis as { gc?: () => void }).gc;

/** Heap in use once garbage is collected (twice: the first pass can leave work for the second). */
function heapUsed(): number {
  gc!();
  gc!();
  return process.memoryUsage().heapUsed;
}

async function post(
  stack: Stack,
  query: string,
  variables: Record<string, unknown>,
  credential: string,
): Promise<void> {
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${credential}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.json()) as { errors?: Array<{ extensions?: { code?: string } }> };
  const code = body.errors?.[0]?.extensions?.code;
  // What the measure needs to run must run: a refusal (budgets, access) would measure nothing.
  if (code && code !== 'GRAPHQL_VALIDATION_FAILED') throw new Error(`refused: ${code}`);
}

export async function measure(runs: readonly ShapeRun[], env: Record<string, string>): Promise<ShapeMeasure[]> {
  if (!gc) throw new Error('run with --expose-gc');
  const stack = await startStack({
    env: {
      RATE_LIMIT_PER_MINUTE: '0',
      CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE: '0',
      CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE: '0',
      ...env,
    },
  });
  try {
    const booked = await stack.gql(
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
      { input: deliveryInput() },
    );
    const uid = booked.data.createDelivery.data.uid as string;
    const minted = await stack.gql(
      `mutation($uids: [ID!]!) { createClientToken(uids: $uids) { ... on MutationCreateClientTokenSuccess { data { token } } } }`,
      { uids: [uid] },
    );
    const token = minted.data.createClientToken.data.token as string;
    const documents = stack.app.pipeline.documents;
    const send = (text: string, caller: ShapeRun['caller']) =>
      post(stack, text, { uid }, caller === 'merchant' ? stack.key : token);
    // Warm every path once (lazy modules, the first compiles of the server's own code).
    for (const shape of Object.keys(SHAPES) as ShapeName[]) {
      for (let run = 0; run < 3; run += 1) await send(SHAPES[shape](0, uid), 'merchant');
    }
    const measures: ShapeMeasure[] = [];
    // clear and compiles are this version's (an older one is measured too, to show what it counted: without them).
    const clear = () => (documents as { clear?: () => void }).clear?.();
    const compiled = () => (documents as { compiles?: { compiled: number } }).compiles?.compiled ?? Number.NaN;
    let n = 0;
    for (const run of runs) {
      clear();
      // What a request leaves behind besides its document: one cached document, sent as many times.
      const control = SHAPES.plain(0, uid);
      for (let k = 0; k < 3; k += 1) await send(control, run.caller);
      const quiet = heapUsed();
      for (let k = 0; k < run.count * run.runs; k += 1) await send(control, run.caller);
      const before = heapUsed();
      const noise = before - quiet;
      const cached = documents.size;
      const compiledBefore = compiled();
      for (let i = 0; i < run.count; i += 1) {
        n += 1;
        const text = SHAPES[run.shape](n, uid);
        for (let k = 0; k < run.runs; k += 1) await send(text, run.caller);
      }
      const full = heapUsed();
      const { entries, bytes } = documents.size;
      clear();
      measures.push({
        ...run,
        entries: entries - cached.entries,
        counted: bytes - cached.bytes,
        held: full - before - noise,
        compiled: compiled() - compiledBefore,
      });
    }
    return measures;
  } finally {
    await stack.stop();
  }
}

export interface PersistedQueriesMeasure {
  count: number;
  /** Characters of each query text. */
  length: number;
  counted: number;
  held: number;
}

/**
 * The in-process store of automatic persisted queries, filled with `count`
 * distinct queries of about `length` characters, each its text as JSON.parse
 * gives it and its hash in hex as the pipeline keeps them: what the heap grew
 * by, against what the store weighed them at (persistedQueryBytes).
 */
export async function measurePersistedQueries(count: number, length: number): Promise<PersistedQueriesMeasure> {
  if (!gc) throw new Error('run with --expose-gc');
  const { localPersistedQueryStore, persistedQueryBytes } = await import('../../src/pipeline/persisted-query-store.js');
  const store = localPersistedQueryStore(count + 1);
  await store.set('0'.repeat(64), '{ __typename }');
  const before = heapUsed();
  let counted = 0;
  for (let i = 0; i < count; i += 1) {
    const query = JSON.parse(
      JSON.stringify(`query Q${i} { __typename }${' '.repeat(Math.max(0, length - 30))}`),
    ) as string;
    const hash = createHash('sha256').update(query).digest('hex');
    await store.set(hash, query);
    counted += persistedQueryBytes(hash, query);
  }
  const held = heapUsed() - before;
  // Still there, all of them (and the store alive until measured).
  for (let i = 0; i < count; i += 100)
    if (
      (await store.get(
        createHash('sha256')
          .update(`query Q${i} { __typename }${' '.repeat(Math.max(0, length - 30))}`)
          .digest('hex'),
      )) === undefined
    )
      throw new Error(`query ${i} was evicted`);
  return { count, length, counted, held };
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const { env, shapes, persistedQueries } = JSON.parse(process.argv[2] ?? '{}') as {
    env?: Record<string, string>;
    shapes?: ShapeRun[];
    persistedQueries?: Array<{ count: number; length: number }>;
  };
  const result: unknown[] = [];
  // One after the other: each measure is the heap's growth while it alone runs.
  for (const { count, length } of persistedQueries ?? []) result.push(await measurePersistedQueries(count, length));
  if (!persistedQueries) result.push(...(await measure(shapes ?? [], env ?? {})));
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
