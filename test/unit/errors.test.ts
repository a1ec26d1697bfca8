// The error table of docs/errors.md and the registry in src/errors.ts must agree.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';

interface ReadmeRow {
  surface: string;
  meaning: string;
}

function readmeErrorTable(): Map<string, ReadmeRow> {
  const page = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
  const section = page.split(/^## Error codes$/m)[1]?.split(/^## /m)[0] ?? '';
  const rows = new Map<string, ReadmeRow>();
  for (const line of section.split('\n')) {
    const match = /^\| `([A-Z_]+)` \| ([^|]+) \| ([^|]+) \|$/.exec(line);
    if (match) rows.set(match[1]!, { surface: match[2]!.trim(), meaning: match[3]!.trim() });
  }
  return rows;
}

describe('error registry', () => {
  it('lists exactly the codes of src/errors.ts in docs/errors.md', () => {
    expect([...readmeErrorTable().keys()].sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('says in docs/errors.md where each code reaches the client', () => {
    const surfaceWords = {
      'graphql-error': 'GraphQL error',
      result: 'result',
      'upstream-client': 'upstream client',
    } as const;
    for (const [code, { surface }] of readmeErrorTable()) {
      const expected = surfaceWords[ERROR_CODES[code as keyof typeof ERROR_CODES].surface];
      expect(surface.startsWith(expected), `${code}: "${surface}" should start with "${expected}"`).toBe(true);
    }
  });

  it('gives each code the same meaning in docs/errors.md as in the registry', () => {
    for (const [code, { meaning }] of readmeErrorTable()) {
      expect(meaning.replaceAll('`', ''), code).toBe(ERROR_CODES[code as keyof typeof ERROR_CODES].meaning);
    }
  });

  it('lists the codes yoga answers request errors with, and the ones of our own limits', () => {
    for (const code of [
      'GRAPHQL_PARSE_FAILED',
      'GRAPHQL_VALIDATION_FAILED',
      'BAD_REQUEST',
      'BAD_USER_INPUT',
      'SUBSCRIBER_TOO_SLOW',
      'TOO_MANY_SUBSCRIPTIONS',
      'RESPONSE_TOO_LARGE',
    ]) {
      expect(ERROR_CODES[code as keyof typeof ERROR_CODES]?.surface, code).toBe('graphql-error');
    }
  });
});
