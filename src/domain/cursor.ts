// Cursors as callers see them. A cursor stands for a position (seq) in the
// event log, which every merchant's events share: a plain seq would let one
// merchant read the platform's event volume off its own cursors. So each caller
// gets cursors of its own: one AES-128 block of (seq, tag), under a key derived
// (HMAC-SHA256) from a secret kept in the store and the caller's merchant id
// (src/access/merchants.ts: the hash of its first key, so cursors given before
// merchants, and before a rotation, stay valid), in
// base64url. Deterministic, so the same event has the same cursor for the same
// caller, on every instance and across restarts; another caller's cursor, or a
// made-up one, decrypts to a block whose tag does not match (a chance of 2^-64)
// and is refused.
//
// Decimal cursors from before are refused, "0" excepted: accepting "1234" would
// let a caller find the seq behind any of its opaque cursors by bisecting
// `after:` with decimals, which is what opacity is for. "0" (from the start of
// the log) names no event and says nothing.
import { createCipheriv, createDecipheriv, createHmac, createSecretKey, type Cipher, type Decipher } from 'node:crypto';

/** One caller's cursors. */
export interface CallerCursors {
  /** The cursor of the event at `seq`, as this caller sees it. */
  cursorOf(seq: number): string;
  /** The seq a cursor given to this caller stands for, 0 for "0"; undefined for anything else. */
  seqOf(cursor: string): number | undefined;
}

/** `after` value that means the start of the log. */
export const START_CURSOR = '0';

/** The second half of every block: a caller's own cursors decrypt to it, anything else does not. */
const TAG = Buffer.from('dg:log:1', 'latin1');
/** 16 bytes in unpadded base64url. */
const SHAPE = /^[A-Za-z0-9_-]{22}$/;
/** Callers whose ciphers are kept (a few hundred bytes each). */
const MAX_CALLERS = 10_000;

class OneCallerCursors implements CallerCursors {
  // ECB on exactly one block per call: update() answers each block at once, so one
  // cipher object serves every call (never finished); JavaScript runs them one at a time.
  readonly #encrypt: Cipher;
  readonly #decrypt: Decipher;

  constructor(key: Buffer) {
    const secretKey = createSecretKey(key);
    this.#encrypt = createCipheriv('aes-128-ecb', secretKey, null).setAutoPadding(false);
    this.#decrypt = createDecipheriv('aes-128-ecb', secretKey, null).setAutoPadding(false);
  }

  cursorOf(seq: number): string {
    const block = Buffer.alloc(16);
    block.writeBigUInt64BE(BigInt(seq), 0);
    TAG.copy(block, 8);
    return this.#encrypt.update(block).toString('base64url');
  }

  seqOf(cursor: string): number | undefined {
    if (cursor === START_CURSOR) return 0;
    if (!SHAPE.test(cursor)) return undefined;
    const bytes = Buffer.from(cursor, 'base64url');
    // One spelling per cursor: the last character's unused bits must be zero.
    if (bytes.length !== 16 || bytes.toString('base64url') !== cursor) return undefined;
    const block = this.#decrypt.update(bytes);
    if (block.length !== 16 || !block.subarray(8).equals(TAG)) return undefined;
    const seq = block.readBigUInt64BE(0);
    return seq <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(seq) : undefined;
  }
}

/** The cursors of every caller of one store, under that store's secret. */
class StoreCursors {
  readonly #secret: Buffer;
  readonly #callers = new Map<string, CallerCursors>();

  constructor(secret: Buffer) {
    this.#secret = secret;
  }

  forCaller(merchant: string): CallerCursors {
    let cursors = this.#callers.get(merchant);
    if (!cursors) {
      const key = createHmac('sha256', this.#secret)
        .update(`delivery-graph:cursor:${merchant}`)
        .digest()
        .subarray(0, 16);
      cursors = new OneCallerCursors(key);
      // The oldest caller goes first (a Map iterates in insertion order).
      if (this.#callers.size >= MAX_CALLERS) this.#callers.delete(this.#callers.keys().next().value!);
      this.#callers.set(merchant, cursors);
    }
    return cursors;
  }
}

/**
 * Where the secret is kept: the event store (its `cursorSecret`), seen only as what cursors need of it, so the rules
 * import no store.
 */
export interface CursorSecretKeeper {
  cursorSecret(): Promise<Buffer>;
}

const byStore = new WeakMap<CursorSecretKeeper, Promise<StoreCursors>>();

/** The cursors of the merchant with this id, under the secret kept in `store` (read once, created on first use). */
export async function callerCursors(store: CursorSecretKeeper, merchant: string): Promise<CallerCursors> {
  let loading = byStore.get(store);
  if (!loading) {
    loading = store.cursorSecret().then((secret) => new StoreCursors(secret));
    byStore.set(store, loading);
    // Not kept when it failed (the store was away): the next caller asks again.
    loading.catch(() => byStore.delete(store));
  }
  return (await loading).forCaller(merchant);
}
