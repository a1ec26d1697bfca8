// Operation names as metric labels: names only (never the text), and at most
// MAX_NAMES distinct ones per process; the rest are counted as "other". Only a
// caller who earned it (a key the upstream accepted, a client token) names a
// label: anyone else's operations all count as "other", so names made up
// without a key (`query Junk1 { __typename }`, …) cannot take the labels the
// merchants' operations need.
import { getOperationAST, type DocumentNode } from 'graphql';

const MAX_NAMES = 200;
const MAX_NAME_LENGTH = 64;

export interface OperationLabel {
  type: string;
  /** The name as a label value: capped, "anonymous" or "other". */
  name: string;
  /** The name as sent (for logs and spans), cut to MAX_NAME_LENGTH; undefined when anonymous. */
  raw: string | undefined;
}

export class OperationNames {
  readonly #known = new Set<string>();

  /** `earned`: the caller's trust (access/caller.ts) is earned; otherwise the name is counted as "other". */
  label(document: DocumentNode, operationName: string | null | undefined, earned = true): OperationLabel {
    const operation = getOperationAST(document, operationName ?? undefined);
    if (!operation) return { type: 'unknown', name: 'unknown', raw: undefined };
    const name = operation.name?.value;
    const label = !earned ? 'other' : name === undefined ? 'anonymous' : this.#cap(name);
    return { type: operation.operation, name: label, raw: name?.slice(0, MAX_NAME_LENGTH) };
  }

  #cap(name: string): string {
    if (this.#known.has(name)) return name;
    if (name.length > MAX_NAME_LENGTH || this.#known.size >= MAX_NAMES) return 'other';
    // The parser's name is a slice of the whole query text, and V8 keeps the text alive as long as the slice: keep a
    // copy of its own.
    const own = Buffer.from(name, 'utf8').toString('utf8');
    this.#known.add(own);
    return own;
  }
}
