// One plan per (document, operation name): the operation that runs, the facts
// every guard judges (its kind, its root fields, whether it needs a merchant
// key, what a client token may do with it, its cost as a function of its
// variables), and the executor for that operation alone. The executor is built
// from a document holding only the plan's operation (and its fragments), so
// whatever another request named, or whatever was compiled first, this plan can
// only ever run the operation its guards judged. Compiling is the caller's
// to earn and the process's to budget (documents.ts); the plan counts the
// fields its executor would resolve, to refuse a compile too large to block on,
// and weighs the executor it made by the source generated for it.
import {
  createSourceEventStream,
  execute,
  getOperationAST,
  Kind,
  subscribe,
  type DefinitionNode,
  type DocumentNode,
  type ExecutionResult,
  type FragmentDefinitionNode,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type SelectionSetNode,
} from 'graphql';
import { compileQuery, isCompiledQuery, type CompiledQuery } from 'graphql-jit';
import { clientTokenRefusal, type OperationKind } from '../access/client-token-scope.js';
import type { ForbiddenError } from '../errors.js';
import { costPlanOf, type CostPlan } from './guards/cost.js';
import { KEYLESS_ROOT_FIELDS } from './guards/keyless.js';
import { refusedBeforeRunning, requiredDefaultsOf, variableErrors, withRequiredDefaults } from './guards/variables.js';
import { compiledBytes, GENERATED_CHARS_PER_FIELD, PLAN_BYTES } from './weights.js';

/** What an operation answers: one result, or a stream of them (a subscription). */
export type Outcome = ExecutionResult | AsyncIterableIterator<ExecutionResult>;

/** A result with the serializer compiled for its shape, when it has one. */
export type WrittenResult = ExecutionResult & { stringify?: (result: ExecutionResult) => string };

/**
 * Every field selected at the root, through fragments and inline fragments (whatever @skip/@include say: judging more
 * is safe).
 */
function rootFieldsOf(
  selectionSet: SelectionSetNode,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  names = new Set<string>(),
  seen = new Set<string>(),
): Set<string> {
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD) names.add(selection.name.value);
    else if (selection.kind === Kind.INLINE_FRAGMENT) rootFieldsOf(selection.selectionSet, fragments, names, seen);
    else if (!seen.has(selection.name.value)) {
      seen.add(selection.name.value);
      const fragment = fragments.get(selection.name.value);
      if (fragment) rootFieldsOf(fragment.selectionSet, fragments, names, seen);
    }
  }
  return names;
}

/**
 * Every field a selection resolves once fragments are spread and aliases kept
 * apart: what graphql-jit generates code for (GENERATED_CHARS_PER_FIELD of
 * source each, and a compile time to match). A fragment is counted once and multiplied by its
 * spreads, so a spread in 28 aliases costs 28 times its fields, as it does graphql-jit.
 */
function expandedFieldsOf(
  selectionSet: SelectionSetNode,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  counted: Map<string, number>,
): number {
  let fields = 0;
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD)
      fields += 1 + (selection.selectionSet ? expandedFieldsOf(selection.selectionSet, fragments, counted) : 0);
    else if (selection.kind === Kind.INLINE_FRAGMENT)
      fields += expandedFieldsOf(selection.selectionSet, fragments, counted);
    else {
      const name = selection.name.value;
      let spread = counted.get(name);
      if (spread === undefined) {
        const fragment = fragments.get(name);
        spread = fragment ? expandedFieldsOf(fragment.selectionSet, fragments, counted) : 0;
        counted.set(name, spread);
      }
      fields += spread;
    }
  }
  return fields;
}

export interface PlanOptions {
  schema: GraphQLSchema;
  /** MAX_BATCH_SIZE: a list variable counts at most this many items. */
  maxBatch: number;
  /** Leave "Did you mean …?" out of variable errors (introspection off). */
  hideSuggestions: boolean;
}

export class OperationPlan {
  /** The name the requests of this plan give (undefined: none, the document's only operation). */
  readonly operationName: string | undefined;
  readonly kind: OperationKind;
  readonly rootFields: ReadonlySet<string>;
  /** Whether anything it selects at the root needs a credential. */
  readonly needsKey: boolean;
  /** Why a client token may not run it; undefined when it may. */
  readonly clientTokenRefusal: ForbiddenError | undefined;
  #cost: CostPlan | undefined;
  /** The document the executor runs: this operation and the fragments, nothing else. */
  readonly runnable: DocumentNode;
  /**
   * Runs so far by callers who may compile (documents.ts); from the second one on, it compiles if the budget allows.
   */
  runs = 0;
  readonly #options: PlanOptions;
  readonly #fragments: ReadonlyMap<string, FragmentDefinitionNode>;
  readonly #requiredDefaults: ReadonlyArray<readonly [string, unknown]>;
  #expandedFields: number | undefined;
  #compiled: CompiledQuery | undefined;
  /** The heap the compiled executor holds, measured when it was made. */
  #compiledBytes = 0;
  /** jit could not compile it: graphql-js runs it for good, and no compile is tried again. */
  #uncompilable = false;

  constructor(
    readonly document: DocumentNode,
    readonly operation: OperationDefinitionNode,
    operationName: string | undefined,
    options: PlanOptions,
  ) {
    this.operationName = operationName;
    this.kind = operation.operation;
    this.#options = options;
    const fragments = new Map<string, FragmentDefinitionNode>();
    const kept: DefinitionNode[] = [operation];
    for (const definition of document.definitions) {
      if (definition.kind !== Kind.FRAGMENT_DEFINITION) continue;
      fragments.set(definition.name.value, definition);
      kept.push(definition);
    }
    this.#fragments = fragments;
    this.runnable = { kind: Kind.DOCUMENT, definitions: kept };
    this.rootFields = rootFieldsOf(operation.selectionSet, fragments);
    this.needsKey = [...this.rootFields].some((name) => !KEYLESS_ROOT_FIELDS.has(name));
    this.clientTokenRefusal =
      this.kind === 'mutation' || this.needsKey ? clientTokenRefusal(this.kind, this.rootFields) : undefined;
    this.#requiredDefaults = requiredDefaultsOf(operation);
  }

  /**
   * Its cost before variables (the cost guard counts again with variables only
   * when `most` is over the limit). Counted on first use, which must come after
   * validation: the walk trusts that fragments do not spread into themselves.
   */
  get cost(): CostPlan {
    return (this.#cost ??= costPlanOf(this.#options.schema, this.document, this.operation, this.#options.maxBatch));
  }

  /**
   * The fields its operation resolves, fragments spread and aliases apart (see
   * expandedFieldsOf). Counted on first use, after validation, like the cost.
   */
  get expandedFields(): number {
    return (this.#expandedFields ??= expandedFieldsOf(this.operation.selectionSet, this.#fragments, new Map()));
  }

  /** Whether the compiled executor is built (the plan cache counts it in its bytes). */
  get compiled(): boolean {
    return this.#compiled !== undefined;
  }

  /** Whether a compile could still be asked of it: not compiled yet, not a subscription, not one jit refused. */
  get compilable(): boolean {
    // Subscriptions stay on graphql-js: set up once per subscriber, and jit cannot run an aliased subscription root
    // field.
    return !this.#compiled && !this.#uncompilable && this.kind !== 'subscription';
  }

  /** What the plan holds in the heap: its facts, and once compiled, its executor as measured when it was made. */
  get bytes(): number {
    return PLAN_BYTES + this.#compiledBytes;
  }

  /**
   * Runs the plan's operation. `compile`: the caller may compile and the budget
   * allowed it (documents.ts), so graphql-jit compiles it (once); otherwise
   * graphql-js runs it, which costs nothing to keep.
   */
  run(
    contextValue: unknown,
    variables: Readonly<Record<string, unknown>> | undefined,
    compile: boolean,
  ): Outcome | Promise<Outcome> {
    const given =
      this.#requiredDefaults.length > 0 ? withRequiredDefaults(this.#requiredDefaults, variables) : variables;
    if (compile && this.compilable) this.#compile();
    const compiled = this.#compiled;
    let outcome: Outcome | Promise<Outcome>;
    if (compiled) {
      outcome = compiled.query(undefined, contextValue, given) as Outcome | Promise<Outcome>;
    } else {
      const args = { schema: this.#options.schema, document: this.runnable, contextValue, variableValues: given };
      outcome = (this.kind === 'subscription' ? subscribe(args) : execute(args)) as Outcome | Promise<Outcome>;
    }
    return outcome instanceof Promise
      ? outcome.then((value) => this.#finish(value, given))
      : this.#finish(outcome, given);
  }

  /** The variables the executor is given: the request's, with the defaults of required variables filled in. */
  variablesOf(variables: Readonly<Record<string, unknown>> | undefined): Readonly<Record<string, unknown>> | undefined {
    return this.#requiredDefaults.length > 0 ? withRequiredDefaults(this.#requiredDefaults, variables) : variables;
  }

  /**
   * A subscription's source stream: its root field's subscribe resolver, run
   * with this subscriber's context (its access checks, its queue); or the
   * errors that refused it. `run` is this and an execution per event; the
   * shared fan-out (src/realtime/fanout.ts) takes the two apart, so that an
   * event is executed once for every subscriber its message is the same for.
   * `given`: from variablesOf.
   */
  async sourceStream(
    contextValue: unknown,
    given: Readonly<Record<string, unknown>> | undefined,
  ): Promise<AsyncIterable<unknown> | ExecutionResult> {
    const source = await createSourceEventStream({
      schema: this.#options.schema,
      document: this.runnable,
      contextValue,
      variableValues: given,
    });
    // Variables refused before anything ran: in graphql-js's words with their code (BAD_USER_INPUT), as run() answers
    // them.
    if (!(Symbol.asyncIterator in source) && refusedBeforeRunning(source))
      return variableErrors(this.#options.schema, this.operation, given, this.#options.hideSuggestions) ?? source;
    return source;
  }

  /**
   * One event of a subscription executed into its message, as graphql-js's subscribe does for each (the event is the
   * root value).
   */
  executeEvent(
    event: unknown,
    contextValue: unknown,
    given: Readonly<Record<string, unknown>> | undefined,
  ): ExecutionResult | Promise<ExecutionResult> {
    return execute({
      schema: this.#options.schema,
      document: this.runnable,
      rootValue: event,
      contextValue,
      variableValues: given,
    });
  }

  /**
   * jit's refusal of the variables reworded as graphql-js words it (BAD_USER_INPUT); the serializer for the result's
   * shape.
   */
  #finish(outcome: Outcome, variables: Readonly<Record<string, unknown>> | undefined): Outcome {
    if (Symbol.asyncIterator in outcome) return outcome;
    if (refusedBeforeRunning(outcome))
      return variableErrors(this.#options.schema, this.operation, variables, this.#options.hideSuggestions) ?? outcome;
    if (this.#compiled) (outcome as WrittenResult).stringify = this.#compiled.stringify;
    return outcome;
  }

  #compile(): void {
    // `debug` hands back the generated source, the one measure of what the executor holds; it is not kept.
    const compiled = compileQuery(this.#options.schema, this.runnable, this.operationName, {
      debug: true,
    } as Parameters<typeof compileQuery>[3]);
    // A document valid for graphql-js that jit cannot compile keeps running on graphql-js.
    if (!isCompiledQuery(compiled)) {
      this.#uncompilable = true;
      return;
    }
    const debug = compiled as CompiledQuery & { __DO_NOT_USE_THIS_OR_YOU_WILL_BE_FIRED_compilation?: string };
    const source = debug.__DO_NOT_USE_THIS_OR_YOU_WILL_BE_FIRED_compilation;
    delete debug.__DO_NOT_USE_THIS_OR_YOU_WILL_BE_FIRED_compilation;
    // Should a later graphql-jit not hand it back, its length is reckoned from the fields (never counted as nothing).
    this.#compiledBytes = compiledBytes(source?.length ?? this.expandedFields * GENERATED_CHARS_PER_FIELD);
    this.#compiled = compiled;
  }
}

/**
 * The plan of the operation a request names in a valid document; undefined when none resolves (refused: fail closed).
 */
export function planOf(
  document: DocumentNode,
  operationName: string | undefined,
  options: PlanOptions,
): OperationPlan | undefined {
  const operation = getOperationAST(document, operationName);
  return operation ? new OperationPlan(document, operation, operationName, options) : undefined;
}
