// LOG_FORMAT: json gives one JSON object a line (for machines), pretty gives
// readable lines (pino-pretty) with the same redaction.
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/logger.js';
import type { LogFormat } from '../../src/config.js';

/** The lines a logger of this format writes for one request line and one warning. */
function linesOf(format: LogFormat): string[] {
  let text = '';
  const sink = new Writable({
    write(chunk, _encoding, done) {
      text += chunk.toString();
      done();
    },
  });
  const logger = createLogger('info', sink, format);
  logger.info({ reqId: 'r1', status: 200, authorization: 'Bearer sk_test_secret' }, 'request');
  logger.warn('upstream circuit breaker');
  return text.split('\n').filter(Boolean);
}

describe('LOG_FORMAT', () => {
  it('json: every line is a JSON object with level, time and msg', () => {
    const lines = linesOf('json');
    expect(lines).toHaveLength(2);
    const [request, warning] = lines.map((line) => JSON.parse(line));
    expect(request).toMatchObject({ level: 30, msg: 'request', reqId: 'r1', status: 200, authorization: '[redacted]' });
    expect(warning).toMatchObject({ level: 40, msg: 'upstream circuit breaker' });
  });

  it('pretty: one readable line each (time, level, message, fields), not JSON, with the same redaction', () => {
    const lines = linesOf('pretty');
    expect(lines).toHaveLength(2);
    for (const line of lines) expect(() => JSON.parse(line)).toThrow();
    expect(lines[0]).toMatch(
      /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: request \{"reqId":"r1","status":200,"authorization":"\[redacted\]"\}$/,
    );
    expect(lines[1]).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN: upstream circuit breaker$/);
    expect(lines.join('\n')).not.toContain('sk_test_secret');
  });

  it('is read from LOG_FORMAT, and a wrong value is named', () => {
    expect(loadConfig({ LOG_FORMAT: 'pretty' }).logFormat).toBe('pretty');
    expect(loadConfig({ LOG_FORMAT: 'JSON' }).logFormat).toBe('json');
    expect(() => loadConfig({ LOG_FORMAT: 'text' })).toThrow('LOG_FORMAT: expected one of pretty, json, got "text"');
  });

  it('defaults to json when stdout is not a terminal (as under a test runner, a pipe or a container log)', () => {
    expect(process.stdout.isTTY).toBeFalsy();
    expect(loadConfig({}).logFormat).toBe('json');
  });
});
