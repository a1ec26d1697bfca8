// GRAPHQL_MAX_RESPONSE_BYTES on every way out. Each result is measured before
// it is written, by a count that stops at the limit (jsonOver): an answer that
// repeats one payload thousands of times is refused in about a millisecond,
// where writing it would hold the event loop for as long as 100 MB of JSON takes.
// Then the exact bytes of the written text are checked where there is one: the
// direct JSON path checks its own (http/graphql.ts); yoga's handler writes each
// result, SSE events included, with the result's `stringify` when it has one,
// so wrapping that checks the very text that goes out. graphql-ws writes its
// messages with JSON.stringify, out of reach: there the count is the check.
import type { ExecutionResult } from 'graphql';
import { ResponseTooLargeError } from '../../errors.js';
import { toGraphQLError } from '../limits.js';

/** The whole answer that replaces one over GRAPHQL_MAX_RESPONSE_BYTES. */
export function responseTooLarge(maxBytes: number): ExecutionResult {
  return { errors: [toGraphQLError(new ResponseTooLargeError(maxBytes))], data: null };
}

/** Whether a JSON text takes more than `maxBytes` bytes in UTF-8 (measured only when its length leaves a doubt). */
export function textOver(text: string, maxBytes: number): boolean {
  if (text.length * 3 <= maxBytes) return false;
  return text.length > maxBytes || Buffer.byteLength(text) > maxBytes;
}

/**
 * Whether `value` written as JSON takes more than `maxBytes` bytes, counted
 * without writing it and given up as soon as it is over, so a huge answer costs
 * no more than the limit. Short strings count one byte per character and escapes
 * are not counted: a close estimate, which the exact check on the written text
 * completes on HTTP.
 */
export function jsonOver(value: unknown, maxBytes: number): boolean {
  return jsonBytes(value, maxBytes) > maxBytes;
}

/**
 * The bytes `value` takes written as JSON, counted as jsonOver counts them: the count stops once it passes `maxBytes`.
 */
export function jsonBytes(value: unknown, maxBytes: number): number {
  let bytes = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'string') {
      // A long string may be multi-byte text: its UTF-8 length is worth measuring.
      bytes += (item.length > 256 ? Buffer.byteLength(item) : item.length) + 2;
    } else if (typeof item === 'number') {
      bytes += 8;
    } else if (typeof item === 'boolean' || item === null) {
      bytes += 5;
    } else if (typeof item === 'object') {
      // GraphQLError and Date write themselves.
      if (typeof (item as { toJSON?: unknown }).toJSON === 'function') {
        pending.push((item as { toJSON(): unknown }).toJSON());
        continue;
      }
      if (Array.isArray(item)) {
        bytes += item.length + 1;
        for (let index = 0; index < item.length; index += 1) pending.push(item[index]);
      } else {
        bytes += 2;
        for (const key in item) {
          const entry = (item as Record<string, unknown>)[key];
          // Left out of JSON, as JSON.stringify does (graphql-jit's `stringify` among them).
          if (entry === undefined || typeof entry === 'function') continue;
          bytes += key.length + 4;
          pending.push(entry);
        }
      }
    }
    if (bytes > maxBytes) return bytes;
  }
  return bytes;
}

type Written = ExecutionResult & { stringify?: (result: ExecutionResult) => string };

/**
 * The result as it may go out: replaced by the refusal when its count is over
 * `maxBytes`; else, when `checkText`, with a `stringify` that checks the text it
 * writes (yoga's handler and SSE write with it). `counted` hears the count (the
 * work an answer costs, for callers charged by it).
 */
export function boundResult(
  result: Written,
  maxBytes: number,
  checkText: boolean,
  counted?: (bytes: number) => void,
): ExecutionResult {
  const bytes = jsonBytes(result, maxBytes);
  counted?.(Math.min(bytes, maxBytes));
  if (bytes > maxBytes) return responseTooLarge(maxBytes);
  if (!checkText) return result;
  const write = result.stringify ?? ((value: ExecutionResult) => JSON.stringify(value));
  result.stringify = (value) => {
    let text: string;
    try {
      text = write(value);
    } catch (error) {
      // Longer than the longest string V8 can make: far over any limit.
      if (error instanceof RangeError && /string length/i.test(error.message))
        return JSON.stringify(responseTooLarge(maxBytes));
      throw error;
    }
    return textOver(text, maxBytes) ? JSON.stringify(responseTooLarge(maxBytes)) : text;
  };
  return result;
}
