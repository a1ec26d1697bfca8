// Query texts as parsed, validated documents with their operation plans. A
// caller who has earned it (access/caller.ts) shares one cache, bounded in
// bytes (GRAPHQL_CACHE_BYTES): each entry counts its text, its syntax tree and
// the plans and compiled executors hanging off it, so a megabyte entry weighs a
// megabyte and evicts accordingly. Anyone else gets an entry made for the
// request alone, which is garbage as soon as it is answered.
import { Kind, parse, validate, specifiedRules, GraphQLError, type DocumentNode, type GraphQLSchema, type ValidationRule } from 'graphql';
import { maxAliasesRule } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthRule } from '@escape.tech/graphql-armor-max-depth';
import { maxDirectivesRule } from '@escape.tech/graphql-armor-max-directives';
import { LRUCache } from 'lru-cache';
import { costBeforeVariables } from './guards/cost.js';
import { noFederationSdlRule } from './guards/federation-sdl.js';
import { fieldRepeatRefusal } from './guards/field-repeats.js';
import { noIntrospectionRule, withoutSuggestions } from './guards/introspection.js';
import { OPERATION_LIMITS } from './limits.js';
import { OperationPlan, planOf, type PlanOptions } from './plan.js';

/** Bytes of heap a parsed document takes per character of its text (measured: about 54 with locations). */
const SYNTAX_TREE_BYTES_PER_CHAR = 64;
/** Bytes a plan adds: its facts, and once compiled, the generated executor and serializer (measured per character of text). */
const PLAN_BYTES = 2_048;
const COMPILED_BYTES_PER_CHAR = 96;

/** The yoga marks of a request error: its code and HTTP 400 (a spec error: 200 under application/json). */
function asRequestError(error: GraphQLError, code: string): GraphQLError {
  // graphql 16 always gives an error its own extensions object.
  const extensions = error.extensions as Record<string, unknown>;
  extensions.code ??= code;
  extensions.http ??= { spec: true, status: 400 };
  return error;
}

/** A text parsed with the token limit; graphql-js's token-limit message in the words clients have seen from us (graphql-armor's). */
function parsed(text: string): DocumentNode | GraphQLError {
  try {
    return parse(text, { maxTokens: OPERATION_LIMITS.tokens });
  } catch (error) {
    if (!(error instanceof GraphQLError)) throw error;
    if (/contains more tha[nt] \d+ tokens/.test(error.message)) return asRequestError(new GraphQLError(`Syntax Error: Token limit of ${OPERATION_LIMITS.tokens} exceeded.`), 'GRAPHQL_PARSE_FAILED');
    return asRequestError(error, 'GRAPHQL_PARSE_FAILED');
  }
}

export interface DocumentOptions extends PlanOptions {
  /** GRAPHQL_INTROSPECTION. */
  introspection: boolean;
  /** FEDERATION_SDL: serve `_service { sdl }` (a validation error when off). */
  federationSdl: boolean;
  /** GRAPHQL_CACHE_BYTES: the most the shared cache holds; 0 keeps nothing. */
  cacheBytes: number;
}

/** One query text: its document (or why it does not parse), whether it is valid, and its plans by operation name. */
export class DocumentEntry {
  readonly document: DocumentNode | undefined;
  readonly parseError: GraphQLError | undefined;
  #validation: readonly GraphQLError[] | undefined;
  /** Plans by operation name: at most one per operation of the document (names that resolve to none are not kept). */
  readonly #plans = new Map<string, OperationPlan>();
  /** Operations in the document: the most plans it can hold, counted in its weight from the start. */
  readonly #operations: number;
  readonly #options: DocumentOptions;
  readonly #rules: readonly ValidationRule[];

  constructor(
    readonly text: string,
    options: DocumentOptions,
    rules: readonly ValidationRule[],
  ) {
    this.#options = options;
    this.#rules = rules;
    const result = parsed(text);
    if (result instanceof GraphQLError) this.parseError = result;
    else this.document = result;
    this.#operations = this.document ? this.document.definitions.filter((definition) => definition.kind === Kind.OPERATION_DEFINITION).length : 0;
  }

  /** The document's validation errors (none: valid), found once. */
  validation(): readonly GraphQLError[] {
    if (this.#validation) return this.#validation;
    const document = this.document!;
    const schema = this.#options.schema;
    // Before the standard rules: graphql-js compares every pair of same-named fields.
    const repeated = fieldRepeatRefusal(document, OPERATION_LIMITS.fieldRepeats);
    let errors: readonly GraphQLError[] = repeated ? [repeated] : validate(schema, document, this.#rules);
    if (!this.#options.introspection) errors = withoutSuggestions(errors);
    this.#validation = errors.map((error) => asRequestError(error, 'GRAPHQL_VALIDATION_FAILED'));
    return this.#validation;
  }

  /** The plan of the named operation of this valid document; null when no operation resolves. */
  plan(operationName: string | undefined): OperationPlan | null {
    const name = operationName ?? '';
    let plan = this.#plans.get(name);
    if (!plan) {
      plan = planOf(this.document!, operationName, this.#options);
      // A name that resolves to nothing is refused each time (cheap), never kept: names are the client's to invent.
      if (!plan) return null;
      this.#plans.set(name, plan);
    }
    return plan;
  }

  /** Why the plan's operation costs too much whatever its variables (a validation error); undefined when it may run. */
  costRefusal(plan: OperationPlan): GraphQLError | undefined {
    const error = costBeforeVariables(plan.cost, OPERATION_LIMITS.cost, plan.operation);
    return error && asRequestError(error, 'GRAPHQL_VALIDATION_FAILED');
  }

  /** What this entry holds in the heap, by the measured ratios above. */
  get bytes(): number {
    // Every plan it can hold (one per operation, and one for the unnamed request of a lone operation), made or not.
    let bytes = this.text.length * (2 + SYNTAX_TREE_BYTES_PER_CHAR) + (this.#operations + 1) * PLAN_BYTES;
    for (const plan of this.#plans.values()) if (plan.compiled) bytes += this.text.length * COMPILED_BYTES_PER_CHAR;
    return bytes;
  }
}

/** The validation rules of every document: graphql-js's, graphql-armor's limits, and introspection and `_service` when off. */
function rulesOf(options: DocumentOptions): ValidationRule[] {
  const report = (context: { reportError(error: GraphQLError): void } | null, error: GraphQLError) => context?.reportError(error);
  const asValidationError = { propagateOnRejection: false, onReject: [report] };
  const rules: ValidationRule[] = [
    ...specifiedRules,
    maxDepthRule({ n: OPERATION_LIMITS.depth, ...asValidationError }) as unknown as ValidationRule,
    // __typename aliases count too (armor exempts them by default).
    maxAliasesRule({ n: OPERATION_LIMITS.aliases, allowList: [], ...asValidationError }) as unknown as ValidationRule,
    maxDirectivesRule({ n: OPERATION_LIMITS.directives, ...asValidationError }) as unknown as ValidationRule,
  ];
  if (!options.introspection) rules.push(noIntrospectionRule);
  if (!options.federationSdl) rules.push(noFederationSdlRule);
  return rules;
}

export class Documents {
  readonly #shared: LRUCache<string, DocumentEntry> | undefined;
  readonly #options: DocumentOptions;
  readonly #rules: readonly ValidationRule[];

  constructor(options: DocumentOptions) {
    this.#options = options;
    this.#rules = rulesOf(options);
    this.#shared =
      options.cacheBytes > 0
        ? new LRUCache<string, DocumentEntry>({ maxSize: options.cacheBytes, sizeCalculation: (entry) => Math.max(1, entry.bytes) })
        : undefined;
  }

  get schema(): GraphQLSchema {
    return this.#options.schema;
  }

  /** The entry of a text: from the shared cache when `shared` (the caller earned it), else made for this request alone. */
  entry(text: string, shared: boolean): DocumentEntry {
    if (!shared || !this.#shared) return new DocumentEntry(text, this.#options, this.#rules);
    let entry = this.#shared.get(text);
    if (!entry) {
      entry = new DocumentEntry(text, this.#options, this.#rules);
      this.#shared.set(text, entry);
    }
    return entry;
  }

  /** Weighs a shared entry again once it grew (a plan was added or compiled). */
  reweigh(entry: DocumentEntry): void {
    // lru-cache weighs a value when it is set, and not again for the same value: out and in.
    if (this.#shared?.peek(entry.text) !== entry) return;
    this.#shared.delete(entry.text);
    this.#shared.set(entry.text, entry);
  }

  /** What the shared cache holds: entries and bytes (for /metrics and tests). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.#shared?.size ?? 0, bytes: this.#shared?.calculatedSize ?? 0 };
  }
}
