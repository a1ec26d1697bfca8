// What README.md and docs/ say the service answers, tried on a running one: every
// (error code, HTTP status) pair the pages state is one a real request gets; the
// limits table of docs/limits.md holds at the values it gives, with the refusal it
// names; and a subscription POSTed over plain HTTP is refused 406 exactly when the
// pages say (asked for as application/json), streamed otherwise.
// test/unit/docs-truth.test.ts checks the names and values of the pages against the code.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { ERROR_CODES } from '../../src/errors.js';
import { makeDataDir, startStack, type Stack } from '../helpers/stack.js';

const root = new URL('../..', import.meta.url).pathname;
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const PAGES = [
  'README.md',
  ...readdirSync(path.join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];
const flat = (text: string) => text.replace(/\s*\n\s*/g, ' ');

/**
 * Every "CODE STATUS" pair the pages state: `CODE` (HTTP 413), HTTP 400 `CODE`, `CODE`, HTTP 200, and the statuses in a
 * code's row of docs/errors.md.
 */
function documentedPairs(): Map<string, string[]> {
  const pairs = new Map<string, string[]>();
  const add = (code: string, status: string, where: string) => {
    if (code in ERROR_CODES) pairs.set(`${code} ${status}`, [...(pairs.get(`${code} ${status}`) ?? []), where]);
  };
  for (const page of PAGES) {
    const text = flat(read(page));
    for (const match of text.matchAll(/`([A-Z_]+)`\)?,?\s*\((?:HTTP )?([1-5]\d\d)\b/g)) add(match[1]!, match[2]!, page);
    for (const match of text.matchAll(/(?:HTTP )?([1-5]\d\d),? `([A-Z_]+)`/g)) add(match[2]!, match[1]!, page);
    for (const match of text.matchAll(/`([A-Z_]+)`,? HTTP ([1-5]\d\d)/g)) add(match[1]!, match[2]!, page);
  }
  for (const line of read('docs/errors.md').split('\n')) {
    const row = /^\| `([A-Z_]+)` \| [^|]+ \| (.+) \|$/.exec(line);
    if (row)
      for (const status of row[2]!.matchAll(/\((?:HTTP )?([1-5]\d\d)\b|(?:HTTP|;) ([1-5]\d\d)\b/g))
        add(row[1]!, status[1] ?? status[2]!, 'docs/errors.md');
  }
  return pairs;
}

let stack: Stack;
/** A second facade on the same sandbox: automatic persisted queries off, and a budget for requests without a key. */
let strict: App;
const strictDataDir = makeDataDir();

beforeAll(async () => {
  stack = await startStack();
  strict = await startApp(
    loadConfig({ ...stack.env, DATA_DIR: strictDataDir, APQ_MAX_ENTRIES: '0', KEYLESS_REFUSALS_PER_MINUTE: '1' }),
  );
});
afterAll(async () => {
  await strict?.stop();
  await stack?.stop();
  rmSync(strictDataDir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  codes: string[];
  messages: string[];
  type: string;
}

/** One HTTP request to /graphql; the answer's status and error codes (a stream is cut after its headers). */
async function ask(
  init: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    query?: string;
    key?: string | null;
    app?: App;
  } = {},
): Promise<Answer> {
  const app = init.app ?? stack.app;
  const headers: Record<string, string> = { 'content-type': 'application/json', ...init.headers };
  if (init.key !== null) headers.authorization = `Bearer ${init.key ?? stack.key}`;
  const controller = new AbortController();
  const response = await fetch(`${app.url}/graphql${init.query ? `?query=${encodeURIComponent(init.query)}` : ''}`, {
    method: init.method ?? 'POST',
    headers,
    body: init.body,
    signal: controller.signal,
  });
  const type = response.headers.get('content-type') ?? '';
  if (type.startsWith('text/event-stream')) {
    controller.abort();
    return { status: response.status, codes: [], messages: [], type };
  }
  const body = (await response.json()) as { errors?: Array<{ message: string; extensions?: { code?: string } }> };
  return {
    status: response.status,
    codes: (body.errors ?? []).map((error) => error.extensions?.code ?? ''),
    messages: (body.errors ?? []).map((error) => error.message),
    type,
  };
}

const post = (body: unknown, extra: Parameters<typeof ask>[0] = {}) =>
  ask({ ...extra, body: typeof body === 'string' ? body : JSON.stringify(body) });
const SUBSCRIPTION = 'subscription { deliveryEvents { uid } }';

describe('the error codes and HTTP statuses the docs give', () => {
  it('are the ones real requests get', async () => {
    const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
    // Each way the pages describe, tried; what came back is recorded as "CODE STATUS".
    const tried: Answer[] = [
      await post('[{"query":"{ __typename }"}]'), // a batch
      await post('not json'),
      await ask({
        method: 'GET',
        query: 'mutation { cancelDelivery(uid: "x") { __typename } }',
        headers: { accept: 'application/json' },
      }),
      await post({ query: SUBSCRIPTION }, { headers: { accept: 'application/json' } }),
      await post({ query: '{ __typename }' }, { headers: { accept: 'text/html' } }),
      await ask({ body: '{ __typename }', headers: { 'content-type': 'text/plain' } }),
      await post({
        query: '{ __typename }',
        extensions: { persistedQuery: { version: 2, sha256Hash: sha256('{ __typename }') } },
      }),
      await post({ query: `{ __typename }${' '.repeat(20_000)}` }),
      await post({ query: 'query A { __typename } query B { __typename }' }),
      await post({
        query: '{ __typename }',
        extensions: { persistedQuery: { version: 1, sha256Hash: sha256('{ other }') } },
      }),
      await post({ extensions: { persistedQuery: { version: 1, sha256Hash: sha256('{ never sent }') } } }),
      await post(
        { extensions: { persistedQuery: { version: 1, sha256Hash: sha256('{ never sent }') } } },
        { app: strict },
      ),
      await post({ query: `{ __typename }`, variables: { padding: 'x'.repeat(1_100_000) } }),
      // Without a key, past KEYLESS_REFUSALS_PER_MINUTE (1 on this facade).
      await post({ query: '{ availability { group } }' }, { app: strict, key: null }),
      await post({ query: '{ availability { group } }' }, { app: strict, key: null }),
    ];
    const observed = new Set(tried.flatMap((answer) => answer.codes.map((code) => `${code} ${answer.status}`)));
    const documented = documentedPairs();
    expect(documented.size).toBeGreaterThan(8);
    const unseen = [...documented]
      .filter(([pair]) => !observed.has(pair))
      .map(([pair, where]) => `${pair} (${[...new Set(where)].join(', ')})`);
    expect(unseen, `observed: ${[...observed].join(', ')}`).toEqual([]);
  });
});

describe('a subscription POSTed over plain HTTP', () => {
  it('is refused 406 asked for as application/json, and streamed as server-sent events with */* or no accept', async () => {
    expect(await post({ query: SUBSCRIPTION }, { headers: { accept: 'application/json' } })).toMatchObject({
      status: 406,
      codes: ['BAD_REQUEST'],
    });
    for (const accept of ['*/*', undefined, 'text/event-stream']) {
      const answer = await post({ query: SUBSCRIPTION }, { headers: accept ? { accept } : {} });
      expect(answer, String(accept)).toMatchObject({ status: 200, type: expect.stringMatching(/^text\/event-stream/) });
    }
  });

  it('is said to be refused 406 only when asked for as application/json (or in an accept the endpoint cannot answer)', () => {
    const claims = PAGES.flatMap((page) =>
      flat(read(page))
        .split(/(?<=[.;])\s|\s\|\s/)
        .filter((sentence) => /\b406\b/.test(sentence) && /subscription/i.test(sentence))
        .map((sentence) => [page, sentence] as const),
    );
    expect(claims.length).toBeGreaterThanOrEqual(4);
    for (const [page, sentence] of claims) {
      expect(sentence, page).toMatch(/application\/json/);
      // With */* or no accept it streams: a sentence may say so, never that it is refused.
      expect(sentence, page).not.toMatch(/406[^.;]*(?:\*\/\*|no accept|none)\)?[^.;]*$/);
      expect(sentence, page).not.toMatch(/(?:without|no) `?accept: text\/event-stream`? [^.;]*406/);
    }
  });
});

describe('the limits table of docs/limits.md, at the values it gives', () => {
  const table = read('docs/limits.md')
    .split('## One GraphQL operation')[1]!
    .split('\n\n')
    .find((part) => part.startsWith('| limit |'))!;
  const rows = new Map(
    [...table.matchAll(/^\| ([^|]+) \| ([^|]+) \| ([^|]+) \|/gm)].map((row) => [
      row[1]!.trim(),
      { value: row[2]!.trim(), refusal: row[3]!.trim() },
    ]),
  );
  /** The number a row gives (the default in parentheses when it names a setting), in bytes for KiB and MiB. */
  const valueOf = (label: string) => {
    const text = rows.get(label)!.value;
    const match = /(?:\(|^)(\d[\d,]*)\s*(KiB|MiB)?/.exec(text)!;
    return Number(match[1]!.replace(/,/g, '')) * ({ KiB: 1024, MiB: 1024 ** 2 }[match[2] as 'KiB' | 'MiB'] ?? 1);
  };
  const codeOf = (label: string) => /`([A-Z_]+)`/.exec(rows.get(label)!.refusal)![1]!;
  const statusOf = (label: string) => Number(/HTTP (\d{3})/.exec(rows.get(label)!.refusal)?.[1] ?? 200);

  it('refuses a request body one byte over its limit with the status and code the row gives', async () => {
    const limit = valueOf('request body');
    const query = '{ __typename }';
    const body = (size: number) =>
      JSON.stringify({
        query,
        variables: { padding: 'x'.repeat(size - JSON.stringify({ query, variables: { padding: '' } }).length) },
      });
    expect(Buffer.byteLength(body(limit + 1))).toBe(limit + 1);
    expect(await post(body(limit + 1))).toMatchObject({
      status: statusOf('request body'),
      codes: [codeOf('request body')],
    });
    expect((await post(body(limit))).codes).not.toContain(codeOf('request body'));
  });

  it('refuses a query text one byte over its limit with the status and code the row gives', async () => {
    const limit = valueOf('query text');
    const text = (size: number) => `{ __typename }${' '.repeat(size - '{ __typename }'.length)}`;
    expect(await post({ query: text(limit + 1) })).toMatchObject({
      status: statusOf('query text'),
      codes: [codeOf('query text')],
    });
    expect((await post({ query: text(limit) })).codes).toEqual([]);
  });

  it('refuses one token over the limit while parsing', async () => {
    const limit = valueOf('tokens');
    // `{`, n unknown fields, `}`: n + 2 tokens; at the limit the document parses (and fails validation instead).
    const fields = (tokens: number) => `{ ${'x '.repeat(tokens - 2)}}`;
    expect((await post({ query: fields(limit + 1) })).codes).toEqual([codeOf('tokens')]);
    expect((await post({ query: fields(limit) })).codes).not.toContain(codeOf('tokens'));
  });

  it('refuses a field repeated once more than the limit in one selection set', async () => {
    const limit = valueOf('one field in one selection set');
    expect((await post({ query: `{ ${'__typename '.repeat(limit + 1)}}` })).codes).toEqual([
      codeOf('one field in one selection set'),
    ]);
    expect((await post({ query: `{ ${'__typename '.repeat(limit)}}` })).codes).toEqual([]);
  });

  it('refuses one alias and one directive over their limits', async () => {
    const aliases = valueOf('aliases');
    const aliased = (n: number) =>
      `{ ${Array.from({ length: n }, (_, i) => `a${i}: availability { group }`).join(' ')} }`;
    const over = await post({ query: aliased(aliases + 1) });
    expect(over.codes).toContain(codeOf('aliases'));
    expect(over.messages.join(' ')).toMatch(new RegExp(`Aliases limit of ${aliases} exceeded`));
    expect((await post({ query: aliased(aliases) })).messages.join(' ')).not.toMatch(/Aliases limit/);

    const directives = valueOf('directives');
    const directed = (n: number) => `{ __typename ${'@include(if: true) '.repeat(n)}}`;
    const overDirectives = await post({ query: directed(directives + 1) });
    expect(overDirectives.codes).toContain(codeOf('directives'));
    expect(overDirectives.messages.join(' ')).toMatch(new RegExp(`Directives limit of ${directives} exceeded`));
    expect((await post({ query: directed(directives) })).messages.join(' ')).not.toMatch(/Directives limit/);
  });

  it('refuses one level of depth over its limit', async () => {
    const depth = valueOf('depth');
    // Unknown fields nest as deep as asked; only the depth rule speaks of depth.
    const nested = (levels: number) => `${'{ a '.repeat(levels)}${'}'.repeat(levels)}`;
    const over = await post({ query: nested(depth + 1) });
    expect(over.codes).toContain(codeOf('depth'));
    expect(over.messages.join(' ')).toMatch(new RegExp(`depth limit of ${depth} exceeded`));
    expect((await post({ query: nested(depth) })).messages.join(' ')).not.toMatch(/depth limit/);
  });
});
