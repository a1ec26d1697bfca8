// The README's error table and the registry in src/errors.ts must agree.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';

function readmeErrorTable(): Map<string, string> {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.split(/^## Error codes$/m)[1]?.split(/^## /m)[0] ?? '';
  const rows = new Map<string, string>();
  for (const line of section.split('\n')) {
    const match = /^\| `([A-Z_]+)` \| ([^|]+) \|/.exec(line);
    if (match) rows.set(match[1]!, match[2]!.trim());
  }
  return rows;
}

describe('error registry', () => {
  it('lists exactly the codes of src/errors.ts in the README', () => {
    expect([...readmeErrorTable().keys()].sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('says in the README where each code reaches the client', () => {
    const surfaceWords = { 'graphql-error': 'GraphQL error', result: 'result', 'upstream-client': 'upstream client' } as const;
    for (const [code, surface] of readmeErrorTable()) {
      const expected = surfaceWords[ERROR_CODES[code as keyof typeof ERROR_CODES].surface];
      expect(surface.startsWith(expected), `${code}: "${surface}" should start with "${expected}"`).toBe(true);
    }
  });
});
