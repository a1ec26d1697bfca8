// Operations named by hash, in Apollo's form
// `extensions: {persistedQuery: {version: 1, sha256Hash}}`: either the optional
// allowlist of PERSISTED_OPERATIONS_FILE ({"<hash>": "<document>"}), or, without
// it, Apollo's automatic persisted queries (APQ): a client sends the hash alone,
// and when the facade does not know it (PersistedQueryNotFound) sends the query
// with its hash once, which the facade checks and remembers.
// `resolve` is the one place a request's query text is decided, for every
// transport: the pipeline (pipeline.ts) calls it, or yoga's onParams just before
// it (yoga.ts). A query sent with its hash is remembered only once it ran (its
// document passed validation) for a merchant key the upstream has accepted
// (never a client token, which whoever follows a tracking link holds): nothing
// that cannot run is stored, and a client without a working merchant key cannot
// fill the store, the shared Redis one included. The allowlist check
// itself (`allows`) is one step of the pipeline, before any text is parsed, so
// no path can execute an unlisted document.
import { createHash } from 'node:crypto';
import {
  PersistedQueryHashMismatchError,
  PersistedQueryInvalidError,
  PersistedQueryNotFoundError,
  PersistedQueryNotSupportedError,
  type DeliveryGraphError,
} from '../errors.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import {
  APQ_MAX_QUERY_BYTES,
  localPersistedQueryStore,
  sharedPersistedQueryStore,
  type PersistedQueryStore,
  type SharedStoreOptions,
} from './persisted-query-store.js';

/** What a request names: its query text and its extensions, as any transport reads them. */
export interface OperationParams {
  query?: unknown;
  extensions?: unknown;
}

/** APQ lookups and registrations of this process, for /metrics. */
export interface PersistedQueryCounters {
  /** Hash-only requests answered from the allowlist or the APQ store. */
  hits: number;
  /** Hash-only requests whose hash was unknown (PersistedQueryNotFound). */
  misses: number;
  /** Queries remembered after being sent with their hash. */
  registrations: number;
  /**
   * Queries sent with their hash that ran but were not remembered: the caller was not a merchant key the upstream
   * accepted (a client token included).
   */
  refused: number;
}

const SHA256_HEX = /^[0-9a-f]{64}$/i;

/** The SHA-256 of a query text, in the lowercase hex APQ clients send. */
export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/**
 * Whether a request carries extensions.persistedQuery at all (the common request does not, and skips resolve's await).
 */
export function namesPersistedQuery(params: OperationParams): boolean {
  const extensions = params.extensions;
  return (
    !!extensions &&
    typeof extensions === 'object' &&
    (extensions as { persistedQuery?: unknown }).persistedQuery != null
  );
}

/**
 * The HTTP status of a refused persisted query. A miss (and "not supported") is
 * 200 with the error, as Apollo Client's persisted-queries link and urql's
 * persistedExchange expect before they retry with the full query; a mismatched
 * hash or a malformed extension is the client's mistake (400).
 */
export function persistedQueryStatus(error: DeliveryGraphError): number {
  return error.code === 'PERSISTED_QUERY_NOT_FOUND' || error.code === 'PERSISTED_QUERY_NOT_SUPPORTED' ? 200 : 400;
}

export interface PersistedOperationsOptions {
  /** The automatic persisted queries' store; none: APQ is off (APQ_MAX_ENTRIES=0). Ignored with an allowlist. */
  store?: PersistedQueryStore;
}

export class PersistedOperations {
  readonly counters: PersistedQueryCounters = { hits: 0, misses: 0, registrations: 0, refused: 0 };
  private readonly byHash: Map<string, string> | undefined;
  private readonly documents: Set<string> | undefined;
  private readonly store: PersistedQueryStore | undefined;
  /** Resolved params whose query came with a verified hash, waiting for validation to pass before being remembered. */
  private readonly pending = new WeakMap<object, { hash: string; query: string }>();

  /** `operations`: the allowlist (PERSISTED_OPERATIONS_FILE); undefined lets any operation run. */
  constructor(operations: Readonly<Record<string, string>> | undefined, options: PersistedOperationsOptions = {}) {
    this.byHash = operations && new Map(Object.entries(operations));
    this.documents = this.byHash && new Set(this.byHash.values());
    // The allowlist wins: with one, nothing new is ever registered.
    this.store = operations ? undefined : options.store;
  }

  /** Whether only listed operations run. */
  get allowlisted(): boolean {
    return this.byHash !== undefined;
  }

  /**
   * The allowlisted document a request names by hash; undefined when it names none.
   * Throws PersistedQueryNotFoundError for a hash that is not on the list.
   * Synchronous and allowlist-only; the transports call resolve.
   */
  documentFor(params: { extensions?: unknown }): string | undefined {
    const extensions = params.extensions as { persistedQuery?: { sha256Hash?: unknown } } | null | undefined;
    const hash = extensions?.persistedQuery?.sha256Hash;
    if (hash === undefined) return undefined;
    const document = typeof hash === 'string' ? this.byHash?.get(hash) : undefined;
    if (document === undefined) throw new PersistedQueryNotFoundError(PersistedQueryNotFoundError.APQ_MESSAGE);
    return document;
  }

  /** Whether this exact document text may run (always, without an allowlist). */
  allows(document: string): boolean {
    return this.documents?.has(document) ?? true;
  }

  /**
   * The params a request runs with: the same object when it names no persisted
   * query, else a copy whose `query` is the text to run. Throws a
   * DeliveryGraphError (see persistedQueryStatus) when the hash cannot be used.
   */
  async resolve<P extends OperationParams>(params: P): Promise<P> {
    const extensions = params.extensions;
    if (!extensions || typeof extensions !== 'object') return params;
    const persisted = (extensions as { persistedQuery?: unknown }).persistedQuery;
    if (persisted === undefined || persisted === null) return params;
    if (typeof persisted !== 'object' || Array.isArray(persisted))
      throw new PersistedQueryInvalidError(
        'extensions.persistedQuery must be an object {"version": 1, "sha256Hash": "<hex>"}.',
      );
    const { version, sha256Hash } = persisted as { version?: unknown; sha256Hash?: unknown };
    if (version !== 1)
      throw new PersistedQueryInvalidError('Unsupported persisted query version: only version 1 is supported.');
    if (typeof sha256Hash !== 'string')
      throw new PersistedQueryInvalidError('extensions.persistedQuery.sha256Hash must be a string.');
    const query = typeof params.query === 'string' && params.query !== '' ? params.query : undefined;

    if (this.byHash) {
      // Listed operations run by hash whatever text came with it (the text cannot swap in another operation).
      const document = this.byHash.get(sha256Hash);
      if (document === undefined) {
        this.counters.misses += 1;
        throw new PersistedQueryNotFoundError(PersistedQueryNotFoundError.APQ_MESSAGE);
      }
      this.counters.hits += 1;
      return { ...params, query: document };
    }
    if (!this.store) {
      // APQ is off: the text runs as sent; a hash alone tells Apollo's link to stop sending hashes.
      if (query === undefined) throw new PersistedQueryNotSupportedError();
      return params;
    }
    if (!SHA256_HEX.test(sha256Hash))
      throw new PersistedQueryInvalidError(
        'extensions.persistedQuery.sha256Hash must be a SHA-256 in hexadecimal (64 characters).',
      );
    const hash = sha256Hash.toLowerCase();
    if (query !== undefined) {
      if (sha256Hex(query) !== hash) throw new PersistedQueryHashMismatchError();
      const resolved = { ...params, query };
      this.pending.set(resolved, { hash, query });
      return resolved;
    }
    const known = await this.store.get(hash);
    if (known === undefined) {
      this.counters.misses += 1;
      throw new PersistedQueryNotFoundError(PersistedQueryNotFoundError.APQ_MESSAGE);
    }
    this.counters.hits += 1;
    return { ...params, query: known };
  }

  /** Whether `params` (as resolve returned them) carry a query with its verified hash, not remembered yet. */
  awaitsRegistration(params: unknown): boolean {
    return typeof params === 'object' && params !== null && this.pending.has(params);
  }

  /**
   * Called once the operation of `params` (as resolve returned them) ran, so its
   * document is valid: a query sent with its verified hash is remembered when
   * `accepted` (the caller is a merchant key the upstream accepted); else it
   * is left unremembered and the client sends the text again next time. Too long
   * a text runs but is not kept (APQ_MAX_QUERY_BYTES).
   */
  ran(params: unknown, accepted: boolean): void {
    if (!params || typeof params !== 'object' || !this.store) return;
    const registration = this.pending.get(params);
    if (!registration) return;
    this.pending.delete(params);
    if (!accepted) {
      this.counters.refused += 1;
      return;
    }
    if (Buffer.byteLength(registration.query) > APQ_MAX_QUERY_BYTES) return;
    this.counters.registrations += 1;
    void this.store.set(registration.hash, registration.query);
  }
}

/**
 * Operations by hash as configured: the allowlist when there is one, else automatic persisted queries (an LRU, behind
 * it the store's Redis when there is one).
 */
export function configuredPersistedOperations(
  graphql: Config['graphql'],
  redis: Pick<SharedStoreOptions, 'client' | 'prefix'> | undefined,
  logger: Logger,
): PersistedOperations {
  const allowlist = graphql.persistedOperations?.operations;
  const apqStore =
    allowlist || graphql.apqMaxEntries === 0 ? undefined : localPersistedQueryStore(graphql.apqMaxEntries);
  return new PersistedOperations(allowlist, {
    store:
      apqStore && redis
        ? sharedPersistedQueryStore(apqStore, {
            client: redis.client,
            prefix: redis.prefix,
            maxEntries: graphql.apqMaxEntries,
            logger,
          })
        : apqStore,
  });
}
