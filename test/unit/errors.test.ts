// The registry in src/errors.ts (docs/errors.md's table is printed from it: test/unit/docs-truth.test.ts).
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';

describe('error registry', () => {
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
