// Reading a request, for the API and the control routes alike (its body, JSON, path segments and bearer key), and
// escaping what a page shows.
import type { IncomingMessage } from 'node:http';

const MAX_BODY_BYTES = 1024 * 1024;

/** The whole request body as text, or 'too_large' past 1 MiB (the rest is discarded). */
export async function readBody(req: IncomingMessage): Promise<string | 'too_large'> {
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge = false;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) tooLarge = true;
    else chunks.push(chunk);
  }
  return tooLarge ? 'too_large' : Buffer.concat(chunks).toString('utf8');
}

export function parseJson(body: string): unknown {
  if (body === 'too_large') return undefined;
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

export function decodeSegment(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

/** Path segments, URL-decoded; null when a segment is not valid percent-encoding. */
export function splitPath(path: string): string[] | null {
  const segments = path
    .split('/')
    .filter((s) => s !== '')
    .map(decodeSegment);
  return segments.every((s): s is string => s !== null) ? segments : null;
}

export function bearerToken(header: string | undefined): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return match ? match[1]! : null;
}

export function isHttpUrl(text: string): boolean {
  return URL.canParse(text) && ['http:', 'https:'].includes(new URL(text).protocol);
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
