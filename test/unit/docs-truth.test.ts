// What README.md and docs/ state as fact, read out of the pages and checked
// against the code that decides it: the settings' and error codes' tables are
// the ones the code prints, every CODE_OR_SETTING they name exists, every
// value they give a setting or a constant is its default, the limits table is
// OPERATION_LIMITS, every HTTP status and WebSocket close code is one the code
// (or the upstream's document) uses, every port shown is a default and every
// snippet that calls the facade honours PORT, and every library version named is
// the one package.json pins. What a status belongs to is checked against the
// running service in test/integration/docs-behaviour.test.ts.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { CloseCode } from 'graphql-ws';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, unknownSettings } from '../../src/config.js';
import { ERROR_CODES } from '../../src/errors.js';
import { OPERATION_LIMITS } from '../../src/pipeline/limits.js';
import { GENERATED_TABLES, withTable } from '../../scripts/docs/tables.js';

const root = new URL('../..', import.meta.url).pathname;
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const PAGES = [
  'README.md',
  ...readdirSync(path.join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];
const pages = new Map(PAGES.map((page) => [page, read(page)]));
/** Each page as one line of prose: a sentence may wrap anywhere. */
const flat = (text: string) => text.replace(/\s*\n\s*/g, ' ');

function sourceFiles(dir: string): string[] {
  return readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sourceFiles(file);
    return /\.(ts|mjs|sh)$/.test(entry.name) ? [file] : [];
  });
}
// The facade and the sandbox package it embeds: a page may quote either.
const sources = new Map(
  [...sourceFiles('src'), ...sourceFiles('packages/sandbox/src')].map((file) => [file, read(file)]),
);
const settings = new Map(CONFIG_VARIABLES.map((variable) => [variable.name, variable]));

/** `export const NAME = 8 * 1024 * 1024;` in src/: the constants a page may quote, with their values. */
const constants = new Map<string, number | undefined>();
for (const text of sources.values()) {
  for (const match of text.matchAll(/^export const ([A-Z][A-Z0-9_]+)(?::[^=]+)? = ([^\n]*)/gm)) {
    const expression = match[2]!.replace(/;$/, '').replace(/_/g, '');
    // Only plain arithmetic is evaluated (8 * 1024 * 1024); anything else is a name a page may use, without a value.
    constants.set(
      match[1]!,
      /^[\d\s*+()-]+$/.test(expression) ? (Function(`return (${expression})`)() as number) : undefined,
    );
  }
}

describe('tables the code decides', () => {
  // Printed by `npm run docs` (scripts/docs/tables.ts): every setting from CONFIG_VARIABLES, every error code from
  // ERROR_CODES. The prose around them is free to change.
  it.each(GENERATED_TABLES.map((table) => [table.page, table] as const))(
    '%s holds the table the code prints',
    (page, table) => {
      const text = read(page);
      expect(withTable(text, table), 'run `npm run docs` and commit the result').toBe(text);
    },
  );
});

describe('names in the docs', () => {
  /** Variables the test suite, CI, scripts and the example read (CRASH_TRIALS, DG_URL): not settings of the service. */
  const harness = new Set([
    ...['test', 'packages/sandbox/test', 'scripts', '.ci', 'examples']
      .flatMap((dir) => sourceFiles(dir))
      .flatMap((file) =>
        [...read(file).matchAll(/process\.env\.([A-Z][A-Z0-9_]+)|\$\{?([A-Z][A-Z0-9_]+)/g)].map(
          (match) => match[1] ?? match[2]!,
        ),
      ),
  ]);
  /** Node's own variables, which the docs may tell an operator to set (NODE_OPTIONS for V8 flags). */
  const runtime = new Set(['NODE_OPTIONS']);
  const schemaNames = new Set([...read('schema.graphql').matchAll(/\b[A-Z][A-Z0-9_]+\b/g)].map((match) => match[0]));

  it('every CODE or SETTING in backquotes is an error code, a setting, a schema name, a constant of src/ or a variable of the test harness', () => {
    const unknown: string[] = [];
    for (const [page, text] of pages) {
      for (const match of text.matchAll(/`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?:=[^`]*)?`/g)) {
        const name = match[1]!;
        if (
          name in ERROR_CODES ||
          settings.has(name) ||
          schemaNames.has(name) ||
          constants.has(name) ||
          harness.has(name) ||
          runtime.has(name)
        )
          continue;
        // A misspelling shown as one (REDIS_ULR), in a sentence that says it is not a setting.
        const around = flat(text.slice(Math.max(0, match.index - 200), match.index + 100));
        if (unknownSettings({ [name]: 'x' }).length > 0 && /looks? like one of (?:ours|these)|misspel/.test(around))
          continue;
        unknown.push(`${page}: ${name}`);
      }
    }
    expect(unknown).toEqual([]);
  });

  it("every setting assigned in a shell block of the docs is one of ours (or the harness's, or the block's own variable)", () => {
    const unknown: string[] = [];
    for (const [page, text] of pages) {
      const blocks = [...text.matchAll(/```sh\n([\s\S]*?)```/g)].map((block) => block[1]!);
      // The blocks' own shell variables: assigned and then used with $NAME in the same page.
      const own = new Set(
        blocks.flatMap((block) => [...block.matchAll(/\$\{?([A-Z][A-Z0-9_]*)/g)].map((match) => match[1]!)),
      );
      for (const block of blocks) {
        for (const match of block.matchAll(/(?:^|\s)([A-Z][A-Z0-9_]*)=/gm)) {
          const name = match[1]!;
          if (settings.has(name) || harness.has(name) || own.has(name) || runtime.has(name)) continue;
          unknown.push(`${page}: ${name}=`);
        }
      }
    }
    expect(unknown).toEqual([]);
  });
});

/**
 * A quantity as a page writes it (`10 s`, `1 MiB`, `6,000`, `30 days`), in its base unit (ms, bytes or a count);
 * undefined when it is none.
 */
function quantity(text: string): { value: number; kind: 'ms' | 'bytes' | 'count' } | undefined {
  const match =
    /^(\d[\d,_]*(?:\.\d+)?)\s*(ms|s|seconds?|min|minutes?|h|hours?|d|days?|KiB|MiB|GiB|bytes?|%)?(?![\w.])/.exec(
      text.trim(),
    );
  if (!match) return undefined;
  const number = Number(match[1]!.replace(/[,_]/g, ''));
  const unit = match[2] ?? '';
  const ms: Record<string, number> = {
    ms: 1,
    s: 1000,
    second: 1000,
    seconds: 1000,
    min: 60_000,
    minute: 60_000,
    minutes: 60_000,
    h: 3_600_000,
    hour: 3_600_000,
    hours: 3_600_000,
    d: 86_400_000,
    day: 86_400_000,
    days: 86_400_000,
  };
  const bytes: Record<string, number> = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, byte: 1, bytes: 1 };
  if (unit in ms) return { value: number * ms[unit]!, kind: 'ms' };
  if (unit in bytes) return { value: number * bytes[unit]!, kind: 'bytes' };
  return { value: number, kind: 'count' };
}

type Quantity = { value: number; kind: 'ms' | 'bytes' | 'count'; raw?: number };

/**
 * A setting's default in the same terms: _MS and _SECONDS as time, _BYTES as bytes, durations (30d) as time; raw: the
 * number as set.
 */
function settingDefault(name: string): Quantity | undefined {
  const raw = settings.get(name)!.default;
  const duration = /^(\d+)(ms|s|m|h|d)$/.exec(raw);
  if (duration)
    return { ...quantity(`${duration[1]} ${duration[2] === 'm' ? 'min' : duration[2]}`)!, raw: Number(duration[1]) };
  if (!/^\d+$/.test(raw)) return undefined;
  const value = Number(raw);
  if (name.endsWith('_MS')) return { value, kind: 'ms', raw: value };
  if (name.endsWith('_SECONDS')) return { value: value * 1000, kind: 'ms', raw: value };
  if (name.endsWith('_BYTES')) return { value, kind: 'bytes', raw: value };
  return { value, kind: 'count', raw: value };
}

/**
 * A bare number is the setting as it is set (30 for WEBHOOK_CLOCK_TOLERANCE_SECONDS); one with a unit is compared in
 * that unit's base.
 */
const same = (stated: Quantity, actual: Quantity) =>
  (stated.kind === 'count'
    ? stated.value === (actual.raw ?? actual.value)
    : stated.kind === actual.kind && stated.value === actual.value) ||
  (actual.kind === 'count' && stated.value === actual.value);

describe('values in the docs', () => {
  it('a value given beside a setting or a constant, as `NAME` (value) or `NAME`, value, is its default', () => {
    const wrong: string[] = [];
    let checked = 0;
    for (const [page, text] of pages) {
      for (const match of flat(text).matchAll(
        /`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`\)?\s*[(,]\s*(\d[\d,_]*(?:\.\d+)?(?:\s*[A-Za-z%]+)?)/g,
      )) {
        const [, name, written] = match;
        const stated = quantity(written!);
        if (!stated) continue;
        let actual: Quantity | undefined;
        if (settings.has(name!)) actual = settingDefault(name!);
        else if (constants.get(name!) !== undefined) actual = { value: constants.get(name!)!, kind: stated.kind };
        // A status beside an error code is checked against the service itself (docs-behaviour.test.ts).
        if (!actual) continue;
        checked += 1;
        if (!same(stated, actual))
          wrong.push(
            `${page}: ${name} is written as ${written}, its default is ${settings.get(name!)?.default ?? constants.get(name!)}`,
          );
      }
    }
    expect(checked).toBeGreaterThan(40);
    expect(wrong).toEqual([]);
  });

  it("a table row of a limit, its default and its setting gives the setting's default", () => {
    const wrong: string[] = [];
    for (const [page, text] of pages) {
      for (const row of text.matchAll(/^\| [^|]+ \| ([^|`]+?) \| `([A-Z][A-Z0-9_]+)`[^|]*\|/gm)) {
        const stated = quantity(row[1]!);
        if (!stated || !settings.has(row[2]!)) continue;
        const actual = settingDefault(row[2]!);
        if (actual && !same(stated, actual))
          wrong.push(`${page}: ${row[2]} is written as ${row[1]}, its default is ${settings.get(row[2]!)!.default}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('the limits table of docs/limits.md is OPERATION_LIMITS', () => {
    const table = read('docs/limits.md')
      .split('## One GraphQL operation')[1]!
      .split('\n\n')
      .find((part) => part.startsWith('| limit |'))!;
    const rows = new Map(
      [...table.matchAll(/^\| ([^|]+) \| ([^|]+) \|/gm)].map((row) => [row[1]!.trim(), row[2]!.trim()]),
    );
    const limits: Record<string, number> = {
      tokens: OPERATION_LIMITS.tokens,
      'one field in one selection set': OPERATION_LIMITS.fieldRepeats,
      depth: OPERATION_LIMITS.depth,
      aliases: OPERATION_LIMITS.aliases,
      directives: OPERATION_LIMITS.directives,
      cost: OPERATION_LIMITS.cost,
    };
    for (const [label, value] of Object.entries(limits))
      expect(quantity(rows.get(label) ?? '')?.value, label).toBe(value);
  });
});

describe('HTTP statuses and close codes in the docs', () => {
  /**
   * Statuses the sources write or read (the facade's answers, the upstream's and the sandbox's), and those the upstream's
   * document defines.
   */
  const known = new Set([
    ...[...sources.values()].flatMap((text) => [...text.matchAll(/\b([1-5]\d\d)\b/g)].map((match) => Number(match[1]))),
    ...[...read('openapi/upstream.yaml').matchAll(/^\s+'?([1-5]\d\d)'?:/gm)].map((match) => Number(match[1])),
  ]);
  /**
   * A three-digit number in a status's place: after HTTP or a verb of answering, or in a list of them; not a quantity
   * (100 uids, 500 events).
   */
  const STATUS =
    /(?:HTTP|answers?|answered|gets?|then|is|are|stays|with|or|and|refused with|counted as|becomes|\(|,|\/)\s+([1-5]\d\d)\b(?!\s*(?:KiB|MiB|ms|s\b|uids?|events?|rows|reads?|of|per|deliveries|characters|levels|times|tokens|entries|keys|requests|operations|positions|[-,.]\d))/g;

  it('every status a page names is one the code answers or meets', () => {
    const unknown: string[] = [];
    let found = 0;
    for (const [page, text] of pages) {
      for (const match of flat(text).matchAll(STATUS)) {
        found += 1;
        if (!known.has(Number(match[1]))) unknown.push(`${page}: ${match[0]}`);
      }
    }
    expect(found).toBeGreaterThan(50);
    expect(unknown).toEqual([]);
  });

  it("every WebSocket close code a page names is ours or graphql-ws's", () => {
    const ours = new Set(
      [...[...sources.values()].join('\n').matchAll(/\b(4\d\d\d)\b/g)].map((match) => Number(match[1])),
    );
    // graphql-ws's own codes, and the WebSocket protocol's (RFC 6455: 1001 going away, 1009 message too big, …).
    const theirs = new Set([
      ...Object.values(CloseCode).filter((code): code is number => typeof code === 'number'),
      ...Array.from({ length: 16 }, (_, i) => 1000 + i),
    ]);
    const unknown: string[] = [];
    for (const [page, text] of pages) {
      for (const match of flat(text).matchAll(
        /(?:closes?|closed|close code|codes?|\|)\s*(?:the socket\s*)?(?:with\s*)?\**(4\d\d\d|100\d|1011)\b/g,
      )) {
        const code = Number(match[1]);
        if (!ours.has(code) && !theirs.has(code)) unknown.push(`${page}: ${match[0]}`);
      }
    }
    expect(unknown).toEqual([]);
  });

  it('the slow-subscriber limit is said the same way everywhere: events over WebSocket, KiB unsent over SSE', () => {
    // What the code does: SSE's bound is SUBSCRIBER_MAX_PENDING KiB waiting in the socket's buffer
    // (src/http/server.ts).
    expect(sources.get('src/http/server.ts')).toContain('maxSseBufferedBytes: config.realtime.maxPendingEvents * 1024');
    const wrong: string[] = [];
    // A table row is one statement; prose is cut into sentences.
    const statements = (text: string) => [
      ...text.split('\n').filter((line) => line.startsWith('|')),
      ...flat(
        text
          .split('\n')
          .filter((line) => !line.startsWith('|'))
          .join('\n'),
      ).split(/(?<=\.)\s/),
    ];
    const said = [
      ...[...pages].flatMap(([page, text]) => statements(text).map((statement) => [page, statement] as const)),
      ['src/errors.ts', ERROR_CODES.SUBSCRIBER_TOO_SLOW.meaning] as const,
    ];
    let found = 0;
    for (const [page, statement] of said) {
      if (!/SUBSCRIBER_MAX_PENDING/.test(statement) || !/server-sent events|SSE/.test(statement)) continue;
      found += 1;
      if (!/KiB/.test(statement)) wrong.push(`${page}: ${statement}`);
    }
    expect(found).toBeGreaterThanOrEqual(3);
    expect(wrong).toEqual([]);
  });
});

describe('ports and snippets', () => {
  const portDefaults = new Map(
    CONFIG_VARIABLES.filter((variable) => variable.name.endsWith('PORT') && /^\d+$/.test(variable.default)).map(
      (variable) => [Number(variable.default), variable.name],
    ),
  );

  it('every local address a page shows is on a default port (of a setting, the OTLP collector, Redis or a Sentinel)', () => {
    const otlp = CONFIG_VARIABLES.flatMap((variable) =>
      [...variable.default.matchAll(/localhost:(\d+)/g)].map((match) => Number(match[1])),
    );
    const allowed = new Set([...portDefaults.keys(), ...otlp, 6379, 26379]);
    const unknown: string[] = [];
    for (const [page, text] of pages) {
      for (const match of text.matchAll(/(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(\d+)/g))
        if (!allowed.has(Number(match[1]))) unknown.push(`${page}: ${match[0]}`);
    }
    expect(unknown).toEqual([]);
  });

  it('every snippet that calls the facade or the sandbox on its default port takes the port from PORT (or SANDBOX_PORT)', () => {
    const hardCoded: string[] = [];
    for (const [page, text] of pages) {
      for (const block of text.matchAll(/```(\w+)[^\n]*\n([\s\S]*?)```/g)) {
        const [, language, code] = block;
        // Configuration files (a proxy's, a gateway's) cannot read PORT: they show the default, as a file would be
        // written.
        if (['text', 'mermaid', 'nginx', 'yaml', 'json', 'graphql'].includes(language!)) continue;
        for (const [port, variable] of portDefaults) {
          // A block may name the default only as the fallback of its variable (${PORT:-4000}, process.env.PORT ?? 4000)
          // or when it sets it (PORT=4000).
          const bare = code!.replace(
            new RegExp(
              `\\$\\{${variable}:-${port}\\}|process\\.env\\.${variable} \\?\\? '?${port}'?|${variable}=${port}`,
              'g',
            ),
            '',
          );
          if (new RegExp(`(?:127\\.0\\.0\\.1|localhost):${port}\\b`).test(bare))
            hardCoded.push(`${page}: a ${language} block calls :${port} without ${variable}`);
        }
      }
    }
    expect(hardCoded).toEqual([]);
  });
});

describe('versions in the docs', () => {
  const pkg = JSON.parse(read('package.json')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
    engines: { node: string };
  };
  const pinned = { ...pkg.dependencies, ...pkg.devDependencies };
  const major = (range: string) => Number(/(\d+)/.exec(range)![1]);

  it('a library version a page names is the one package.json pins, said as "tested with"', () => {
    const wrong: string[] = [];
    let checked = 0;
    for (const [page, text] of pages) {
      for (const match of flat(text).matchAll(/tested with `([^`]+)` (\d+)/g)) {
        checked += 1;
        const range = pinned[match[1]!];
        if (range === undefined || major(range) !== Number(match[2]))
          wrong.push(`${page}: ${match[0]} (package.json: ${range})`);
      }
      // A client library with a bare version number reads as "use this one": npm may already give a newer major.
      for (const match of flat(text).matchAll(
        /(?<!tested with `)(?<![\w@/-])(Apollo Client|urql|graphql-ws|graphql-sse|@apollo\/client|@urql\/core)`? (\d+)\b/g,
      ))
        wrong.push(`${page}: "${match[0]}" names a version without "tested with"`);
    }
    expect(checked).toBeGreaterThan(0);
    expect(wrong).toEqual([]);
  });

  it('the Node.js version a page names is the one package.json requires', () => {
    for (const [page, text] of pages) {
      for (const match of flat(text).matchAll(/Node(?:\.js)? (\d+)\b/g))
        expect(Number(match[1]), `${page}: ${match[0]}`).toBe(major(pkg.engines.node));
    }
  });
});
