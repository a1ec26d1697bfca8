// A Bloom filter of the uids that have an owner record in the embedded store,
// so that the first read of a delivery nobody recorded (the common first read)
// is answered "no record" from memory instead of by a query on the file. It can
// say "maybe" for a uid without a record (about 1 % of them, then the file is
// asked), never "no" for one with a record: every record this process writes
// passes through `add`, and the file has no other writer (data-dir-lock.ts).
// Records the retention deletes stay in it until it is rebuilt.

/** Bits per expected uid and probes per uid: about 1 % false "maybe" at capacity. */
const BITS_PER_ENTRY = 10;
const PROBES = 7;

export class UidFilter {
  readonly capacity: number;
  readonly #bits: Uint8Array;
  readonly #size: number;
  added = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.#size = Math.max(64, capacity * BITS_PER_ENTRY);
    this.#bits = new Uint8Array(Math.ceil(this.#size / 8));
  }

  get bytes(): number {
    return this.#bits.byteLength;
  }

  /** Bytes a filter for `capacity` uids takes. */
  static bytesFor(capacity: number): number {
    return Math.ceil(Math.max(64, capacity * BITS_PER_ENTRY) / 8);
  }

  add(uid: string): void {
    const [a, b] = hashes(uid);
    for (let probe = 0; probe < PROBES; probe += 1) {
      const bit = (a + probe * b) % this.#size;
      this.#bits[bit >>> 3]! |= 1 << (bit & 7);
    }
    this.added += 1;
  }

  /** false: certainly never added; true: maybe. */
  mayHave(uid: string): boolean {
    const [a, b] = hashes(uid);
    for (let probe = 0; probe < PROBES; probe += 1) {
      const bit = (a + probe * b) % this.#size;
      if ((this.#bits[bit >>> 3]! & (1 << (bit & 7))) === 0) return false;
    }
    return true;
  }
}

/** Two independent 32-bit FNV-1a hashes (different offsets), the second odd, for double hashing. */
function hashes(text: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let index = 0; index < text.length; index += 1) {
    const code = text.charCodeAt(index);
    a = Math.imul(a ^ code, 0x01000193);
    b = Math.imul(b ^ code, 0x5bd1e995);
    b ^= b >>> 15;
  }
  return [a >>> 0, (b | 1) >>> 0];
}
