// Each guard of the pipeline on its own, against plans made from real documents
// and the real schema: what it refuses, what it lets through, and that the plan
// it judges is the operation the request named (never another of the document).
import { parse, type ExecutionResult, type OperationDefinitionNode } from 'graphql';
import { describe, expect, it } from 'vitest';
import { clientTokenRefusal } from '../../src/access/client-token-scope.js';
import { toSchema } from '../../src/graphql/schema.js';
import { untilExpiry } from '../../src/pipeline/guards/client-token.js';
import { costWithVariables } from '../../src/pipeline/guards/cost.js';
import { fieldRepeatRefusal } from '../../src/pipeline/guards/field-repeats.js';
import { withoutSuggestions } from '../../src/pipeline/guards/introspection.js';
import { boundResult, jsonOver } from '../../src/pipeline/guards/response-size.js';
import { requiredDefaultsOf, withRequiredDefaults } from '../../src/pipeline/guards/variables.js';
import { Documents } from '../../src/pipeline/documents.js';
import { readKeyless } from '../../src/pipeline/guards/keyless.js';
import { OPERATION_LIMITS } from '../../src/pipeline/limits.js';

const schema = toSchema();
const options = {
  schema,
  maxBatch: 100,
  hideSuggestions: false,
  introspection: true,
  federationSdl: true,
  cacheBytes: 1_000_000,
  compileMaxFields: 100,
  compilesPerMinute: 60,
};

const TWO_OPERATIONS = `
  query Read { delivery(uid: "u1") { uid } }
  mutation Book($input: DeliveryInput!) { createDelivery(input: $input) { __typename } }
`;

describe('the plan of a multi-operation document', () => {
  it('is the named operation whichever was planned first, and runs a document holding only it', () => {
    const documents = new Documents(options);
    const entry = documents.entry(TWO_OPERATIONS, true);
    const book = entry.plan('Book')!;
    const read = entry.plan('Read')!;
    expect(book.kind).toBe('mutation');
    expect(read.kind).toBe('query');
    expect([...read.rootFields]).toEqual(['delivery']);
    expect(read.runnable.definitions).toHaveLength(1);
    expect(read.runnable.definitions[0]).toBe(read.operation);
    // The same object for the same name: what was judged is what runs.
    expect(entry.plan('Read')).toBe(read);
  });

  it('fails closed: no name in a document of two, or an unknown name, resolves no plan', () => {
    const entry = new Documents(options).entry(TWO_OPERATIONS, false);
    expect(entry.plan(undefined)).toBeNull();
    expect(entry.plan('Nope')).toBeNull();
  });

  it('says what needs a key: anything but __typename, _service and introspection', () => {
    const entry = new Documents(options).entry(
      `query A { __typename _service { sdl } } query B { __typename delivery(uid: "x") { uid } }`,
      false,
    );
    expect(entry.plan('A')!.needsKey).toBe(false);
    expect(entry.plan('B')!.needsKey).toBe(true);
  });

  it('keeps a shared entry once, and a private one never', () => {
    const documents = new Documents(options);
    expect(documents.entry('{ __typename }', false)).not.toBe(documents.entry('{ __typename }', false));
    expect(documents.entry('{ __typename }', true)).toBe(documents.entry('{ __typename }', true));
    expect(documents.size.entries).toBe(1);
  });
});

describe('client-token scope', () => {
  it('refuses every mutation and any root field beyond its reads, and lets its reads through', () => {
    expect(clientTokenRefusal('mutation', new Set(['__typename']))?.code).toBe('FORBIDDEN');
    expect(clientTokenRefusal('query', new Set(['delivery', 'availability']))?.message).toMatch(/Query\.availability/);
    expect(clientTokenRefusal('query', new Set(['delivery', 'deliveries', 'node']))).toBeUndefined();
    expect(clientTokenRefusal('subscription', new Set(['deliveryEvents']))).toBeUndefined();
  });

  it('ends a stream at the expiry with one UNAUTHENTICATED message', async () => {
    async function* forever(): AsyncGenerator<ExecutionResult> {
      for (;;) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        yield { data: { tick: true } };
      }
    }
    const stream = untilExpiry(forever(), new Date(Date.now() + 30));
    const seen: ExecutionResult[] = [];
    for await (const result of stream) seen.push(result);
    expect(seen.at(-1)?.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
  });
});

describe('cost', () => {
  it('is counted on the named operation with its variables', () => {
    const entry = new Documents(options).entry(
      `query Many($uids: [ID!]!) { deliveries(uids: $uids) { uid status } } query One { __typename }`,
      true,
    );
    const many = entry.plan('Many')!;
    expect(entry.validation()).toEqual([]);
    const uids = Array.from({ length: 100 }, (_, i) => `u${i}`);
    expect(costWithVariables(many.cost, 100, schema, many.document, many.operation, { uids }, 100)?.message).toMatch(
      /cost limit of 100 exceeded, found/,
    );
    expect(
      costWithVariables(many.cost, OPERATION_LIMITS.cost, schema, many.document, many.operation, { uids }, 100),
    ).toBeUndefined();
  });

  it('is not counted before validation: a fragment cycle is a validation error, not an overflow', () => {
    const entry = new Documents(options).entry(
      'query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }',
      true,
    );
    expect(entry.plan(undefined)).not.toBeNull();
    expect(
      entry
        .validation()
        .map((error) => error.message)
        .join(' '),
    ).toMatch(/Cannot spread fragment/);
  });
});

describe('field repeats, suggestions, token and length limits', () => {
  it('refuses a field repeated over the limit in one selection set', () => {
    expect(fieldRepeatRefusal(parse(`{ ${'__typename '.repeat(11)}}`), 10)?.message).toMatch(/more than 10 times/);
    expect(fieldRepeatRefusal(parse(`{ ${'__typename '.repeat(10)}}`), 10)).toBeUndefined();
  });

  it('drops "Did you mean" from validation errors when asked', () => {
    const entry = new Documents(options).entry('{ deliverys(uids: []) { uid } }', true);
    const [error] = entry.validation();
    expect(error!.message).toMatch(/Did you mean/);
    expect(withoutSuggestions([error!])[0]!.message).not.toMatch(/Did you mean/);
  });

  it('refuses a document over the token limit while parsing, in the words clients know', () => {
    const entry = new Documents(options).entry(`{ ${'a '.repeat(OPERATION_LIMITS.tokens + 1)}}`, false);
    expect(entry.parseError?.message).toBe(`Syntax Error: Token limit of ${OPERATION_LIMITS.tokens} exceeded.`);
    expect(entry.parseError?.extensions.code).toBe('GRAPHQL_PARSE_FAILED');
  });
});

describe('response size', () => {
  it('replaces an answer over the limit by the refusal, and checks the text written', () => {
    const big = { data: { text: 'x'.repeat(5_000) } };
    expect(jsonOver(big, 1_000)).toBe(true);
    expect(boundResult(big, 1_000, false).errors?.[0]?.extensions?.code).toBe('RESPONSE_TOO_LARGE');
    const small = boundResult({ data: { text: 'y' } }, 1_000, true) as ExecutionResult & {
      stringify(value: unknown): string;
    };
    expect(small.stringify(small)).toBe('{"data":{"text":"y"}}');
  });
});

describe('variables', () => {
  it("fills a required variable's default when the request leaves it out", () => {
    const operation = parse(
      'mutation($ttl: Int! = 3600, $uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: $ttl) { __typename } }',
    ).definitions[0] as OperationDefinitionNode;
    const defaults = requiredDefaultsOf(operation);
    expect(withRequiredDefaults(defaults, { uids: ['a'] })).toEqual({ uids: ['a'], ttl: 3600 });
    const given = { uids: ['a'], ttl: 60 };
    expect(withRequiredDefaults(defaults, given)).toBe(given);
  });
});

describe('what a caller without a key may run, read from the tokens', () => {
  it('tells the named operation, its kind and whether it needs a key, without a syntax tree', () => {
    const text = `# a comment\nquery A { __typename a: __schema { queryType { name } } } mutation B($x: ID!) @skip(if: false) { cancelDelivery(uid: $x) { __typename } } fragment F on Query { delivery(uid: "x") { uid } }`;
    expect(readKeyless(text, 'A', 2000)).toEqual({ kind: 'query', needsKey: false });
    expect(readKeyless(text, 'B', 2000)).toEqual({ kind: 'mutation', needsKey: true });
    expect(
      readKeyless('{ delivery(uid: "x") { uid events(first: 2) { edges { node { name } } } } }', undefined, 2000),
    ).toEqual({ kind: 'query', needsKey: true });
    expect(readKeyless('subscription { deliveryUpdated(uid: "x") { uid } }', undefined, 2000)).toEqual({
      kind: 'subscription',
      needsKey: true,
    });
  });

  it('leaves to the full parse what the tokens alone cannot tell', () => {
    expect(readKeyless('{ ...F } fragment F on Query { __typename }', undefined, 2000)).toBeUndefined();
    expect(readKeyless('{ ... on Query { delivery(uid: "x") { uid } } }', undefined, 2000)).toBeUndefined();
    expect(readKeyless('query A { __typename } query B { __typename }', undefined, 2000)).toBeUndefined();
    expect(readKeyless('query A { __typename }', 'Nope', 2000)).toBeUndefined();
    expect(readKeyless('{ delivery(uid: ', undefined, 2000)).toBeUndefined();
    expect(readKeyless(`{ ${'a '.repeat(50)}}`, undefined, 10)).toBeUndefined();
  });
});
