// One document, several operations, each request naming one of them: the
// operation that runs is the one named, and every guard judges that operation,
// whichever operation of the same text ran first and on whatever transport.
// (Issue 20, finding 1: compiled queries were cached by document alone, so the
// first operationName a text was sent with ran for every later name, while
// the client-token scope, the GET mutation check and the execute/subscribe
// choice judged the name.)
//
// Black-box: random documents of 2–4 operations (queries, mutations a client
// token may not run, subscriptions) whose answers tell them apart (each has its
// own response key), sent with random operationNames in a random order
// (fast-check decides, so the operation seen first varies), by a merchant key,
// a client token or no key, over the direct JSON path, yoga's handler (a POST
// asking for application/graphql-response+json), GET, server-sent events and
// graphql-ws, as text, by APQ hash and by allowlisted hash. Each request's
// answer (data, error codes and paths, and over GET the status) must be what
// the named operation gives that caller, and the upstream writes (bookings,
// cancels) the sandbox logged while it ran must be that operation's. Every
// predicate run builds a new document text (a fresh comment line), so yoga's
// parser cache and the compiled-query cache hold nothing of another run or
// another test, shrinking included. Then plain cases: the cost rule with
// variables, and the review's reproductions.
import { createHash, randomUUID } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import {
  deliveryInput,
  makeDataDir,
  startStack,
  TEST_CLIENT_TOKEN_SECRET,
  type GraphQLResponse,
  type Stack,
} from '../helpers/stack.js';
import { wsClient } from '../helpers/ws-client.js';

/** How long one request may take before the run fails saying which request hung. */
const ANSWER_MS = 8_000;
/** Property runs per transport: enough orders of 2–4 operations, well under a minute for the file. */
const RUNS = 20;

type Carrier = 'direct' | 'yoga' | 'get' | 'sse' | 'ws';
type Credential = 'merchant' | 'token' | 'none';
/**
 * How the text reaches the server: as text, by APQ hash (then with the text when unknown), or by allowlisted hash
 * alone.
 */
type Form = 'text' | 'apq' | 'allowlist';

type Kind =
  | 'typename-query'
  | 'read-query'
  | 'typename-mutation'
  | 'cancel-mutation'
  | 'token-mutation'
  | 'book-mutation'
  | 'subscription';
const QUERIES: Kind[] = ['typename-query', 'read-query'];
const MUTATIONS: Kind[] = ['typename-mutation', 'cancel-mutation', 'token-mutation', 'book-mutation'];
const ALL_KINDS: Kind[] = [...QUERIES, ...MUTATIONS, 'subscription'];
const isMutation = (kind: Kind) => MUTATIONS.includes(kind);

interface Operation {
  name: string;
  kind: Kind;
  /** The response key that tells this operation's answer from the others'. */
  key: string;
  text: string;
}

interface Document {
  text: string;
  operations: Operation[];
  /** Every operation's variables; each request sends them all (as GraphiQL does), each operation reads its own. */
  variables: Record<string, unknown>;
}

interface Sent {
  query?: string;
  operationName: string;
  variables?: Record<string, unknown>;
  extensions?: Record<string, unknown>;
}

interface Answer {
  /** HTTP status; undefined over WebSocket. */
  status: number | undefined;
  body: GraphQLResponse;
}

/** What the sandbox was asked to change while a request ran. */
type Write = 'book' | 'cancel' | string;

interface Seen {
  /** Checked over GET only (405 for a mutation); the other transports answer 200 either way. */
  status?: number;
  data: unknown;
  errors: Array<{ code: unknown; path?: ReadonlyArray<string | number> }>;
  writes: Write[];
}

let stack: Stack;
/** A delivery of the merchant, and a client token for it alone. */
let mine: string;
let token: string;

beforeAll(async () => {
  // A fixed token secret, so the allowlisted apps started below accept the same client token.
  stack = await startStack({ env: { CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET } });
  const booked = await stack.gql(
    `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
    {
      input: deliveryInput(),
    },
  );
  mine = booked.data.createDelivery.data.uid;
  const made = await stack.gql(
    `mutation($uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: 3600) { ... on MutationCreateClientTokenSuccess { data { token } } } }`,
    {
      uids: [mine],
    },
  );
  token = made.data.createClientToken.data.token;
});
afterAll(async () => {
  await stack?.stop();
});

// ------------------------------------------------------------------ documents

function operationText(kind: Kind, name: string, key: string, index: number): string {
  switch (kind) {
    case 'typename-query':
      return `query ${name} { ${key}: __typename }`;
    case 'read-query':
      return `query ${name} { ${key}: delivery(uid: "${mine}") { uid } }`;
    case 'typename-mutation':
      return `mutation ${name} { ${key}: __typename }`;
    case 'cancel-mutation':
      // A uid never booked: the upstream is still asked to cancel it (and answers 404).
      return `mutation ${name} { ${key}: cancelDelivery(uid: "never-booked-${randomUUID()}") { __typename } }`;
    case 'token-mutation':
      return `mutation ${name} { ${key}: createClientToken(uids: ["${mine}"], ttlSeconds: 60) { __typename } }`;
    case 'book-mutation':
      return `mutation ${name}($input${index}: DeliveryInput!) { ${key}: createDelivery(input: $input${index}) { __typename } }`;
    case 'subscription':
      // graphql-jit cannot run an aliased subscription root field (it answers INTERNAL_SERVER_ERROR), so the alias is
      // one level down.
      return `subscription ${name} { deliveryUpdated(uid: "${mine}") { ${key}: uid } }`;
  }
}

/** A document of these operations, its text new to the server (a fresh comment line). */
function buildDocument(kinds: readonly Kind[]): Document {
  const operations = kinds.map((kind, index) => {
    const name = `Op${index}`;
    const key = `op${index}`;
    return { name, kind, key, text: operationText(kind, name, key, index) };
  });
  const variables: Record<string, unknown> = {};
  kinds.forEach((kind, index) => {
    if (kind === 'book-mutation') variables[`input${index}`] = deliveryInput();
  });
  return {
    text: `# run ${randomUUID()}\n${operations.map((operation) => operation.text).join('\n')}`,
    operations,
    variables,
  };
}

// ------------------------------------------------------------------ what each request must get

/** The answer and upstream writes the named operation must give this caller on this carrier. */
function expected(operation: Operation, credential: Credential, carrier: Carrier): Seen {
  const { kind, key } = operation;
  const status = carrier === 'get' ? 200 : undefined;
  const answer = (data: unknown, errors: Seen['errors'] = [], writes: Write[] = []): Seen => ({
    ...(status ? { status } : {}),
    data,
    errors,
    writes,
  });
  // yoga refuses a mutation over GET before it runs, whoever asks.
  if (carrier === 'get' && isMutation(kind))
    return { status: 405, data: null, errors: [{ code: 'BAD_REQUEST' }], writes: [] };
  // A client token may not run any mutation; refused before execution, so no data at all.
  if (credential === 'token' && isMutation(kind)) return answer(null, [{ code: 'FORBIDDEN' }]);
  // Without a key only what needs none runs; anything else is refused before it runs (no data, no path).
  if (credential === 'none') {
    switch (kind) {
      case 'typename-query':
        return answer({ [key]: 'Query' });
      case 'typename-mutation':
        return answer({ [key]: 'Mutation' });
      default:
        return answer(null, [{ code: 'UNAUTHENTICATED' }]);
    }
  }
  switch (kind) {
    case 'typename-query':
      return answer({ [key]: 'Query' });
    case 'read-query':
      return answer({ [key]: { uid: mine } });
    case 'subscription':
      // Its first message: the delivery's current state.
      return answer({ deliveryUpdated: { [key]: mine } });
    case 'typename-mutation':
      return answer({ [key]: 'Mutation' });
    case 'cancel-mutation':
      // A uid nobody booked is read first, and a cancel is sent only for what the read finds (graphql/cancellation.ts).
      return answer({ [key]: { __typename: 'NotFoundError' } });
    case 'token-mutation':
      return answer({ [key]: { __typename: 'MutationCreateClientTokenSuccess' } });
    case 'book-mutation':
      return answer({ [key]: { __typename: 'MutationCreateDeliverySuccess' } }, [], ['book']);
  }
}

function seen(answer: Answer, writes: Write[], carrier: Carrier): Seen {
  const errors = (answer.body.errors ?? []).map((error) => ({
    code: error.extensions?.code,
    ...(error.path ? { path: error.path } : {}),
  }));
  return { ...(carrier === 'get' ? { status: answer.status } : {}), data: answer.body.data ?? null, errors, writes };
}

/** Writes (anything but a read) the sandbox answered after `mark`. */
function writesSince(mark: number): Write[] {
  return stack.sandbox
    .requestsSince(mark)
    .filter((request) => request.method !== 'GET' && request.group !== 'control')
    .map((request) =>
      request.path.endsWith('/cancel')
        ? 'cancel'
        : request.method === 'POST' && request.path.endsWith('/deliveries')
          ? 'book'
          : `${request.method} ${request.path}`,
    );
}

// ------------------------------------------------------------------ transports

const bearer = (credential: Credential): string | undefined =>
  credential === 'merchant' ? stack.key : credential === 'token' ? token : undefined;

function parseBody(text: string): GraphQLResponse {
  try {
    return JSON.parse(text) as GraphQLResponse;
  } catch {
    return { errors: [{ message: `not JSON: ${text.slice(0, 300)}`, extensions: { code: 'NOT_JSON' } }] };
  }
}

function httpHeaders(key: string | undefined, extra: Record<string, string>): Record<string, string> {
  return { ...(key ? { authorization: `Bearer ${key}` } : {}), ...extra };
}

async function post(url: string, key: string | undefined, sent: Sent, accept?: string): Promise<Answer> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: httpHeaders(key, { 'content-type': 'application/json', ...(accept ? { accept } : {}) }),
    body: JSON.stringify(sent),
  });
  return { status: response.status, body: parseBody(await response.text()) };
}

async function get(url: string, key: string | undefined, sent: Sent): Promise<Answer> {
  const target = new URL(`${url}/graphql`);
  if (sent.query !== undefined) target.searchParams.set('query', sent.query);
  target.searchParams.set('operationName', sent.operationName);
  if (sent.variables) target.searchParams.set('variables', JSON.stringify(sent.variables));
  if (sent.extensions) target.searchParams.set('extensions', JSON.stringify(sent.extensions));
  const response = await fetch(target, { headers: httpHeaders(key, { accept: 'application/json' }) });
  return { status: response.status, body: parseBody(await response.text()) };
}

/**
 * A POST answered as server-sent events: the first `next` event's payload; the stream is then closed (a subscription
 * goes on).
 */
async function sse(url: string, key: string | undefined, sent: Sent): Promise<Answer> {
  const controller = new AbortController();
  try {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: httpHeaders(key, { 'content-type': 'application/json', accept: 'text/event-stream' }),
      body: JSON.stringify(sent),
      signal: controller.signal,
    });
    if (!/text\/event-stream/.test(response.headers.get('content-type') ?? ''))
      return { status: response.status, body: parseBody(await response.text()) };
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    for (;;) {
      const event = /(?:^|\n)event: next\ndata: (.*)\n\n/.exec(text);
      if (event) return { status: response.status, body: parseBody(event[1]!) };
      const { done, value } = await reader.read();
      if (done)
        return {
          status: response.status,
          body: { errors: [{ message: `no next event in ${JSON.stringify(text)}`, extensions: { code: 'NO_EVENT' } }] },
        };
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    controller.abort();
  }
}

/** One operation over a graphql-ws client: the first result, or the errors it was refused with. */
async function overGraphqlWs(url: string, key: string | undefined, sent: Sent): Promise<Answer> {
  const client = wsClient(url, key);
  try {
    return await new Promise<Answer>((resolve) => {
      const unsubscribe = client.subscribe(
        // The client insists on a query string; a hash-only request sends an empty one, which the server resolves by
        // hash.
        {
          query: sent.query ?? '',
          operationName: sent.operationName,
          variables: sent.variables,
          extensions: sent.extensions,
        },
        {
          next: (message) => {
            resolve({ status: undefined, body: message as GraphQLResponse });
            unsubscribe();
          },
          error: (error) =>
            resolve({
              status: undefined,
              body: {
                errors: Array.isArray(error)
                  ? error
                  : [
                      {
                        message: `socket: ${String((error as CloseEvent)?.reason ?? error)}`,
                        extensions: { code: 'SOCKET_CLOSED' },
                      },
                    ],
              },
            }),
          complete: () =>
            resolve({
              status: undefined,
              body: { errors: [{ message: 'completed without a result', extensions: { code: 'NO_RESULT' } }] },
            }),
        },
      );
    });
  } finally {
    await client.dispose();
  }
}

function overCarrier(carrier: Carrier, url: string, key: string | undefined, sent: Sent): Promise<Answer> {
  switch (carrier) {
    case 'direct':
      return post(url, key, sent);
    case 'yoga':
      // Asking for the GraphQL-over-HTTP media type takes yoga's own handler (isPlainJsonPost in http/graphql.ts).
      return post(url, key, sent, 'application/graphql-response+json');
    case 'get':
      return get(url, key, sent);
    case 'sse':
      return sse(url, key, sent);
    case 'ws':
      return overGraphqlWs(url, key, sent);
  }
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
const persisted = (text: string) => ({ persistedQuery: { version: 1, sha256Hash: sha256(text) } });
const codesOf = (answer: Answer) => answer.body.errors?.map((error) => error.extensions?.code) ?? [];

async function send(
  form: Form,
  carrier: Carrier,
  url: string,
  key: string | undefined,
  document: Document,
  operationName: string,
): Promise<Answer> {
  const { text, variables } = document;
  const answer = async (): Promise<Answer> => {
    switch (form) {
      case 'text':
        return overCarrier(carrier, url, key, { query: text, operationName, variables });
      case 'allowlist':
        return overCarrier(carrier, url, key, { operationName, variables, extensions: persisted(text) });
      case 'apq': {
        // An APQ client: the hash alone, and the text with it when the server does not know it yet.
        const first = await overCarrier(carrier, url, key, { operationName, variables, extensions: persisted(text) });
        if (codesOf(first).join() !== 'PERSISTED_QUERY_NOT_FOUND') return first;
        return overCarrier(carrier, url, key, { query: text, operationName, variables, extensions: persisted(text) });
      }
    }
  };
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${form} over ${carrier} naming ${operationName}: no answer within ${ANSWER_MS} ms`)),
      ANSWER_MS,
    );
  });
  try {
    return await Promise.race([answer(), late]);
  } finally {
    clearTimeout(timer);
  }
}

// ------------------------------------------------------------------ the property

interface Request {
  carrier: Carrier;
  credential: Credential;
  /** Which operation it names (modulo the document's length). */
  operation: number;
  form: Form;
}

/** A WebSocket is closed at connection_init without a key: keyless requests use HTTP. */
const credentialsFor = (carrier: Carrier): Credential[] =>
  carrier === 'ws' ? ['merchant', 'token'] : ['merchant', 'token', 'none'];

function requestOn(carriers: readonly Carrier[], forms: readonly Form[]): fc.Arbitrary<Request> {
  return fc.oneof(
    ...carriers.map((carrier) =>
      fc.record({
        carrier: fc.constant(carrier),
        credential: fc.constantFrom(...credentialsFor(carrier)),
        operation: fc.nat({ max: 3 }),
        form: fc.constantFrom(...forms),
      }),
    ),
  );
}

const documentOf = (kinds: readonly Kind[]) => fc.array(fc.constantFrom(...kinds), { minLength: 2, maxLength: 4 });
const requestsOf = (request: fc.Arbitrary<Request>) => fc.array(request, { minLength: 2, maxLength: 5 });

/**
 * Sends the requests in order, each naming its operation of the one document,
 * and checks each answer and the upstream writes it caused (only the requests
 * `checked` picks; the others just run first). A request naming a
 * subscription on a carrier that cannot stream (plain JSON, GET) goes over SSE
 * instead.
 */
async function runAll(
  url: string,
  document: Document,
  requests: readonly Request[],
  checked: (request: Request) => boolean = () => true,
): Promise<void> {
  const history: string[] = [];
  for (const request of requests) {
    const operation = document.operations[request.operation % document.operations.length]!;
    const carrier =
      operation.kind === 'subscription' && !['sse', 'ws'].includes(request.carrier) ? 'sse' : request.carrier;
    const what = `${request.credential} naming ${operation.name} (${operation.kind}) ${request.form === 'text' ? 'as text' : `by ${request.form} hash`} over ${carrier}`;
    const mark = stack.sandbox.requestCount;
    const answer = await send(request.form, carrier, url, bearer(request.credential), document, operation.name);
    const got = seen(answer, writesSince(mark), carrier);
    if (checked({ ...request, carrier })) {
      const context = [
        `${what}`,
        `after: ${history.length ? history.join('; ') : 'nothing'}`,
        `document:\n${document.text}`,
        `answer: ${JSON.stringify(answer.body)}`,
      ].join('\n');
      expect(got, context).toEqual(expected(operation, request.credential, carrier));
    }
    history.push(what);
  }
}

const property = { numRuns: RUNS };

describe('the operation named is the operation run and judged, on each transport', () => {
  const cases: Array<[Carrier, Kind[]]> = [
    ['direct', [...QUERIES, ...MUTATIONS]],
    ['yoga', [...QUERIES, ...MUTATIONS]],
    ['get', [...QUERIES, ...MUTATIONS]],
    ['sse', ALL_KINDS],
    ['ws', ALL_KINDS],
  ];
  for (const [carrier, kinds] of cases) {
    it(
      `${carrier}: every request gets its named operation's answer and guard verdict`,
      { timeout: 60_000 },
      async () => {
        await fc.assert(
          fc.asyncProperty(documentOf(kinds), requestsOf(requestOn([carrier], ['text'])), async (shape, requests) => {
            await runAll(stack.app.url, buildDocument(shape), requests);
          }),
          property,
        );
      },
    );
  }

  it('any transport after any other: one text sent over several transports in turn', { timeout: 60_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(
        documentOf(ALL_KINDS),
        requestsOf(requestOn(['direct', 'yoga', 'get', 'sse', 'ws'], ['text'])),
        async (shape, requests) => {
          await runAll(stack.app.url, buildDocument(shape), requests);
        },
      ),
      property,
    );
  });
});

describe('each guard judges the operation that runs', () => {
  const ANY: Carrier[] = ['direct', 'yoga', 'get', 'sse', 'ws'];
  /**
   * One operation of `others` among 1–3 mutations, anywhere: the answer to a
   * request naming that one can only go wrong by running a mutation (and
   * fast-check shrinks a failure to that).
   */
  const amongMutations = (others: Kind[]) =>
    fc
      .tuple(
        fc.constantFrom(...others),
        fc.array(fc.constantFrom(...MUTATIONS), { minLength: 1, maxLength: 3 }),
        fc.nat({ max: 3 }),
      )
      .map(([other, mutations, at]) => [...mutations.slice(0, at), other, ...mutations.slice(at)]);

  it(
    'client-token scope: whatever anyone ran first, a token gets its query’s data and is refused every mutation, with no upstream write',
    { timeout: 60_000 },
    async () => {
      const requests = requestsOf(requestOn(ANY, ['text', 'apq'])).filter((all) =>
        all.some((request) => request.credential === 'token'),
      );
      await fc.assert(
        fc.asyncProperty(amongMutations([...QUERIES, 'subscription']), requests, async (shape, sequence) => {
          await runAll(stack.app.url, buildDocument(shape), sequence, (request) => request.credential === 'token');
        }),
        property,
      );
    },
  );

  it(
    'mutations over GET: whatever ran first over POST or WebSocket, a GET naming a mutation is refused 405, and one naming a query runs that query',
    { timeout: 60_000 },
    async () => {
      const requests = requestsOf(requestOn(ANY, ['text', 'apq'])).filter((all) =>
        all.some((request) => request.carrier === 'get'),
      );
      await fc.assert(
        fc.asyncProperty(amongMutations(QUERIES), requests, async (shape, sequence) => {
          await runAll(stack.app.url, buildDocument(shape), sequence, (request) => request.carrier === 'get');
        }),
        property,
      );
    },
  );

  it(
    'execute or subscribe: with one subscription and one query or mutation, each name gets its own kind of answer over SSE and WebSocket',
    { timeout: 60_000 },
    async () => {
      const pair = fc
        .tuple(fc.constantFrom(...QUERIES, ...MUTATIONS), fc.boolean())
        .map(([other, subscriptionFirst]): Kind[] =>
          subscriptionFirst ? ['subscription', other] : [other, 'subscription'],
        );
      await fc.assert(
        fc.asyncProperty(pair, requestsOf(requestOn(['sse', 'ws'], ['text'])), async (shape, sequence) => {
          await runAll(stack.app.url, buildDocument(shape), sequence);
        }),
        property,
      );
    },
  );
});

describe('the cost rule counts the operation that runs, with its variables', () => {
  it('a costly read that ran first is not run again under a cheap name with a batch that puts it over the limit', async () => {
    // Costly is within the limit with one uid and over it with a full batch (100 uids × a full page of events); Cheap
    // uses no variable at all.
    const text = `# ${randomUUID()}\nquery Cheap { cheap: __typename }\nquery Costly($uids: [ID!]!) { costly: deliveries(uids: $uids) { uid events { edges { node { name } } } } }`;
    const one = await post(stack.app.url, stack.key, {
      query: text,
      operationName: 'Costly',
      variables: { uids: [mine] },
    });
    expect(one.body.errors).toBeUndefined();
    expect(one.body.data).toEqual({ costly: [{ uid: mine, events: { edges: expect.any(Array) } }] });
    const batch = { uids: Array.from({ length: 100 }, () => mine) };
    const cheap = await post(stack.app.url, stack.key, { query: text, operationName: 'Cheap', variables: batch });
    expect(cheap.body).toEqual({ data: { cheap: 'Query' } });
    const costly = await post(stack.app.url, stack.key, { query: text, operationName: 'Costly', variables: batch });
    expect(codesOf(costly)).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    expect(costly.body.errors![0]!.message).toMatch(/^Operation cost limit of 50000 exceeded/);
  });
});

describe('named by hash', () => {
  it('APQ: the hash (then the text) with each operationName, over any transport', { timeout: 60_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(
        documentOf(ALL_KINDS),
        requestsOf(requestOn(['direct', 'yoga', 'get', 'sse', 'ws'], ['apq', 'text'])),
        async (shape, requests) => {
          await runAll(stack.app.url, buildDocument(shape), requests);
        },
      ),
      property,
    );
  });

  it(
    'PERSISTED_OPERATIONS_FILE: a listed document by its hash alone, with each operationName, over any transport',
    { timeout: 60_000 },
    async () => {
      await fc.assert(
        fc.asyncProperty(
          documentOf(ALL_KINDS),
          requestsOf(requestOn(['direct', 'yoga', 'get', 'sse', 'ws'], ['allowlist'])),
          async (shape, requests) => {
            // A facade of its own for each run, whose allowlist is this run's document (on the same sandbox, with the
            // same token secret).
            const document = buildDocument(shape);
            const dataDir = makeDataDir();
            const file = path.join(dataDir, 'persisted-operations.json');
            writeFileSync(file, JSON.stringify({ [sha256(document.text)]: document.text }));
            // A short grace: stop() is only this test's tear-down, and a keep-alive connection must not hold it for
            // seconds. Its store has no record of `mine`: the sandbox scopes reads to the key, and this facade is told
            // so (the upstream decides).
            const app = await startApp(
              loadConfig({
                ...stack.env,
                DATA_DIR: dataDir,
                PERSISTED_OPERATIONS_FILE: file,
                SHUTDOWN_GRACE_MS: '100',
                UPSTREAM_READ_SCOPE: 'key',
              }),
            );
            try {
              await runAll(app.url, document, requests);
            } finally {
              await app.stop();
              rmSync(dataDir, { recursive: true, force: true });
            }
          },
        ),
        { numRuns: 15 },
      );
    },
  );
});

// ------------------------------------------------------------------ the review's reproduction

describe('the review’s reproductions', () => {
  /** The review's document, new to the server each time (the comment line). */
  const readAndBook = () => /* GraphQL */ `
    # ${randomUUID()}
    query Read($uid: ID!) { delivery(uid: $uid) { uid } }
    mutation Book($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }
  `;

  for (const carrier of ['direct', 'get', 'ws'] as const) {
    it(`a keyless POST names Book, then a client token names Read over ${carrier === 'direct' ? 'POST' : carrier === 'get' ? 'GET' : 'graphql-ws'}: it reads, and nothing is booked`, async () => {
      const text = readAndBook();
      const variables = { uid: mine, input: deliveryInput() };
      const primer = await post(stack.app.url, undefined, { query: text, operationName: 'Book', variables });
      expect(codesOf(primer)).toEqual(['UNAUTHENTICATED']);
      const mark = stack.sandbox.requestCount;
      const read = await overCarrier(carrier, stack.app.url, token, { query: text, operationName: 'Read', variables });
      expect({ body: read.body, writes: writesSince(mark) }).toEqual({
        body: { data: { delivery: { uid: mine } } },
        writes: [],
      });
      if (carrier === 'get') expect(read.status).toBe(200);
    });
  }

  it('the same token naming Book is refused FORBIDDEN on each, and a GET naming Book 405, after Read ran first', async () => {
    const text = readAndBook();
    const variables = { uid: mine, input: deliveryInput() };
    expect((await post(stack.app.url, token, { query: text, operationName: 'Read', variables })).body).toEqual({
      data: { delivery: { uid: mine } },
    });
    const mark = stack.sandbox.requestCount;
    for (const carrier of ['direct', 'ws'] as const) {
      const book = await overCarrier(carrier, stack.app.url, token, { query: text, operationName: 'Book', variables });
      expect(codesOf(book), carrier).toEqual(['FORBIDDEN']);
      expect(book.body.data ?? null).toBeNull();
    }
    const viaGet = await get(stack.app.url, stack.key, { query: text, operationName: 'Book', variables });
    expect(viaGet.status).toBe(405);
    expect(writesSince(mark)).toEqual([]);
  });

  it('a merchant’s GraphiQL-style document: Book books once, then each Avail reads availability and books nothing', async () => {
    const text = `# ${randomUUID()}\nmutation Book($input: DeliveryInput!) { createDelivery(input: $input) { __typename } }\nquery Avail { availability { group available } }`;
    const variables = { input: deliveryInput() };
    const mark = stack.sandbox.requestCount;
    const book = await post(stack.app.url, stack.key, { query: text, operationName: 'Book', variables });
    expect(book.body).toEqual({ data: { createDelivery: { __typename: 'MutationCreateDeliverySuccess' } } });
    expect(writesSince(mark)).toEqual(['book']);
    for (let i = 0; i < 3; i += 1) {
      const before = stack.sandbox.requestCount;
      const avail = await post(stack.app.url, stack.key, { query: text, operationName: 'Avail', variables });
      expect({ body: avail.body, writes: writesSince(before) }, `Avail #${i + 1}`).toEqual({
        body: {
          data: {
            availability: [
              expect.objectContaining({ group: 'PLATFORM' }),
              expect.objectContaining({ group: 'PARTNER' }),
            ],
          },
        },
        writes: [],
      });
    }
  });
});
