// The request pipeline: every GraphQL operation, whichever way it came (the
// direct JSON path, yoga's handler for GET, SSE and the rest, graphql-ws),
// passes here, in this order, and nowhere else:
//
//   query text (by hash: APQ or the allowlist) → its length → the caller's
//   budgets → the document (shared caches only for a caller who earned them) →
//   the plan of the named operation (none: refused) → what a caller without a
//   key may run → validation → the guards, each judging the plan → the plan's
//   own executor → error masking, the response size, observation.
//
// The guards and the executor read one OperationPlan, so what is judged is what
// runs. Each decision about the caller is taken once, here, from one fact
// (access/caller.ts), and handed on.
import type { IncomingMessage } from 'node:http';
import { type ExecutionResult, type GraphQLError } from 'graphql';
import { createGraphQLError } from 'graphql-yoga';
import { trustOf, type Caller, type Trust } from '../access/caller.js';
import type { OperationKind } from '../access/client-token-scope.js';
import { KEYLESS_LIMITED, keylessWorkUnits, type RequestLimits } from '../access/rate-limit.js';
import { holdingSlot, type SubscriptionSlots } from '../access/subscription-slots.js';
import {
  DeliveryGraphError,
  DocumentTooLargeError,
  PersistedQueryNotFoundError,
  RateLimitedError,
  TooManySubscriptionsError,
  UnauthenticatedError,
} from '../errors.js';
import { createContext, REFUSED_CLIENT_TOKEN, type GraphQLContext, type Services } from '../graphql/context.js';
import { OperationNames, type OperationLabel } from '../observability/operation-names.js';
import { noteErrorCodes, requestInfoOf } from '../observability/request.js';
import { untilExpiry } from './guards/client-token.js';
import { untilKeyRefused } from './guards/key-refusal.js';
import { costWithVariables } from './guards/cost.js';
import { KeylessWork, keylessCostRefusal, keylessFragmentsRefusal, readKeyless } from './guards/keyless.js';
import { boundResult, responseTooLarge, textOver } from './guards/response-size.js';
import type { DocumentEntry, Documents } from './documents.js';
import { OPERATION_LIMITS, toGraphQLError } from './limits.js';
import { namesPersistedQuery, persistedQueryStatus, type PersistedOperations } from './persisted-operations.js';
import type { OperationPlan, Outcome, WrittenResult } from './plan.js';
import type { MessageFinish } from '../realtime/fanout.js';

/** A GraphQL request as any transport reads it. */
export interface GraphQLParams {
  query?: unknown;
  variables?: unknown;
  operationName?: unknown;
  extensions?: unknown;
}

export interface OperationRequest {
  params: GraphQLParams;
  /** Who is asking, read once by the transport (access/caller.ts). */
  caller: Caller;
  /** GET and POST over HTTP, or an operation on a WebSocket. */
  method: 'GET' | 'POST' | 'SOCKET';
  /** Whether the answer may be a stream (SSE, graphql-ws); a plain JSON answer may not. */
  streams: boolean;
  /** The Node request (any transport): the client address, the request record. */
  req?: IncomingMessage;
  /** Headers for observers (a trace parent), when there is no Node request. */
  headers?: Record<string, unknown>;
  /** Aborted when the client goes away (or a function that makes it on first use). */
  signal?: AbortSignal | (() => AbortSignal | undefined);
  /** Over WebSocket: closes the connection (a subscriber too far behind). */
  disconnect?: (code: number, reason: string) => void;
  /** The transport checks the written text against GRAPHQL_MAX_RESPONSE_BYTES itself (the direct path). */
  checksText?: boolean;
}

/**
 * What the pipeline answers: a request error (nothing ran: HTTP 4xx, or a
 * graphql-ws `error` message), or the operation's outcome, a refusal by a
 * guard included (an execution result without data).
 */
export type Answer =
  | { kind: 'invalid'; errors: readonly GraphQLError[] }
  | { kind: 'ran'; outcome: Outcome; plan: OperationPlan | undefined };

/** Watches operations as they run (metrics, tracing). */
export interface OperationObserver {
  /** An operation is about to run; what it returns wraps the run and hears its outcome. */
  start(label: OperationLabel, request: OperationRequest, context: GraphQLContext): ObservedRun | undefined;
}

export interface ObservedRun {
  around?<T>(run: () => T): T;
  done(outcome: Outcome): void;
}

export interface PipelineOptions {
  services: Services;
  limits: RequestLimits;
  persisted: PersistedOperations;
  documents: Documents;
  observers: readonly OperationObserver[];
  /** Turns each error of a result into what the client may see (graphql/yoga's masking). */
  maskError: (error: GraphQLError) => GraphQLError;
}

const invalid = (...errors: GraphQLError[]): Answer => ({ kind: 'invalid', errors });
const refused = (error: GraphQLError, plan?: OperationPlan): Answer => ({
  kind: 'ran',
  outcome: { errors: [error] },
  plan,
});

function refusal(error: DeliveryGraphError): GraphQLError {
  return toGraphQLError(error, error instanceof RateLimitedError ? { retryAfterSeconds: error.retryAfterSeconds } : {});
}

/** Why a caller without a working key may not run this: in the words its credential calls for. */
function keylessRefusal(caller: Caller): GraphQLError {
  if (caller.kind === 'refused-token' || caller.kind === 'client-token')
    return toGraphQLError(new UnauthenticatedError(REFUSED_CLIENT_TOKEN));
  if (caller.kind === 'merchant')
    return toGraphQLError(new UnauthenticatedError('The delivery service refused the merchant key.'));
  return toGraphQLError(new UnauthenticatedError());
}

const NO_QUERY = () =>
  createGraphQLError('Must provide query string.', { extensions: { code: 'BAD_REQUEST', http: { status: 400 } } });
const UNRESOLVED = () =>
  createGraphQLError('Could not determine what operation to execute.', {
    extensions: { code: 'OPERATION_RESOLUTION_FAILURE', http: { status: 400 } },
  });
const MUTATION_OVER_GET = () =>
  createGraphQLError('Can only perform a mutation operation from a POST request.', {
    extensions: { code: 'BAD_REQUEST', http: { status: 405, headers: { Allow: 'POST' } } },
  });
export const SUBSCRIPTION_WITHOUT_STREAM = () =>
  createGraphQLError(
    'A subscription answers with a stream: send it with `accept: text/event-stream` (server-sent events), or over a graphql-ws WebSocket at the same path.',
    {
      extensions: { code: 'BAD_REQUEST', http: { status: 406 } },
    },
  );

/**
 * Whether an error is the refusal of a subscription asked for without a stream (a transport that can stream may serve
 * it instead).
 */
export function isStreamRefusal(error: GraphQLError): boolean {
  return (error.extensions?.http as { status?: number } | undefined)?.status === 406;
}

export class Pipeline {
  readonly documents: Documents;
  /**
   * Subscriptions open at once, per key, client token and address (the WebSocket server counts its own refusals here
   * too).
   */
  readonly subscriptions: SubscriptionSlots;
  readonly #options: PipelineOptions;
  readonly #names = new OperationNames();
  readonly #maxDocumentBytes: number;
  readonly #maxResponseBytes: number;
  /**
   * How a subscription's shared messages go out: as #streamOut makes each result, once per message
   * (src/realtime/fanout.ts).
   */
  readonly #messages: MessageFinish;

  constructor(options: PipelineOptions) {
    this.#options = options;
    this.documents = options.documents;
    this.subscriptions = options.services.subscriptions;
    this.#maxDocumentBytes = options.services.config.graphql.maxDocumentBytes;
    this.#maxResponseBytes = options.services.config.graphql.maxResponseBytes;
    this.#messages = {
      finish: (result) => this.#resultOut(result, true),
      fail: (error) => ({
        errors: [
          this.#options.maskError(error instanceof Error ? (error as GraphQLError) : createGraphQLError(String(error))),
        ],
      }),
      overLimit: (text) =>
        textOver(text, this.#maxResponseBytes) ? responseTooLarge(this.#maxResponseBytes) : undefined,
      contextFor: (caller, like) => createContext(options.services, { caller, limits: like.limits }),
    };
  }

  async run(request: OperationRequest): Promise<Answer> {
    const answer = await this.#answer(request);
    // An HTTP request's error codes go into its access-log line (a WebSocket's operations share one upgrade line: not
    // there).
    if (request.method !== 'SOCKET')
      noteErrorCodes(
        requestInfoOf(request.req),
        answer.kind === 'invalid'
          ? answer.errors
          : Symbol.asyncIterator in answer.outcome
            ? undefined
            : answer.outcome.errors,
      );
    return answer;
  }

  async #answer(request: OperationRequest): Promise<Answer> {
    const { limits, services } = this.#options;
    // What the caller has earned, decided once for this operation.
    const { caller } = request;
    const trust: Trust = trustOf(caller, limits.keys);
    const context = createContext(services, {
      caller,
      req: request.req,
      limits,
      disconnect: request.disconnect,
      signal: request.signal,
    });
    // Budgets before anything costly (a persisted query's lookup included): a caller over them gets nothing looked up
    // or parsed.
    if (trust !== 'earned') {
      const wait = limits.keylessWait(context.clientAddress, trust);
      if (wait > 0) return refused(refusal(new RateLimitedError(wait, KEYLESS_LIMITED)));
    }
    const admission = await limits.admit(caller, context.clientAddress);
    if (admission.refusal) return refused(refusal(admission.refusal));
    // Without an accepted key, what the operation costs this process is timed and charged to its address, whatever it
    // runs.
    const work = trust === 'earned' ? undefined : new KeylessWork();
    try {
      return await this.#admitted(request, trust, context, work);
    } finally {
      admission.done?.();
      if (work) {
        work.lap();
        limits.chargeKeylessWork(context.clientAddress, keylessWorkUnits(work.ms, work.bytes), trust);
      }
    }
  }

  async #admitted(
    request: OperationRequest,
    trust: Trust,
    context: GraphQLContext,
    work: KeylessWork | undefined,
  ): Promise<Answer> {
    const { persisted } = this.#options;
    let params = request.params;
    // The text to run: by hash (APQ or the allowlist), or as sent.
    if (namesPersistedQuery(params)) {
      try {
        work?.lap();
        params = await persisted.resolve(params);
        work?.skip();
      } catch (error) {
        if (!(error instanceof DeliveryGraphError)) throw error;
        const status = persistedQueryStatus(error);
        return invalid(toGraphQLError(error, status === 200 ? {} : { http: { status } }));
      }
    }
    const text = params.query;
    if (typeof text !== 'string' || text === '') return invalid(NO_QUERY());
    if (textOver(text, this.#maxDocumentBytes))
      return invalid(toGraphQLError(new DocumentTooLargeError(this.#maxDocumentBytes), { http: { status: 413 } }));
    if (!persisted.allows(text)) return invalid(toGraphQLError(new PersistedQueryNotFoundError()));
    const operationName =
      typeof params.operationName === 'string' && params.operationName !== '' ? params.operationName : undefined;
    // Without a working key, what needs one is refused from the tokens alone, before any syntax tree is built.
    if (trust === 'keyless') {
      const reading = readKeyless(text, operationName, OPERATION_LIMITS.tokens);
      const early = reading && this.#arrivalRefusal(request, context, trust, reading.kind, reading.needsKey);
      if (early) return early;
    }
    const entry = this.documents.entry(text, trust === 'earned');
    if (entry.parseError) return invalid(entry.parseError);
    const plan = entry.plan(operationName);
    // No operation resolves: nothing runs, whatever any guard would have said.
    if (!plan) return invalid(UNRESOLVED());
    const refusedOnArrival = this.#arrivalRefusal(request, context, trust, plan.kind, plan.needsKey, plan);
    if (refusedOnArrival) return refusedOnArrival;
    // What needs no key, asked without an accepted one, is kept small: few fragments before validation compares them, a
    // bounded cost after.
    const small = trust !== 'earned' && !plan.needsKey;
    const tooManyFragments = small ? keylessFragmentsRefusal(plan.document) : undefined;
    if (tooManyFragments) return invalid(tooManyFragments);
    const errors = entry.validation();
    if (errors.length > 0) return invalid(...errors);
    const tooCostly =
      entry.costRefusal(plan) ?? (small ? keylessCostRefusal(plan.cost.least, plan.operation) : undefined);
    if (tooCostly) return invalid(tooCostly);

    // A caller without an accepted key names nothing in the metrics: its names could take every label.
    const label = this.#names.label(plan.document, plan.operationName, trust === 'earned');
    const info = requestInfoOf(request.req);
    if (info) {
      info.operationType = label.type;
      info.operationName = label.raw;
    }
    const observed = this.#options.observers
      .map((observer) => observer.start(label, request, context))
      .filter((run) => run !== undefined);
    const outcome = await this.#judgedRun(plan, entry, trust, request, params, context, observed, work);
    // A key's first operation, which got the key accepted, names its label after all (a made-up key's never does).
    if (trust === 'trying' && trustOf(request.caller, this.#options.limits.keys) === 'earned')
      label.name = this.#names.label(plan.document, plan.operationName).name;
    for (const run of observed) run.done(outcome);
    return { kind: 'ran', outcome, plan };
  }

  /**
   * What is refused before validation, from an operation's kind and whether it
   * needs a key (read from its tokens or from its plan, the same rule either way):
   * how it came must fit what it is, whoever asks; without a working key, only
   * what needs none runs, and each refusal is charged to the caller's address.
   */
  #arrivalRefusal(
    request: OperationRequest,
    context: GraphQLContext,
    trust: Trust,
    kind: OperationKind,
    needsKey: boolean,
    plan?: OperationPlan,
  ): Answer | undefined {
    if (request.method === 'GET' && kind === 'mutation') return invalid(MUTATION_OVER_GET());
    if (!request.streams && kind === 'subscription') return invalid(SUBSCRIPTION_WITHOUT_STREAM());
    if (trust !== 'keyless' || !needsKey) return undefined;
    this.#options.limits.chargeKeylessRefusal(context.clientAddress);
    return refused(keylessRefusal(request.caller), plan);
  }

  /** The guards that need the request's own facts, then the plan's executor, then what goes out. */
  async #judgedRun(
    plan: OperationPlan,
    entry: DocumentEntry,
    trust: Trust,
    request: OperationRequest,
    params: GraphQLParams,
    context: GraphQLContext,
    observed: readonly ObservedRun[],
    work: KeylessWork | undefined,
  ): Promise<Outcome> {
    const { caller } = request;
    if (caller.kind === 'client-token' && plan.clientTokenRefusal)
      return { errors: [toGraphQLError(plan.clientTokenRefusal)] };
    const variables = (params.variables ?? undefined) as Readonly<Record<string, unknown>> | undefined;
    const { config } = this.#options.services;
    const overCost = costWithVariables(
      plan.cost,
      OPERATION_LIMITS.cost,
      this.documents.schema,
      plan.document,
      plan.operation,
      variables,
      config.graphql.maxBatchSize,
    );
    if (overCost) return { errors: [overCost] };
    // A subscription holds a slot of each cap on its caller from before it starts until it ends
    // (access/subscription-slots.ts).
    const slot =
      plan.kind === 'subscription' ? this.subscriptions.take(caller, context.clientAddress, trust) : undefined;
    if (slot instanceof TooManySubscriptionsError)
      return { errors: [toGraphQLError(slot, { setting: slot.setting, limit: slot.limit })] };

    // Compiled only for an accepted merchant key, from the plan's second run, within the budget (documents.ts).
    const compile = this.documents.mayCompile(plan, caller, trust);
    const wasCompiled = plan.compiled;
    // A subscription's events are executed once per event for every subscriber with the same message
    // (src/realtime/fanout.ts).
    const fanout = plan.kind === 'subscription' ? this.#options.services.fanout : undefined;
    let run: () => Outcome | Promise<Outcome> = fanout
      ? () => fanout.subscribe(plan, context, variables, this.#messages)
      : () => plan.run(context, variables, compile);
    for (const watcher of observed) {
      const inner = run;
      if (watcher.around) run = () => watcher.around!(inner);
    }
    let outcome: Outcome;
    try {
      const running = run();
      // What ran before the first wait on the upstream or a store (for what needs no key: all of it) is work; the wait
      // is not.
      work?.lap();
      outcome = await running;
    } catch (error) {
      outcome = {
        errors: [
          this.#options.maskError(error instanceof Error ? (error as GraphQLError) : createGraphQLError(String(error))),
        ],
      };
    }
    if (!(Symbol.asyncIterator in outcome)) slot?.release();
    work?.skip();
    if (!wasCompiled && plan.compiled) this.documents.reweigh(entry);
    // A query sent with its hash is remembered once it ran, for a merchant key the upstream has accepted by now (never
    // a client token's).
    if (this.#options.persisted.awaitsRegistration(params)) {
      this.#options.persisted.ran(
        params,
        caller.kind === 'merchant' && trustOf(caller, this.#options.limits.keys) === 'earned',
      );
    }
    if (Symbol.asyncIterator in outcome) {
      // The fan-out's messages went out as #streamOut makes them, once for all their subscribers.
      const stream = fanout ? outcome : this.#streamOut(outcome);
      const bounded = caller.kind === 'client-token' ? untilExpiry(stream, caller.token.expiresAt) : stream;
      // Its key re-confirmed while it is open, whatever events come (access/key-watch.ts).
      const { keyWatch } = this.#options.services;
      const watched =
        keyWatch && context.key !== undefined
          ? untilKeyRefused(bounded, keyWatch, context.key, caller.kind === 'client-token')
          : bounded;
      return slot ? holdingSlot(watched, slot) : watched;
    }
    const { fromView, fromUpstream } = context.deliveryReads;
    // Where the deliveries came from, when any was read and reads from the view are on (READ_MAX_AGE above 0; at 0
    // every answer is the upstream's, as it always was: src/graphql/delivery-reads.ts).
    if (fromView + fromUpstream > 0 && config.graphql.readMaxAgeSeconds > 0)
      outcome.extensions = { ...outcome.extensions, deliveryReads: { fromView, fromUpstream } };
    return this.#resultOut(outcome, !request.checksText, work);
  }

  /** Errors masked, then the size bound (whose count is the answer's bytes for a caller charged by them). */
  #resultOut(result: WrittenResult, checkText: boolean, work?: KeylessWork): ExecutionResult {
    if (result.errors?.length) result.errors = result.errors.map(this.#options.maskError);
    return boundResult(result, this.#maxResponseBytes, checkText, work && ((bytes) => work.answered(bytes)));
  }

  /**
   * Every result of a stream as #resultOut makes a single one (SSE writes with
   * stringify; graphql-ws counts); a stream that fails ends with one last result
   * carrying its masked error, as a failed operation would answer.
   */
  #streamOut(stream: AsyncIterableIterator<ExecutionResult>): AsyncIterableIterator<ExecutionResult> {
    let failed = false;
    const out = (step: IteratorResult<ExecutionResult>): IteratorResult<ExecutionResult> =>
      step.done ? step : { done: false, value: this.#resultOut(step.value, true) };
    const fail = (error: unknown): IteratorResult<ExecutionResult> => {
      failed = true;
      const masked = this.#options.maskError(
        error instanceof Error ? (error as GraphQLError) : createGraphQLError(String(error)),
      );
      return { done: false, value: { errors: [masked] } };
    };
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      next: () => (failed ? Promise.resolve({ done: true, value: undefined }) : stream.next().then(out, fail)),
      return: (value?: unknown) =>
        stream.return
          ? stream.return(value as ExecutionResult).then(out)
          : Promise.resolve({ done: true, value: undefined }),
      throw: (error?: unknown) => (stream.throw ? stream.throw(error).then(out) : Promise.reject(error)),
    } as AsyncIterableIterator<ExecutionResult>;
  }
}
