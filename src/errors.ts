// One registry of the error codes clients see. Each class has a stable `code`
// and a default message; the codes yoga gives the request errors it answers
// itself (GRAPHQL_PARSE_FAILED, BAD_REQUEST, …) have no class but are listed
// too. The error table in docs/errors.md is printed from ERROR_CODES (npm run
// docs). Messages never carry keys or raw upstream bodies.

/**
 * Where a code reaches the client: as a GraphQL error's extensions.code, as a
 * typed result's `code`, or only inside the upstream client (turned into another
 * shape before a client sees it).
 */
import type { UpstreamRefusal } from './upstream/refusal.js';

export type ErrorSurface = 'graphql-error' | 'result' | 'upstream-client';

export const ERROR_CODES = {
  UNAUTHENTICATED: {
    surface: 'graphql-error',
    meaning:
      'No merchant key was sent, or the upstream refused it (it answered 401; a refusal is remembered for KEY_REFUSAL_MEMORY_MS, 5 s; an open subscription ends this way when a re-confirmation of its key is refused); or a client token was tampered with, has expired, or was made under another CLIENT_TOKEN_SECRET.',
  },
  FORBIDDEN: {
    surface: 'graphql-error',
    meaning:
      'A client token was used for something only the merchant key may do: any mutation, a query other than delivery, deliveries, node, _entities and clientToken, or deliveryEvents without uids. Nothing ran. (Deliveries outside the token read as not found instead.)',
  },
  BAD_USER_INPUT: {
    surface: 'graphql-error',
    meaning:
      'A variable does not fit its declared type, and nothing ran: it is missing, of the wrong type, or holds a bad value inside an input object (the message names the variable and the path, e.g. Variable "$input" got invalid value "abc" at "input.tip"; then what the type expects). Or an argument is malformed or out of bounds, before any upstream call: a uid that is not one plain URL path segment of at most 64 characters (empty, . or .., or holding /, \\, whitespace or control characters; see docs/limits.md) or a partner reference that cannot be looked up, a deliveries list over MAX_BATCH_SIZE.',
  },
  GRAPHQL_PARSE_FAILED: {
    surface: 'graphql-error',
    meaning:
      'The query text is not GraphQL (a syntax error, or more tokens than allowed); locations give the line and column. Nothing ran.',
  },
  GRAPHQL_VALIDATION_FAILED: {
    surface: 'graphql-error',
    meaning:
      'The operation does not fit the schema (an unknown field, argument or type, a literal of the wrong type), breaks a limit checked before it runs (depth, aliases, directives, repeated fields, cost; see docs/limits.md), or asks for introspection or _service where they are off (GRAPHQL_INTROSPECTION, FEDERATION_SDL). Nothing ran.',
  },
  OPERATION_RESOLUTION_FAILURE: {
    surface: 'graphql-error',
    meaning:
      'operationName names no operation of the document, or the document has several operations and none is named (HTTP 400). Nothing ran.',
  },
  BAD_REQUEST: {
    surface: 'graphql-error',
    meaning:
      'The HTTP request is not a GraphQL request: a body that is not JSON or not an object (400), a list of operations (batching is off; 400), no query, a variables or extensions parameter that is not JSON, a mutation over GET (405), a subscription asked for as application/json alone (406; with */* or no accept it is answered as a stream of server-sent events), an accept this endpoint cannot answer in (406), a POST that is not application/json (415), or an extensions.persistedQuery that is malformed or of a version other than 1.',
  },
  DOCUMENT_TOO_LARGE: {
    surface: 'graphql-error',
    meaning:
      'The query text is longer than MAX_DOCUMENT_BYTES (comments and whitespace included; HTTP 413). Nothing was parsed; send a shorter document, or persist it.',
  },
  REQUEST_ENTITY_TOO_LARGE: {
    surface: 'graphql-error',
    meaning: 'The request body is larger than GRAPHQL_MAX_BODY_BYTES (HTTP 413); it was not read.',
  },
  UPSTREAM_TIMEOUT: { surface: 'graphql-error', meaning: 'The upstream did not answer within UPSTREAM_TIMEOUT_MS.' },
  UPSTREAM_UNAVAILABLE: {
    surface: 'graphql-error',
    meaning:
      "The upstream could not be reached, reset the connection, or answered 5xx or 429; or its endpoint group's circuit is open (failing fast).",
  },
  UPSTREAM_ERROR: {
    surface: 'graphql-error',
    meaning:
      'The upstream answered something the facade does not understand (non-JSON, an unexpected status such as a 403 to a read), or refused a read as invalid ("The delivery service refused the request: <its message>"); extensions.upstream holds its status, code and message.',
  },
  INTERNAL_SERVER_ERROR: {
    surface: 'graphql-error',
    meaning: 'A fault inside the facade; details are logged, never sent.',
  },
  RATE_LIMITED: {
    surface: 'graphql-error',
    meaning:
      "The merchant key sent more than RATE_LIMIT_PER_MINUTE operations (a subscription's upstream access checks count as operations too), a client token more than CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE (its own budget, never its merchant's), the client tokens of one address more than CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE, or the client address tried more than AUTH_FAILURES_PER_MINUTE keys the upstream had not accepted, or its requests without an accepted key cost more than KEYLESS_WORK_MS_PER_MINUTE of work (or were refused more than KEYLESS_REFUSALS_PER_MINUTE times for needing one; all such callers together: KEYLESS_TOTAL_WORK_MS_PER_MINUTE); extensions.retryAfterSeconds says when to try again.",
  },
  RESPONSE_TOO_LARGE: {
    surface: 'graphql-error',
    meaning:
      'The answer would exceed GRAPHQL_MAX_RESPONSE_BYTES; ask for fewer deliveries, fields or events (page with first/after).',
  },
  PERSISTED_QUERY_NOT_FOUND: {
    surface: 'graphql-error',
    meaning:
      'The operation was sent by hash alone (extensions.persistedQuery) and the hash is unknown: the message is PersistedQueryNotFound, and an APQ client sends the query with its hash again (HTTP 200). Or PERSISTED_OPERATIONS_FILE is set and the operation (by hash or by text) is not on it.',
  },
  PERSISTED_QUERY_NOT_SUPPORTED: {
    surface: 'graphql-error',
    meaning:
      'An operation was sent by hash alone while automatic persisted queries are off (APQ_MAX_ENTRIES=0): the message is PersistedQueryNotSupported; send the query text (HTTP 200).',
  },
  PERSISTED_QUERY_HASH_MISMATCH: {
    surface: 'graphql-error',
    meaning:
      'extensions.persistedQuery.sha256Hash is not the SHA-256 (hex) of the query sent with it; nothing ran and nothing was remembered (HTTP 400).',
  },
  TOO_MANY_SUBSCRIPTIONS: {
    surface: 'graphql-error',
    meaning:
      'A cap on what runs at once is full, and nothing ran: the WebSocket already runs WS_MAX_SUBSCRIPTIONS operations, or on this instance the merchant key (its client tokens included) holds SUBSCRIPTIONS_PER_KEY open subscriptions, the client token SUBSCRIPTIONS_PER_CLIENT_TOKEN, or the client address SUBSCRIPTIONS_PER_ADDRESS of client tokens and keys the upstream has not accepted. extensions.setting names the cap and extensions.limit its value; complete a subscription (or close its socket or stream) before starting another.',
  },
  SUBSCRIBER_TOO_SLOW: {
    surface: 'graphql-error',
    meaning:
      "A subscription over server-sent events left more than SUBSCRIBER_MAX_PENDING KiB unsent in its socket's buffer and was ended (over WebSocket, more than SUBSCRIBER_MAX_PENDING events waiting closes the socket with 4008); resume with deliveryEvents(after:).",
  },
  VALIDATION_FAILED: {
    surface: 'result',
    resultType: 'ValidationError',
    meaning: 'The input breaks a rule of the chosen group; one FieldError per problem, with its input path.',
  },
  NOT_FOUND: {
    surface: 'result',
    resultType: 'NotFoundError',
    meaning:
      'No delivery with this uid belongs to the caller in the group asked (cancel); when the caller has it in the other group, the message says which group to pass. Reads return null instead.',
  },
  NOT_CANCELABLE: {
    surface: 'result',
    resultType: 'NotCancelableError',
    meaning: 'The delivery is past pickup or already finished.',
  },
  CANCEL_REFUSED: {
    surface: 'result',
    resultType: 'CancelRefusedError',
    meaning:
      'The upstream refused to cancel this delivery with a 4xx of its own (already_canceled, a 403, a 422, …): its answer about the delivery, not a fault. upstream holds its status, its code (upstream.error) and its message; nothing was canceled by this call. Still typed as before: UNAUTHENTICATED for its 401; NOT_FOUND for its 404; NOT_CANCELABLE for its 409 or not_cancelable; UPSTREAM_ERROR for its 408 and UPSTREAM_UNAVAILABLE for its 429.',
  },
  IDEMPOTENCY_CONFLICT: {
    surface: 'result',
    resultType: 'IdempotencyConflictError',
    meaning: 'The idempotency key was used before with different input.',
  },
  KEY_LINK_REFUSED: {
    surface: 'result',
    resultType: 'KeyLinkRefusedError',
    meaning:
      "linkMerchantKey was given a previousKey the upstream does not accept now (unknown, revoked, or not valid for this platform), or the caller's own key, or both keys already have deliveries or idempotency keys of their own (a link moves nothing; an operator merges two merchants: npm run merchant -- merge): nothing was linked. A previous key already revoked is linked by an operator (npm run merchant -- link; docs/operations.md).",
  },
  BOOKING_OUTCOME_UNKNOWN: {
    surface: 'result',
    resultType: 'BookingOutcomeUnknownError',
    meaning:
      "An earlier booking with this idempotency key lost its answer (a timeout, a dropped connection, a 5xx other than 503) and the upstream may have booked it; nothing new was booked. Retry the same key later: it returns that booking once the upstream's event for it arrives. A new key books again.",
  },
  VALIDATION: {
    surface: 'upstream-client',
    meaning: 'The upstream rejected a request body; clients see it as a ValidationError (VALIDATION_FAILED).',
  },
} as const satisfies Record<string, { surface: ErrorSurface; meaning: string; resultType?: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Root of every error the facade raises on purpose. */
export class DeliveryGraphError extends Error {
  override name = 'DeliveryGraphError';
  readonly code: ErrorCode;
  /**
   * When this is the upstream's refusal: its status, code and message, scrubbed (extensions.upstream, Error.upstream).
   */
  upstream: UpstreamRefusal | undefined;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

export class UnauthenticatedError extends DeliveryGraphError {
  override name = 'UnauthenticatedError';
  constructor(message = 'A merchant key is required: send "Authorization: Bearer <key>".') {
    super('UNAUTHENTICATED', message);
  }
}

export class BadUserInputError extends DeliveryGraphError {
  override name = 'BadUserInputError';
  constructor(message: string) {
    super('BAD_USER_INPUT', message);
  }
}

export class UpstreamTimeoutError extends DeliveryGraphError {
  override name = 'UpstreamTimeoutError';
  constructor(message = 'The delivery service did not answer in time.', options?: { cause?: unknown }) {
    super('UPSTREAM_TIMEOUT', message, options);
  }
}

export class UpstreamUnavailableError extends DeliveryGraphError {
  override name = 'UpstreamUnavailableError';
  /** Seconds the upstream asked us to wait (Retry-After), when it said. */
  readonly retryAfterSeconds: number | undefined;
  /** The status of the upstream's answer (5xx, 429), when it answered. */
  readonly status: number | undefined;
  /** The request certainly never reached the upstream: the circuit was open, or no connection could be made. */
  readonly unsent: boolean;
  constructor(
    message = 'The delivery service is unavailable.',
    options?: { cause?: unknown; retryAfterSeconds?: number; status?: number; unsent?: boolean },
  ) {
    super('UPSTREAM_UNAVAILABLE', message, options);
    this.retryAfterSeconds = options?.retryAfterSeconds;
    this.status = options?.status;
    this.unsent = options?.unsent ?? false;
  }
}

export class UpstreamProtocolError extends DeliveryGraphError {
  override name = 'UpstreamProtocolError';
  constructor(message = 'The delivery service answered something unexpected.', options?: { cause?: unknown }) {
    super('UPSTREAM_ERROR', message, options);
  }
}

/**
 * The upstream answered 2xx with a body that lacks what the document promises (a create without a uid, a read without
 * data).
 */
export class UpstreamShapeError extends UpstreamProtocolError {
  override name = 'UpstreamShapeError';
  constructor(detail: string) {
    super(`The delivery service's answer is not of the documented shape: ${detail}.`);
  }
}

/** A client token asked for more than reading its own deliveries. */
export class ForbiddenError extends DeliveryGraphError {
  override name = 'ForbiddenError';
  constructor(message: string) {
    super('FORBIDDEN', message);
  }
}

export class NotFoundError extends DeliveryGraphError {
  override name = 'NotFoundError';
  constructor(message = 'No delivery with this uid belongs to the caller.') {
    super('NOT_FOUND', message);
  }
}

export class NotCancelableError extends DeliveryGraphError {
  override name = 'NotCancelableError';
  constructor(message = 'The delivery can no longer be canceled.') {
    super('NOT_CANCELABLE', message);
  }
}

/**
 * The upstream refused a cancel with a 4xx of its own (already_canceled, forbidden, unprocessable, …): its answer
 * about this delivery, typed, with its words in `upstream`.
 */
export class CancelRefusedError extends DeliveryGraphError {
  override name = 'CancelRefusedError';
  constructor(refusal: UpstreamRefusal) {
    const said = refusal.message ?? refusal.error;
    super(
      'CANCEL_REFUSED',
      said
        ? `The delivery service refused to cancel the delivery: ${said}`
        : `The delivery service refused to cancel the delivery (HTTP ${refusal.status}).`,
    );
    this.upstream = refusal;
  }
}

export interface FieldProblem {
  /** Input path, e.g. "input.pickup.phone"; for upstream errors the upstream field name mapped back where known. */
  path: string;
  message: string;
}

export class ValidationError extends DeliveryGraphError {
  override name = 'ValidationError';
  readonly fields: FieldProblem[];
  constructor(fields: FieldProblem[], message?: string) {
    super('VALIDATION_FAILED', message ?? summarize(fields));
    this.fields = fields;
  }
}

function summarize(fields: FieldProblem[]): string {
  if (fields.length === 0) return 'The input is invalid.';
  const first = fields[0]!;
  const more = fields.length > 1 ? ` (and ${fields.length - 1} more)` : '';
  return `${first.path}: ${first.message}${more}`;
}

/** linkMerchantKey's proof of the previous key failed: nothing was linked. */
export class KeyLinkRefusedError extends DeliveryGraphError {
  override name = 'KeyLinkRefusedError';
  constructor(message: string) {
    super('KEY_LINK_REFUSED', message);
  }
}

export class IdempotencyConflictError extends DeliveryGraphError {
  override name = 'IdempotencyConflictError';
  constructor(message = 'This idempotency key was already used with different input.') {
    super('IDEMPOTENCY_CONFLICT', message);
  }
}

/**
 * A retry of a booking whose first answer was lost: the upstream may have booked
 * it, so nothing is sent again until its event says what happened.
 */
export class BookingOutcomeUnknownError extends DeliveryGraphError {
  override name = 'BookingOutcomeUnknownError';
  /** When the first booking's answer was lost, ISO 8601 UTC. */
  readonly since: string;
  constructor(since: Date) {
    super(
      'BOOKING_OUTCOME_UNKNOWN',
      "An earlier request with this idempotency key was sent to the delivery service, but its answer was lost, so it may have booked; nothing new was booked. Retry with the same key in a little while: once the service's event for that booking arrives, the retry returns it. Until then, look for it with deliveryEvents. Use a new key only to book again on purpose.",
    );
    this.since = since.toISOString();
  }
}

export class RateLimitedError extends DeliveryGraphError {
  override name = 'RateLimitedError';
  /** Whole seconds until the key's bucket holds a token again. */
  readonly retryAfterSeconds: number;
  constructor(retryAfterSeconds: number, message = 'Too many requests for this merchant key; slow down.') {
    super('RATE_LIMITED', message);
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export class DocumentTooLargeError extends DeliveryGraphError {
  override name = 'DocumentTooLargeError';
  constructor(limit: number) {
    super(
      'DOCUMENT_TOO_LARGE',
      `The query text is longer than ${limit} bytes (MAX_DOCUMENT_BYTES, comments and whitespace included); nothing was parsed. Send a shorter document.`,
    );
  }
}

export class ResponseTooLargeError extends DeliveryGraphError {
  override name = 'ResponseTooLargeError';
  constructor(limit: number) {
    super(
      'RESPONSE_TOO_LARGE',
      `The answer would be larger than ${limit} bytes; ask for fewer deliveries, fields or events (page with first/after).`,
    );
  }
}

export class PersistedQueryNotFoundError extends DeliveryGraphError {
  override name = 'PersistedQueryNotFoundError';
  /** The message APQ clients (Apollo's persisted-queries link, urql's persistedExchange) retry on. */
  static readonly APQ_MESSAGE = 'PersistedQueryNotFound';
  constructor(message = 'Only allowlisted operations run here; this one is not on the list.') {
    super('PERSISTED_QUERY_NOT_FOUND', message);
  }
}

/** A hash alone while APQ is off; Apollo's link then stops sending hashes. */
export class PersistedQueryNotSupportedError extends DeliveryGraphError {
  override name = 'PersistedQueryNotSupportedError';
  constructor() {
    super('PERSISTED_QUERY_NOT_SUPPORTED', 'PersistedQueryNotSupported');
  }
}

export class PersistedQueryHashMismatchError extends DeliveryGraphError {
  override name = 'PersistedQueryHashMismatchError';
  constructor() {
    super(
      'PERSISTED_QUERY_HASH_MISMATCH',
      'The persisted query hash does not match the query: sha256Hash must be the SHA-256 of the query text, in hex. Nothing ran and nothing was stored.',
    );
  }
}

/** extensions.persistedQuery that is not {version: 1, sha256Hash: "<hex>"}. */
export class PersistedQueryInvalidError extends DeliveryGraphError {
  override name = 'PersistedQueryInvalidError';
  constructor(message: string) {
    super('BAD_REQUEST', message);
  }
}

/**
 * A reader too far behind. Over WebSocket the socket is closed (4008) first; over SSE this error ends the stream with
 * its code.
 */
export class SlowConsumerError extends DeliveryGraphError {
  override name = 'SlowConsumerError';
  constructor(message: string) {
    super('SUBSCRIBER_TOO_SLOW', message);
  }
}

/** The caps on what runs at once, by the setting that sets each (docs/limits.md#subscriptions). */
export type SubscriptionCapSetting =
  'WS_MAX_SUBSCRIPTIONS' | 'SUBSCRIPTIONS_PER_KEY' | 'SUBSCRIPTIONS_PER_CLIENT_TOKEN' | 'SUBSCRIPTIONS_PER_ADDRESS';

const SUBSCRIPTION_CAP_MESSAGES: Record<SubscriptionCapSetting, (limit: number) => string> = {
  WS_MAX_SUBSCRIPTIONS: (limit) =>
    `At most ${limit} operations may run at once on one WebSocket. Complete one, or open another socket (WS_MAX_SUBSCRIPTIONS).`,
  SUBSCRIPTIONS_PER_KEY: (limit) =>
    `This merchant key already holds ${limit} open subscriptions on this server, those of its client tokens included (SUBSCRIPTIONS_PER_KEY); complete one before starting another.`,
  SUBSCRIPTIONS_PER_CLIENT_TOKEN: (limit) =>
    `This client token already holds ${limit} open subscriptions (SUBSCRIPTIONS_PER_CLIENT_TOKEN); complete one before starting another (deliveryEvents(uids:) follows several deliveries in one).`,
  SUBSCRIPTIONS_PER_ADDRESS: (limit) =>
    `This client address already holds ${limit} open subscriptions of client tokens and unconfirmed keys (SUBSCRIPTIONS_PER_ADDRESS); complete one before starting another.`,
};

export class TooManySubscriptionsError extends DeliveryGraphError {
  override name = 'TooManySubscriptionsError';
  constructor(
    /** The full cap, named by its setting (sent as extensions.setting). */
    readonly setting: SubscriptionCapSetting,
    /** Its value (sent as extensions.limit). */
    readonly limit: number,
  ) {
    super('TOO_MANY_SUBSCRIPTIONS', SUBSCRIPTION_CAP_MESSAGES[setting](limit));
  }
}

/**
 * The upstream rejected a request body. `errors` is the upstream's own
 * `{field: [messages]}` object (platform) or empty (partner, which only sends a message).
 */
export class UpstreamValidationError extends DeliveryGraphError {
  override name = 'UpstreamValidationError';
  readonly errors: Record<string, unknown>;
  constructor(message: string, errors: Record<string, unknown>) {
    super('VALIDATION', message);
    this.errors = errors;
  }
}
