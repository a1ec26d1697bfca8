// FEDERATION_SDL: `_service { sdl }` is the whole schema, so in production it is
// closed with introspection unless asked for, and when closed it is refused by
// validation on every transport (direct POST, yoga's handler, GET, SSE,
// WebSocket), aliased or in a fragment alike; `_entities` is not affected.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { wsClient } from '../helpers/ws-client.js';

const SDL = '{ _service { sdl } }';
const REFUSAL = 'The federation SDL has been disabled, but the requested query contained the field "_service".';
const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;

type Answer = { status: number; body: GraphQLResponse };

async function post(stack: Stack, query: string, accept = 'application/json'): Promise<Answer> {
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept, authorization: `Bearer ${stack.key}` },
    body: JSON.stringify({ query }),
  });
  return { status: response.status, body: (await response.json()) as GraphQLResponse };
}

/** Each way in, as a client would use it; the answer's errors, whichever shape carries them. */
const TRANSPORTS: Array<[string, (stack: Stack, query: string) => Promise<GraphQLResponse>]> = [
  ['the direct JSON path', async (stack, query) => (await post(stack, query)).body],
  ["yoga's handler", async (stack, query) => (await post(stack, query, 'application/graphql-response+json')).body],
  [
    'GET',
    async (stack, query) => {
      const response = await fetch(`${stack.app.url}/graphql?query=${encodeURIComponent(query)}`, {
        headers: { accept: 'application/json', authorization: `Bearer ${stack.key}` },
      });
      return (await response.json()) as GraphQLResponse;
    },
  ],
  [
    'server-sent events',
    async (stack, query) => {
      const response = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          authorization: `Bearer ${stack.key}`,
        },
        body: JSON.stringify({ query }),
      });
      const text = await response.text();
      // One `next` event (or a plain JSON answer) holds the result.
      const data =
        text
          .split('\n')
          .find((line) => line.startsWith('data: {'))
          ?.slice('data: '.length) ?? text;
      return JSON.parse(data) as GraphQLResponse;
    },
  ],
  [
    'WebSocket',
    async (stack, query) => {
      const client = wsClient(stack.app.url, stack.key);
      const answer: GraphQLResponse = {};
      try {
        await new Promise<void>((resolve) => {
          client.subscribe(
            { query },
            {
              next: (message) => Object.assign(answer, message),
              error: (errors) => {
                answer.errors = errors as GraphQLResponse['errors'];
                resolve();
              },
              complete: resolve,
            },
          );
        });
      } finally {
        await client.dispose();
      }
      return answer;
    },
  ],
];

describe('in production, by default', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production' } });
  });
  afterAll(() => stack?.stop());

  it.each(TRANSPORTS)('refuses _service by validation over %s, as __schema', async (_name, run) => {
    for (const query of [SDL, '{ schema: _service { sdl } }', '{ ...F } fragment F on Query { _service { sdl } }']) {
      const answer = await run(stack, query);
      expect(answer.data, query).toBeUndefined();
      expect(
        answer.errors?.map((error) => [error.extensions?.code, error.message]),
        query,
      ).toEqual([['GRAPHQL_VALIDATION_FAILED', REFUSAL]]);
    }
    const introspection = await run(stack, '{ __schema { queryType { name } } }');
    expect(introspection.errors?.[0]?.message).toMatch(/introspection has been disabled/);
  });

  it('refuses it without a key too, with the status and shape of the introspection refusal', async () => {
    const anonymous = (query: string) =>
      fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query }),
      });
    const [sdl, introspection] = await Promise.all([anonymous(SDL), anonymous('{ __schema { queryType { name } } }')]);
    expect(sdl.status).toBe(introspection.status);
    const [sdlBody, introspectionBody] = [await sdl.json(), await introspection.json()];
    expect(Object.keys(sdlBody)).toEqual(Object.keys(introspectionBody));
    expect(JSON.stringify(sdlBody)).not.toContain('@key');
  });

  it('still resolves _entities for a gateway', async () => {
    const uid = (await stack.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
    const result = await stack.gql(
      'query($r: [_Any!]!) { _entities(representations: $r) { ... on Delivery { uid status } } }',
      { r: [{ __typename: 'Delivery', uid }] },
    );
    expect(result).toEqual({ data: { _entities: [{ uid, status: 'CREATED' }] } });
  });
});

describe('FEDERATION_SDL=true in production', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production', FEDERATION_SDL: 'true' } });
  });
  afterAll(() => stack?.stop());

  it.each(TRANSPORTS)('serves _service over %s, while __schema stays refused', async (_name, run) => {
    const answer = await run(stack, SDL);
    expect(answer.errors).toBeUndefined();
    expect((answer.data as { _service: { sdl: string } })._service.sdl).toContain('@key(fields: "uid")');
    expect((await run(stack, '{ __schema { queryType { name } } }')).errors?.[0]?.message).toMatch(
      /introspection has been disabled/,
    );
  });
});

describe('FEDERATION_SDL=false outside production', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { FEDERATION_SDL: 'false' } });
  });
  afterAll(() => stack?.stop());

  it('refuses _service while introspection is on', async () => {
    const { body } = await post(stack, SDL);
    expect(body.data).toBeUndefined();
    expect(body.errors?.map((error) => [error.extensions?.code, error.message])).toEqual([
      ['GRAPHQL_VALIDATION_FAILED', REFUSAL],
    ]);
    expect((await post(stack, '{ __schema { queryType { name } } }')).body).toEqual({
      data: { __schema: { queryType: { name: 'Query' } } },
    });
  });
});
