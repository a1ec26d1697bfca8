// GraphQL: what an operation may be and cost (batch size, body, document and response bounds, the compile budget),
// introspection and the federation SDL, persisted operations, and the operation rate limits.
import { readFileSync } from 'node:fs';
import { ConfigError, integer, oneOf, text, type Env } from './parse.js';

export interface GraphQLConfig {
  /** Longest `deliveries(uids:)` list accepted. */
  readonly maxBatchSize: number;
  /** Upstream reads one request runs at once. */
  readonly batchConcurrency: number;
  /** Introspection and GraphiQL: off in production unless GRAPHQL_INTROSPECTION=true. */
  readonly introspection: boolean;
  /**
   * Federation's `_service { sdl }`: on outside production; in production as introspection is, unless FEDERATION_SDL
   * says.
   */
  readonly federationSdl: boolean;
  /** Larger GraphQL request bodies are refused with 413. */
  readonly maxBodyBytes: number;
  /** When set, only these operations run (id, usually the sha256 of the text → document text). */
  readonly persistedOperations:
    { readonly file: string; readonly operations: Readonly<Record<string, string>> } | undefined;
  /**
   * Automatic persisted queries remembered by this process (an LRU; shared through Redis too when REDIS_URL is set);
   * 0: APQ off.
   */
  readonly apqMaxEntries: number;
  /** Operations one merchant key may run per minute (a token bucket of that size); 0: no limit. */
  readonly rateLimitPerMinute: number;
  /** Operations one client token may run per minute, on its own bucket (never its merchant's); 0: no limit. */
  readonly clientTokenRateLimitPerMinute: number;
  /** Operations all client tokens together may run per minute from one client address; 0: no limit. */
  readonly clientTokenAddressRateLimitPerMinute: number;
  /** Longest query text parsed, comments included (DOCUMENT_TOO_LARGE above). */
  readonly maxDocumentBytes: number;
  /** Most heap the shared cache of parsed, validated and compiled documents holds (0: nothing kept). */
  readonly cacheBytes: number;
  /**
   * Most fields (fragments spread, aliases apart) a plan may resolve to be compiled by graphql-jit; larger ones run
   * on graphql-js.
   */
  readonly compileMaxFields: number;
  /** graphql-jit compiles per process and minute, a third of them at most for one merchant key (0: none). */
  readonly compilesPerMinute: number;
  /** Larger GraphQL responses are replaced by an error. */
  readonly maxResponseBytes: number;
}

export interface GraphQLSettings {
  readonly graphql: GraphQLConfig;
}

/** What GraphQL serves and what an operation may cost; production closes introspection unless told. */
export function graphqlSettings(env: Env, production: boolean): GraphQLSettings {
  const introspection =
    oneOf(env, 'GRAPHQL_INTROSPECTION', ['true', 'false'] as const, production ? 'false' : 'true') === 'true';
  const graphql: GraphQLConfig = {
    maxBatchSize: integer(env, 'MAX_BATCH_SIZE', 100, 1, 10_000),
    batchConcurrency: integer(env, 'BATCH_CONCURRENCY', 64, 1, 1_000),
    introspection,
    // The SDL tells what introspection does: in production it is closed with it unless a gateway needs it
    // (docs/federation.md).
    federationSdl:
      oneOf(env, 'FEDERATION_SDL', ['true', 'false'] as const, !production || introspection ? 'true' : 'false') ===
      'true',
    maxBodyBytes: integer(env, 'GRAPHQL_MAX_BODY_BYTES', 1_048_576, 1024, 1_073_741_824),
    persistedOperations: persistedOperations(env, 'PERSISTED_OPERATIONS_FILE'),
    apqMaxEntries: integer(env, 'APQ_MAX_ENTRIES', 10_000, 0, 10_000_000),
    rateLimitPerMinute: integer(env, 'RATE_LIMIT_PER_MINUTE', 6000, 0, 10_000_000),
    clientTokenRateLimitPerMinute: integer(env, 'CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE', 600, 0, 10_000_000),
    clientTokenAddressRateLimitPerMinute: integer(
      env,
      'CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE',
      3000,
      0,
      10_000_000,
    ),
    maxDocumentBytes: integer(env, 'MAX_DOCUMENT_BYTES', 16_384, 256, 1_048_576),
    cacheBytes: integer(env, 'GRAPHQL_CACHE_BYTES', 67_108_864, 0, 17_179_869_184),
    compileMaxFields: integer(env, 'GRAPHQL_COMPILE_MAX_FIELDS', 100, 0, 1_000_000),
    compilesPerMinute: integer(env, 'GRAPHQL_COMPILES_PER_MINUTE', 60, 0, 1_000_000),
    maxResponseBytes: integer(env, 'GRAPHQL_MAX_RESPONSE_BYTES', 10_485_760, 1024, 1_073_741_824),
  };
  return { graphql };
}

function persistedOperations(env: Env, name: string): { file: string; operations: Record<string, string> } | undefined {
  const file = text(env, name);
  if (file === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    const reason = error instanceof SyntaxError ? 'not JSON' : ((error as NodeJS.ErrnoException).code ?? 'error');
    throw new ConfigError(name, `cannot read ${file} (${reason})`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed))
    throw new ConfigError(name, `${file} must hold a JSON object of {"<hash>": "<document>"}`);
  const entries = Object.entries(parsed);
  if (entries.length === 0) throw new ConfigError(name, `${file} lists no operation`);
  for (const [id, document] of entries) {
    if (typeof document !== 'string' || document.trim() === '')
      throw new ConfigError(name, `${file}: the entry "${id}" is not a document string`);
  }
  return { file, operations: Object.fromEntries(entries) as Record<string, string> };
}
