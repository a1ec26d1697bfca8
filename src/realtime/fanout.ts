// The shared fan-out: an event is executed and serialized once for every
// subscriber its message is the same for, not once per subscriber. graphql-js
// runs a subscription as its source stream plus, for each event that stream
// yields, an execution of the selection; the transport then stringifies the
// result, so an update watched by a hundred people was executed and written out
// a hundred times. Here the two halves are taken apart (OperationPlan.sourceStream
// and executeEvent): each subscriber keeps its own source stream (its subscribe
// resolver, access checks, queue, back-pressure and what it has already seen:
// src/realtime/streams.ts decides what reaches whom), and the message an event
// makes is executed once per group and kept with the event for every member the
// same event reaches. Per subscriber there remain its stream's decision and a
// write (frames.ts splices its id into the shared text).
//
// A group is (plan, variables, visibility): the same operation (the plan object
// the document cache holds), the same variables (canonical JSON), and callers
// the message is the same for. A message depends on its caller through the key
// alone (cursors are the key's own, src/domain/cursor.ts; a partner order's style
// is read with it), so a merchant key's subscribers share; a client token's
// subscribers share with those of other tokens of the same key and scope (a
// group of their own, so a token's message is always made in a token's context).
// Nothing is shared across keys.
//
// A group's messages are executed in a context of its own, made for its key
// (and scope), not in any member's: a member that leaves, or whose token
// expires, changes nothing for the others (each member's stream still ends at
// its own token's expiry: pipeline/guards/client-token.ts).
//
// Messages are kept by the event object a member's stream yields: the bus hands
// every listener of an instance the same object (bus.ts; redis-bus.ts, so each
// instance executes once per event for its own subscribers), and the message
// lives as long as the event does. A stream that makes an object of its own
// (deliveryUpdated's first message, the state as known at its start; a courier
// change shown with the status held) gets a message of its own.
import type { ExecutionResult, GraphQLError } from 'graphql';
import type { Caller, ClientTokenCredential } from '../access/caller.js';
import { canonicalJson } from '../domain/canonical-json.js';
import { hashKey } from '../domain/merchant-key.js';
import type { GraphQLContext } from '../graphql/context.js';
import type { OperationPlan, Outcome, WrittenResult } from '../pipeline/plan.js';

/** What the pipeline (pipeline.ts) does with every result, whichever way it goes out, and the contexts it makes. */
export interface MessageFinish {
  /** A result as it may go out (masked, bounded; its `stringify` checks the text it writes). */
  finish(result: ExecutionResult): ExecutionResult;
  /** A failure as the last result of a stream: its masked error. */
  fail(error: unknown): ExecutionResult;
  /**
   * The refusal that takes the place of a result whose text is over GRAPHQL_MAX_RESPONSE_BYTES; undefined when it is
   * within.
   */
  overLimit(text: string): ExecutionResult | undefined;
  /** A context for this caller, as an operation of its own would have (a group's messages are executed in one). */
  contextFor(caller: Caller, like: GraphQLContext): GraphQLContext;
}

/** Read by /metrics and the tests. */
export interface FanoutCounters {
  /** Messages executed (once per event and group). */
  executions: number;
  /** Messages handed to a subscriber from an execution made for another member of its group. */
  shared: number;
}

/** What an event makes for a group: the result every member gets, and whether their streams end with it. */
interface Message {
  /** The step every member's stream yields (one object for all: nothing downstream changes it). */
  step: IteratorResult<ExecutionResult>;
  /**
   * The execution itself failed (not a field: those are errors in the result): the streams end, as graphql-js ends
   * them.
   */
  ends: boolean;
}

/** The JSON text of each shared result, as graphql-ws writes a `next` payload: made once, written by every member. */
const texts = new WeakMap<ExecutionResult, string>();

/** The shared JSON text of a result, when it is one of a group's messages. */
export function sharedText(result: ExecutionResult): string | undefined {
  return texts.get(result);
}

/** A `next` payload as graphql-ws writes it: the result, errors by their toJSON. */
function payloadText(result: ExecutionResult): string {
  const { errors, ...rest } = result;
  if (!errors) return JSON.stringify(rest);
  return JSON.stringify({
    ...rest,
    errors: errors.map((error) =>
      typeof (error as GraphQLError).toJSON === 'function' ? (error as GraphQLError).toJSON() : error,
    ),
  });
}

/** Tokens of a group: its own, not any member's, so no member's expiry ends the others' messages. */
const GROUP_TOKEN_EXPIRY = new Date(8.64e15);

/** Who a message is made for, or undefined when it is nobody's to share (no key). */
function visibilityOf(context: GraphQLContext): { id: string; scope?: readonly string[] } | undefined {
  if (!context.key) return undefined;
  const owner = hashKey(context.key);
  if (!context.clientToken) return { id: `key\n${owner}` };
  const scope = [...(context.scope ?? [])].sort();
  return { id: `token\n${owner}\n${scope.join('\n')}`, scope };
}

/** The caller a group's messages are executed for: its key (and for client tokens, its scope), made once per group. */
function groupCaller(key: string, scope: readonly string[] | undefined): Caller {
  if (!scope) return { kind: 'merchant', key };
  const token: ClientTokenCredential = { key, uids: scope, expiresAt: GROUP_TOKEN_EXPIRY, token: '' };
  return { kind: 'client-token', key, token };
}

class FanoutGroup {
  members = 0;
  /** Each event's message, while it is made and then as made. */
  readonly #messages = new WeakMap<object, Message | Promise<Message>>();

  constructor(
    private readonly plan: OperationPlan,
    private readonly context: GraphQLContext,
    private readonly given: Readonly<Record<string, unknown>> | undefined,
    private readonly out: MessageFinish,
    private readonly counters: FanoutCounters,
    /** Called when the last member leaves. */
    readonly onEmpty: () => void,
  ) {}

  /** The event's message for this group: made by the first member it reaches, the same object for every other. */
  message(event: unknown): Message | Promise<Message> {
    if (typeof event !== 'object' || event === null) return this.#make(event);
    const kept = this.#messages.get(event);
    if (kept) {
      this.counters.shared += 1;
      return kept;
    }
    const made = this.#make(event);
    this.#messages.set(event, made);
    if (made instanceof Promise)
      made.then((message) => this.#messages.get(event) === made && this.#messages.set(event, message));
    return made;
  }

  #make(event: unknown): Message | Promise<Message> {
    this.counters.executions += 1;
    let executed: ExecutionResult | Promise<ExecutionResult>;
    try {
      executed = this.plan.executeEvent(event, this.context, this.given);
    } catch (error) {
      return this.#failed(error);
    }
    return executed instanceof Promise
      ? executed.then(
          (result) => this.#written(result),
          (error: unknown) => this.#failed(error),
        )
      : this.#written(executed);
  }

  #failed(error: unknown): Message {
    return { step: { done: false, value: this.#text(this.out.fail(error)) }, ends: true };
  }

  #written(result: ExecutionResult): Message {
    return { step: { done: false, value: this.#text(this.out.finish(result)) }, ends: false };
  }

  /** The result with its text made once; over GRAPHQL_MAX_RESPONSE_BYTES, the refusal in its place. */
  #text(result: ExecutionResult): ExecutionResult {
    let text = payloadText(result);
    const refusal = this.out.overLimit(text);
    if (refusal) {
      result = refusal;
      text = payloadText(result);
    }
    texts.set(result, text);
    // Server-sent events write a result with its `stringify`: a result without errors is written as this very text
    // (with errors, yoga first leaves out what only the server reads, and the result's own checking stringify writes
    // that).
    if (!result.errors?.length) (result as WrittenResult).stringify = () => text;
    return result;
  }
}

const DONE: IteratorResult<ExecutionResult> = { done: true, value: undefined };

/**
 * One subscriber's stream of messages: its own source stream's events, each
 * turned into its group's message. Ends when the source ends, or with one last
 * result carrying the masked error when the source fails (as the pipeline ends
 * any stream that fails); leaves the group when it ends however it ends.
 */
class MemberStream implements AsyncIterableIterator<ExecutionResult> {
  #ended = false;
  #left = false;

  constructor(
    private readonly source: AsyncIterator<unknown>,
    private readonly group: FanoutGroup,
    private readonly out: MessageFinish,
  ) {}

  [Symbol.asyncIterator](): AsyncIterableIterator<ExecutionResult> {
    return this;
  }

  next(): Promise<IteratorResult<ExecutionResult>> {
    if (this.#ended) return Promise.resolve(DONE);
    return this.source.next().then(this.#onEvent, this.#onFailure);
  }

  // Made once per member, not per event: an event reaches every member, and each one's handlers would be garbage.
  readonly #onEvent = (
    step: IteratorResult<unknown>,
  ): IteratorResult<ExecutionResult> | Promise<IteratorResult<ExecutionResult>> => {
    if (step.done) return this.#end(DONE);
    const message = this.group.message(step.value);
    return message instanceof Promise ? message.then(this.#deliver) : this.#deliver(message);
  };

  readonly #onFailure = (error: unknown): IteratorResult<ExecutionResult> =>
    this.#end({ done: false, value: this.out.fail(error) });

  readonly #deliver = (message: Message): IteratorResult<ExecutionResult> => {
    if (message.ends) {
      this.#end(DONE);
      void this.source.return?.()?.catch(() => undefined);
    }
    return message.step;
  };

  #end(step: IteratorResult<ExecutionResult>): IteratorResult<ExecutionResult> {
    this.#ended = true;
    if (!this.#left) {
      this.#left = true;
      this.group.members -= 1;
      if (this.group.members === 0) this.group.onEmpty();
    }
    return step;
  }

  async return(value?: unknown): Promise<IteratorResult<ExecutionResult>> {
    this.#end(DONE);
    await this.source.return?.(value);
    return DONE;
  }

  async throw(error?: unknown): Promise<IteratorResult<ExecutionResult>> {
    this.#end(DONE);
    if (!this.source.throw) throw error;
    await this.source.throw(error);
    return DONE;
  }
}

export class SubscriptionFanout {
  readonly counters: FanoutCounters = { executions: 0, shared: 0 };
  /** Groups with members, by plan and then by visibility and variables. */
  readonly #groups = new WeakMap<OperationPlan, Map<string, FanoutGroup>>();
  #open = 0;

  /** Groups with at least one member. */
  get groups(): number {
    return this.#open;
  }

  /**
   * Starts one subscriber's subscription: its source stream with its own
   * context, then its group's messages. What refused it before any event (its
   * subscribe resolver's errors) is its own result, as graphql-js answers it.
   */
  async subscribe(
    plan: OperationPlan,
    context: GraphQLContext,
    variables: Readonly<Record<string, unknown>> | undefined,
    out: MessageFinish,
  ): Promise<Outcome> {
    const given = plan.variablesOf(variables);
    const source = await plan.sourceStream(context, given);
    if (!(Symbol.asyncIterator in source)) return source;
    const group = this.#join(plan, context, given, out);
    return new MemberStream(source[Symbol.asyncIterator](), group, out);
  }

  #join(
    plan: OperationPlan,
    context: GraphQLContext,
    given: Readonly<Record<string, unknown>> | undefined,
    out: MessageFinish,
  ): FanoutGroup {
    const visibility = visibilityOf(context);
    const make = (onEmpty: () => void) => {
      this.#open += 1;
      const groupContext = visibility ? out.contextFor(groupCaller(context.key!, visibility.scope), context) : context;
      return new FanoutGroup(plan, groupContext, given, out, this.counters, () => {
        this.#open -= 1;
        onEmpty();
      });
    };
    // Nobody's to share: a group of one.
    if (!visibility) {
      const alone = make(() => undefined);
      alone.members = 1;
      return alone;
    }
    let byId = this.#groups.get(plan);
    if (!byId) this.#groups.set(plan, (byId = new Map()));
    const id = `${visibility.id}\n${canonicalJson(given ?? null)}`;
    let group = byId.get(id);
    if (!group) {
      const groups = byId;
      const made: FanoutGroup = make(() => {
        if (groups.get(id) === made) groups.delete(id);
        if (groups.size === 0 && this.#groups.get(plan) === groups) this.#groups.delete(plan);
      });
      group = made;
      byId.set(id, group);
    }
    group.members += 1;
    return group;
  }
}
