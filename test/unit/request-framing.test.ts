// The framing the front door reads each connection's requests with: where heads
// and bodies begin and end however the bytes are cut, every byte of a head
// counted against its path's limit, and a request line read in linear time.
import { describe, expect, it } from 'vitest';
import { LineBuffer, RequestFraming, type BodyFraming, type Scan } from '../../src/http/request-framing.js';

const DEFAULT = 16 * 1024;
const WEBHOOK = 272 * 1024;
const limitFor = (path: string | undefined) => (path === '/webhooks' ? WEBHOOK : DEFAULT);

/**
 * What the framing makes of `bytes` cut into reads of `size`: each event with the offset it was met at, over the whole
 * stream.
 */
function read(bytes: string | Buffer, size: number, framings: BodyFraming[] = []): { events: string[]; fed: string } {
  const framing = new RequestFraming(DEFAULT, limitFor);
  const input = typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes;
  const events: string[] = [];
  let fed = '';
  let held = '';
  const bodies = [...framings];
  for (let start = 0; start < input.length; start += size) {
    const chunk = input.subarray(start, Math.min(input.length, start + size));
    let at = 0;
    let from = 0;
    while (at < chunk.length) {
      const scan: Scan = framing.scan(chunk, at);
      if (scan.event === 'more') {
        fed += chunk.toString('latin1', from, scan.feedEnd);
        held += chunk.toString('latin1', scan.feedEnd);
        from = at = chunk.length;
        continue;
      }
      if (scan.event === 'over' || scan.event === 'malformed') {
        events.push(scan.event === 'over' ? `over ${scan.limit}` : `malformed: ${scan.reason}`);
        return { events, fed };
      }
      if (scan.event === 'line') {
        events.push(`line ${scan.path} @${start + scan.end}`);
        // The held start of the line goes first; the framing gave it back whole.
        if (scan.held) {
          expect(scan.held.toString('latin1')).toBe(held);
          fed += held;
          held = '';
        }
        at = scan.end;
        continue;
      }
      events.push(`${scan.event} @${start + scan.end}`);
      fed += chunk.toString('latin1', from, scan.end);
      from = at = scan.end;
      if (scan.event === 'head') framing.bodyFollows(bodies.shift() ?? { kind: 'none' });
    }
    fed += chunk.toString('latin1', from);
  }
  return { events, fed };
}

/**
 * The same stream cut every way from one byte a read to all at once gives the same events and feeds every byte in
 * order.
 */
function everyCut(bytes: string, framings: BodyFraming[] = []): string[] {
  const whole = read(bytes, bytes.length, framings);
  for (const size of [1, 2, 3, 7, 64]) {
    const cut = read(bytes, size, framings);
    expect(cut.events, `reads of ${size}`).toEqual(whole.events);
    expect(cut.fed, `reads of ${size}`).toBe(bytes);
  }
  return whole.events;
}

describe('RequestFraming', () => {
  it('finds pipelined requests with and without bodies, blank lines before a request line included', () => {
    const first = 'GET /health HTTP/1.1\r\nhost: x\r\n\r\n';
    const second = 'POST /graphql?x=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello';
    const third = '\r\n\r\nPOST /webhooks HTTP/1.1\r\nhost: x\r\n\r\n';
    const stream = first + second + third;
    expect(everyCut(stream, [{ kind: 'none' }, { kind: 'length', bytes: 5 }, { kind: 'none' }])).toEqual([
      `line /health @${'GET /health HTTP/1.1\r\n'.length}`,
      `head @${first.length}`,
      `line /graphql @${first.length + 'POST /graphql?x=1 HTTP/1.1\r\n'.length}`,
      `head @${first.length + second.length - 5}`,
      `message @${first.length + second.length}`,
      `line /webhooks @${first.length + second.length + '\r\n\r\nPOST /webhooks HTTP/1.1\r\n'.length}`,
      `head @${stream.length}`,
    ]);
  });

  it('skips a chunked body by its chunk sizes, extensions and trailers, whatever bytes the data holds', () => {
    const head = 'POST /graphql HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n';
    const body = '5;name="a;b"\r\n\r\n\r\n\r\r\nA\r\nGET / HTTP/1.1\r\n0\r\ntrailer: yes\r\nanother: one\r\n\r\n';
    const next = 'GET /health HTTP/1.1\r\nhost: x\r\n\r\n';
    expect(everyCut(head + body + next, [{ kind: 'chunked' }])).toEqual([
      `line /graphql @${'POST /graphql HTTP/1.1\r\n'.length}`,
      `head @${head.length}`,
      `message @${head.length + body.length}`,
      `line /health @${head.length + body.length + 'GET /health HTTP/1.1\r\n'.length}`,
      `head @${head.length + body.length + next.length}`,
    ]);
  });

  it('counts every byte of a head against its own path’s limit: whitespace, line ends and blank lines included', () => {
    const padded = (value: string) => `GET /health HTTP/1.1\r\nhost: x\r\nx-padding: ${value}\r\n\r\n`;
    // At the limit, then over it by whitespace alone (after a value, or before it).
    const room = DEFAULT - padded('').length;
    expect(read(padded('a'.repeat(room)), 1000).events.at(-1)).toMatch(/^head/);
    expect(read(padded(`a${' '.repeat(room)}`), 1000).events).toContain(`over ${DEFAULT}`);
    expect(read(padded(`${'\t'.repeat(room)}a`), 1000).events).toContain(`over ${DEFAULT}`);
    expect(read(`${'\r\n'.repeat(DEFAULT)}GET / HTTP/1.1\r\n\r\n`, 1000).events).toEqual([`over ${DEFAULT}`]);
    // The webhook path's limit, for that request only: the next is held to the default again.
    const token = `authorization: Bearer ${'t'.repeat(200 * 1024)}\r\n`;
    const webhook = `POST /webhooks HTTP/1.1\r\nhost: x\r\n${token}\r\n`;
    const after = `GET /health HTTP/1.1\r\nhost: x\r\n${token}\r\n`;
    expect(read(webhook + after, 4096).events).toEqual([
      `line /webhooks @${'POST /webhooks HTTP/1.1\r\n'.length}`,
      `head @${webhook.length}`,
      `line /health @${webhook.length + 'GET /health HTTP/1.1\r\n'.length}`,
      `over ${DEFAULT}`,
    ]);
    // A webhook over its own limit.
    expect(read(`POST /webhooks HTTP/1.1\r\n${token.repeat(2)}\r\n`, 4096).events.at(-1)).toBe(`over ${WEBHOOK}`);
  });

  it('refuses at once a request line ending in a bare LF, and bytes that cannot begin one', () => {
    expect(read('GET /health HTTP/1.1\nhost: x\n\n', 1).events).toEqual([
      'malformed: a request line ending in LF without CR',
    ]);
    expect(read('\x16\x03\x01\x02\x00', 5).events).toEqual(['malformed: not an HTTP request line']);
    expect(read('GEX / HTTP/1.1\r\n', 1).events).toEqual(['malformed: not an HTTP request line']);
    expect(read('GETS / HTTP/1.1\r\n', 100).events).toEqual(['malformed: not an HTTP method']);
    expect(read('GET\r\n', 100).events).toEqual(['malformed: not an HTTP request line']);
    // A method's bytes that may still become one wait for more.
    expect(read('PROPF', 1).events).toEqual([]);
  });

  it('holds a request line longer than the default limit to it, whatever its path', () => {
    expect(read(`GET /${'a'.repeat(DEFAULT)} HTTP/1.1\r\n`, 100).events).toEqual([`over ${DEFAULT}`]);
    expect(read(`POST /webhooks?${'a'.repeat(DEFAULT)} HTTP/1.1\r\n`, 100).events).toEqual([`over ${DEFAULT}`]);
  });

  it('reads a request line that comes a byte a read with each byte copied a bounded number of times', () => {
    const line = `GET /graphql?${'q'.repeat(16_000)} HTTP/1.1\r\n`;
    const framing = new RequestFraming(32 * 1024, () => 32 * 1024);
    let copied = 0;
    const original = LineBuffer.prototype.append;
    LineBuffer.prototype.append = function append(this: LineBuffer, chunk, start, end) {
      original.call(this, chunk, start, end);
      copied = this.copied;
    };
    try {
      const bytes = Buffer.from(line, 'latin1');
      for (let at = 0; at < bytes.length - 1; at += 1)
        expect(framing.scan(bytes.subarray(at, at + 1), 0).event).toBe('more');
      const last = framing.scan(bytes.subarray(bytes.length - 1), 0);
      expect(last).toMatchObject({ event: 'line', path: '/graphql' });
      expect((last as { held: Buffer }).held.length).toBe(bytes.length - 1);
    } finally {
      LineBuffer.prototype.append = original;
    }
    // Each byte once into the buffer, and each earlier byte once more on each doubling: under three copies a byte.
    expect(copied).toBeLessThan(3 * line.length);
  });
});

describe('LineBuffer', () => {
  it('gives back what was appended, in order, and is empty after', () => {
    const buffer = new LineBuffer();
    buffer.append(Buffer.from('xxabc'), 2, 5);
    buffer.append(Buffer.from('def'), 0, 3);
    expect(buffer.size).toBe(6);
    expect(buffer.last).toBe('f'.charCodeAt(0));
    expect(buffer.take().toString()).toBe('abcdef');
    expect(buffer.size).toBe(0);
    expect(buffer.last).toBeUndefined();
  });
});
