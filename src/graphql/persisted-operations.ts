// The optional allowlist of PERSISTED_OPERATIONS_FILE ({"<hash>": "<document>"}).
// A client names an operation by hash in Apollo's form,
// `extensions: {persistedQuery: {version: 1, sha256Hash}}`, or sends its exact text.
// Resolving a hash happens where the request's parameters are read (yoga's
// onParams, graphql-ws's onSubscribe); the check itself is an envelop onParse
// hook, which every transport runs, so no path can execute an unlisted document.
import { PersistedQueryNotFoundError } from '../errors.js';

export class PersistedOperations {
  private readonly byHash: Map<string, string>;
  private readonly documents: Set<string>;

  constructor(operations: Readonly<Record<string, string>>) {
    this.byHash = new Map(Object.entries(operations));
    this.documents = new Set(this.byHash.values());
  }

  /**
   * The document a request names by hash; undefined when it names none.
   * Throws PersistedQueryNotFoundError for a hash that is not on the list.
   */
  documentFor(params: { extensions?: unknown }): string | undefined {
    const extensions = params.extensions as { persistedQuery?: { sha256Hash?: unknown } } | null | undefined;
    const hash = extensions?.persistedQuery?.sha256Hash;
    if (hash === undefined) return undefined;
    const document = typeof hash === 'string' ? this.byHash.get(hash) : undefined;
    if (document === undefined) throw new PersistedQueryNotFoundError();
    return document;
  }

  /** Whether this exact document text is on the list. */
  allows(document: string): boolean {
    return this.documents.has(document);
  }
}
