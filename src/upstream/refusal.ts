// What the upstream said when it refused a call: its status, its error code
// (`code` on the platform group, `error` on the partner group) and its message,
// passed on to the client scrubbed and bounded. Never the raw body.

/** The upstream's own words on a refusal, safe to show a client. */
export interface UpstreamRefusal {
  status: number;
  /** The body's `code` (platform group) or `error` (partner group); null when it sent none. */
  error: string | null;
  message: string | null;
}

const MAX_CODE = 64;
const MAX_MESSAGE = 300;

/**
 * Text from the upstream with anything key-like taken out: the caller's own key,
 * a `Bearer …` value, and any `sk_…`-style token (an upstream may echo a header
 * or another merchant's key).
 */
export function scrubSecrets(text: string, key: string | undefined): string {
  let scrubbed = key ? text.split(key).join('[redacted]') : text;
  scrubbed = scrubbed.replace(/\bbearer\s+[^\s"',;]+/gi, 'Bearer [redacted]');
  scrubbed = scrubbed.replace(/\b(?:sk|pk|rk)_[A-Za-z0-9_-]+/g, '[redacted]');
  return scrubbed;
}

/** One line, scrubbed, at most `max` characters. */
function clean(value: unknown, key: string | undefined, max: number): string | null {
  if (typeof value !== 'string') return null;
  // eslint-disable-next-line no-control-regex
  const line = scrubSecrets(value.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim(), key);
  if (line === '') return null;
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** The refusal in a non-2xx answer's parsed body (anything else in the body is dropped). */
export function upstreamRefusal(
  status: number,
  body: Record<string, unknown>,
  key: string | undefined,
): UpstreamRefusal {
  return {
    status,
    error: clean(typeof body.code === 'string' ? body.code : body.error, key, MAX_CODE),
    message: clean(body.message, key, MAX_MESSAGE),
  };
}
