// GraphiQL is served from bundled assets (it must work offline), with the example
// operations and the header to set already filled in.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../helpers/stack.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

describe('GraphiQL', () => {
  it('loads no script or stylesheet from another host', async () => {
    const response = await fetch(`${stack.app.url}/graphql`, { headers: { accept: 'text/html' } });
    expect(response.status).toBe(200);
    const html = await response.text();
    expect(html).toContain('<html');
    const external = [...html.matchAll(/<(?:script|link)\b[^>]*(?:src|href)=["'](https?:)?\/\/[^"']+/gi)].map((m) => m[0]);
    expect(external).toEqual([]);
    expect(html.length).toBeGreaterThan(100_000);
  });

  it('opens with example operations and shows the Authorization header to set', async () => {
    const html = await (await fetch(`${stack.app.url}/graphql`, { headers: { accept: 'text/html' } })).text();
    expect(html).toContain('mutation Book');
    expect(html).toContain('subscription Follow');
    expect(html).toContain('Authorization');
  });

  it('is off in production unless introspection is enabled', async () => {
    const production = await startStack({ env: { NODE_ENV: 'production' } });
    try {
      const response = await fetch(`${production.app.url}/graphql`, { headers: { accept: 'text/html' } });
      expect(await response.text()).not.toContain('mutation Book');
    } finally {
      await production.stop();
    }
  });
});
