// The sandbox's request log: the most recent requests only, so a long-running
// sandbox does not keep every request, with a counter that never goes back so a
// test can count the requests after a mark however many came before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REQUEST_LOG_SIZE, startSandbox, type Sandbox } from '../src/index.js';

let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: { stepMs: 0 }, requestLogSize: 5 });
});
afterAll(() => sandbox.stop());

async function availability(times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const res = await fetch(`${sandbox.url}/availability?n=${i}`, {
      headers: { authorization: `Bearer ${sandbox.merchants[0]!.key}` },
    });
    expect(res.status).toBe(200);
  }
}

describe('the request log', () => {
  it('keeps only the most recent requestLogSize requests, in the array callers hold', async () => {
    const held = sandbox.requests;
    const before = sandbox.requestCount;
    await availability(8);
    expect(sandbox.requestCount).toBe(before + 8);
    expect(sandbox.requests).toBe(held);
    expect(held).toHaveLength(5);
    expect(held.map((r) => r.seq)).toEqual([4, 5, 6, 7, 8].map((n) => before + n));
    expect(
      held.every(
        (r) => r.method === 'GET' && r.path === '/api/v1/availability' && r.group === 'partner' && r.status === 200,
      ),
    ).toBe(true);
    expect(sandbox.requestLogSize).toBe(5);
  });

  it('counts the requests after a mark, and refuses to undercount once they are gone', async () => {
    const mark = sandbox.requestCount;
    await availability(3);
    expect(sandbox.requestsSince(mark).map((r) => r.seq)).toEqual([mark + 1, mark + 2, mark + 3]);
    expect(sandbox.requestsSince(sandbox.requestCount)).toEqual([]);

    await availability(3);
    // Six requests after the mark, five kept: a count would be short, so it throws.
    expect(() => sandbox.requestsSince(mark)).toThrow(RangeError);
    expect(() => sandbox.requestsSince(sandbox.requestCount + 1)).toThrow(RangeError);
  });

  it('empties on reset while the counter goes on', async () => {
    const held = sandbox.requests;
    const before = sandbox.requestCount;
    sandbox.resetRequests();
    expect(held).toHaveLength(0);
    expect(sandbox.requestCount).toBe(before);
    expect(() => sandbox.requestsSince(before - 1)).toThrow(RangeError);

    const mark = sandbox.requestCount;
    await availability(2);
    expect(sandbox.requests).toBe(held);
    expect(held.map((r) => r.seq)).toEqual([mark + 1, mark + 2]);
    expect(sandbox.requestsSince(mark)).toEqual(held);
  });

  it('defaults to 10,000, shows its size on /sandbox/info, and refuses a size below 1', async () => {
    const info = (await (await fetch(`${sandbox.origin}/sandbox/info`)).json()) as { requestLogSize: number };
    expect(info.requestLogSize).toBe(5);
    expect(DEFAULT_REQUEST_LOG_SIZE).toBe(10_000);
    const plain = await startSandbox({ knobs: { stepMs: 0 } });
    try {
      expect(plain.requestLogSize).toBe(10_000);
    } finally {
      await plain.stop();
    }
    await expect(startSandbox({ requestLogSize: 0 })).rejects.toThrow(RangeError);
    await expect(startSandbox({ requestLogSize: 2.5 })).rejects.toThrow(RangeError);
  });
});
