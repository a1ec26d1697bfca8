// Query texts as parsed, validated documents with their operation plans. A
// caller who has earned it (access/caller.ts) shares one cache, bounded in
// bytes (GRAPHQL_CACHE_BYTES): each entry counts what it holds, measured from
// what it is made of (weights.ts): its text, the tokens and nodes of its syntax
// tree, its plans, and the source generated for each compiled executor, so a
// megabyte entry weighs a megabyte and evicts accordingly. Anyone else gets an
// entry made for the request alone, which is garbage as soon as it is answered.
//
// Compiling is a privilege with a budget of its own (Compiles below): only a
// merchant key the upstream accepted compiles, only a plan run twice, only one
// whose expanded selection is small enough to compile in a few milliseconds,
// and only so many a minute, per key and per process.
import {
  parse,
  validate,
  specifiedRules,
  GraphQLError,
  type DocumentNode,
  type GraphQLSchema,
  type ValidationRule,
} from 'graphql';
import { maxAliasesRule } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthRule } from '@escape.tech/graphql-armor-max-depth';
import { maxDirectivesRule } from '@escape.tech/graphql-armor-max-directives';
import { LRUCache } from 'lru-cache';
import type { Caller, Trust } from '../access/caller.js';
import { costBeforeVariables } from './guards/cost.js';
import { noFederationSdlRule } from './guards/federation-sdl.js';
import { fieldRepeatRefusal } from './guards/field-repeats.js';
import { noIntrospectionRule, withoutSuggestions } from './guards/introspection.js';
import { OPERATION_LIMITS } from './limits.js';
import { OperationPlan, planOf, type PlanOptions } from './plan.js';
import { DOCUMENT_ENTRY_BYTES, stringBytes, syntaxTreeBytes, VALIDATION_ERROR_BYTES } from './weights.js';

/** The yoga marks of a request error: its code and HTTP 400 (a spec error: 200 under application/json). */
function asRequestError(error: GraphQLError, code: string): GraphQLError {
  // graphql 16 always gives an error its own extensions object.
  const extensions = error.extensions as Record<string, unknown>;
  extensions.code ??= code;
  extensions.http ??= { spec: true, status: 400 };
  // Kept with the entry: until its stack is read, V8 keeps every frame's receiver (the validation context and its maps,
  // 150 KB for 300 fields).
  error.stack = `${error.name}: ${error.message}`;
  return error;
}

/**
 * A text parsed with the token limit; graphql-js's token-limit message in the words clients have seen from us
 * (graphql-armor's).
 */
function parsed(text: string): DocumentNode | GraphQLError {
  try {
    return parse(text, { maxTokens: OPERATION_LIMITS.tokens });
  } catch (error) {
    if (!(error instanceof GraphQLError)) throw error;
    if (/contains more tha[nt] \d+ tokens/.test(error.message))
      return asRequestError(
        new GraphQLError(`Syntax Error: Token limit of ${OPERATION_LIMITS.tokens} exceeded.`),
        'GRAPHQL_PARSE_FAILED',
      );
    return asRequestError(error, 'GRAPHQL_PARSE_FAILED');
  }
}

export interface DocumentOptions extends PlanOptions {
  /** GRAPHQL_INTROSPECTION. */
  introspection: boolean;
  /** FEDERATION_SDL: serve `_service { sdl }` (a validation error when off). */
  federationSdl: boolean;
  /** GRAPHQL_CACHE_BYTES: the most the shared cache holds; 0 keeps nothing (and nothing compiles). */
  cacheBytes: number;
  /** GRAPHQL_COMPILE_MAX_FIELDS: the most fields (fragments spread, aliases apart) a compiled plan resolves. */
  compileMaxFields: number;
  /** GRAPHQL_COMPILES_PER_MINUTE: compiles per process and minute (0: none); one merchant key gets a third of them. */
  compilesPerMinute: number;
}

/** A bucket of compiles: `size` of them, refilled at `size` a minute. */
class Bucket {
  #tokens: number;
  #at: number;

  constructor(
    readonly size: number,
    now: number,
  ) {
    this.#tokens = size;
    this.#at = now;
  }

  /** The compiles in it by `now`. */
  level(now: number): number {
    this.#tokens = Math.min(this.size, this.#tokens + ((now - this.#at) * this.size) / 60_000);
    this.#at = now;
    return this.#tokens;
  }

  take(): void {
    this.#tokens -= 1;
  }
}

/**
 * Compiles a minute, for the process and per merchant key, as token buckets (a
 * burst of a minute's worth, then as they refill). A compile blocks the event
 * loop for as long as it takes (about 0.05 ms a field, some 5 ms at
 * GRAPHQL_COMPILE_MAX_FIELDS), so the budget bounds what compiling can take from
 * every other caller: one key can use a third of it at most, and a plan refused
 * now compiles on a later run.
 */
class Compiles {
  readonly #process: Bucket;
  readonly #perKey: number;
  // By the key itself, in memory only; a full bucket is the same as none, and is dropped.
  readonly #byKey = new Map<string, Bucket>();

  constructor(perMinute: number) {
    this.#process = new Bucket(perMinute, Date.now());
    this.#perKey = Math.ceil(perMinute / 3);
  }

  /** Takes one compile for the key; false when the process or the key has none left. */
  take(key: string): boolean {
    const now = Date.now();
    let own = this.#byKey.get(key);
    if (!own) {
      if (this.#byKey.size >= 1_000)
        for (const [other, bucket] of this.#byKey) if (bucket.level(now) >= bucket.size) this.#byKey.delete(other);
      own = new Bucket(this.#perKey, now);
      this.#byKey.set(key, own);
    }
    if (this.#process.level(now) < 1 || own.level(now) < 1) return false;
    this.#process.take();
    own.take();
    return true;
  }
}

/** One query text: its document (or why it does not parse), whether it is valid, and its plans by operation name. */
export class DocumentEntry {
  readonly document: DocumentNode | undefined;
  readonly parseError: GraphQLError | undefined;
  #validation: readonly GraphQLError[] | undefined;
  /** Plans by operation name: at most one per operation of the document (names that resolve to none are not kept). */
  readonly #plans = new Map<string, OperationPlan>();
  readonly #options: DocumentOptions;
  readonly #rules: readonly ValidationRule[];
  /** Told when the entry holds more than when it was weighed (the shared cache weighs it again). */
  readonly #grew: (() => void) | undefined;
  #treeBytes: number | undefined;

  constructor(
    readonly text: string,
    options: DocumentOptions,
    rules: readonly ValidationRule[],
    grew?: () => void,
  ) {
    this.#options = options;
    this.#rules = rules;
    this.#grew = grew;
    const result = parsed(text);
    if (result instanceof GraphQLError) this.parseError = result;
    else this.document = result;
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
    // Errors are kept with the entry, each with its captured stack: they weigh more than many a tree.
    if (errors.length > 0) this.#grew?.();
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
      this.#grew?.();
    }
    return plan;
  }

  /** Why the plan's operation costs too much whatever its variables (a validation error); undefined when it may run. */
  costRefusal(plan: OperationPlan): GraphQLError | undefined {
    const error = costBeforeVariables(plan.cost, OPERATION_LIMITS.cost, plan.operation);
    return error && asRequestError(error, 'GRAPHQL_VALIDATION_FAILED');
  }

  /** What this entry holds in the heap, counted from what it is made of (weights.ts). */
  get bytes(): number {
    this.#treeBytes ??= this.document ? syntaxTreeBytes(this.document) : 0;
    let bytes =
      DOCUMENT_ENTRY_BYTES +
      stringBytes(this.text) +
      this.#treeBytes +
      (this.#validation?.length ?? 0) * VALIDATION_ERROR_BYTES;
    for (const plan of this.#plans.values()) bytes += plan.bytes;
    return bytes;
  }
}

/**
 * The validation rules of every document: graphql-js's, graphql-armor's limits, and introspection and `_service` when
 * off.
 */
function rulesOf(options: DocumentOptions): ValidationRule[] {
  const report = (context: { reportError(error: GraphQLError): void } | null, error: GraphQLError) =>
    context?.reportError(error);
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

/** graphql-jit compiles of this process, for /metrics and tests. */
export interface CompileCounters {
  /** Compiles made (one graphql-jit turns down counts too, once: its plan stays on graphql-js). */
  compiled: number;
  /** Compiles put off: the process or the key had spent its minute's (the plan compiles on a later run). */
  overBudget: number;
  /** Plans left on graphql-js for good: more fields than GRAPHQL_COMPILE_MAX_FIELDS. */
  tooLarge: number;
}

export class Documents {
  readonly compiles: CompileCounters = { compiled: 0, overBudget: 0, tooLarge: 0 };
  readonly #shared: LRUCache<string, DocumentEntry> | undefined;
  readonly #options: DocumentOptions;
  readonly #rules: readonly ValidationRule[];
  readonly #compiles: Compiles;

  constructor(options: DocumentOptions) {
    this.#options = options;
    this.#rules = rulesOf(options);
    this.#compiles = new Compiles(options.compilesPerMinute);
    this.#shared =
      options.cacheBytes > 0
        ? new LRUCache<string, DocumentEntry>({
            maxSize: options.cacheBytes,
            sizeCalculation: (entry) => Math.max(1, entry.bytes),
          })
        : undefined;
  }

  get schema(): GraphQLSchema {
    return this.#options.schema;
  }

  /**
   * The entry of a text: from the shared cache when `shared` (the caller earned it), else made for this request alone.
   */
  entry(text: string, shared: boolean): DocumentEntry {
    if (!shared || !this.#shared) return new DocumentEntry(text, this.#options, this.#rules);
    let entry = this.#shared.get(text);
    if (!entry) {
      const created: DocumentEntry = new DocumentEntry(text, this.#options, this.#rules, () => this.reweigh(created));
      entry = created;
      this.#shared.set(text, entry);
    }
    return entry;
  }

  /**
   * Whether this run of a plan compiles it. Only a merchant key the upstream
   * accepted compiles: a client token is handed to whoever follows a tracking
   * link, and a compile is work for the whole process, not for its caller (its
   * plans run on graphql-js, from the shared cache). Then only from the plan's
   * second run, only a plan of at most GRAPHQL_COMPILE_MAX_FIELDS fields (a
   * larger one stays on graphql-js for good), and only within the budget.
   */
  mayCompile(plan: OperationPlan, caller: Caller, trust: Trust): boolean {
    if (trust !== 'earned' || caller.kind !== 'merchant' || !this.#shared) return false;
    if (++plan.runs < 2 || !plan.compilable) return false;
    if (plan.expandedFields > this.#options.compileMaxFields) {
      // Counted once: the third run and later of a plan too large are not news.
      if (plan.runs === 2) this.compiles.tooLarge += 1;
      return false;
    }
    if (!this.#compiles.take(caller.key)) {
      this.compiles.overBudget += 1;
      return false;
    }
    this.compiles.compiled += 1;
    return true;
  }

  /** Weighs a shared entry again once it grew (a plan was added or compiled). */
  reweigh(entry: DocumentEntry): void {
    // lru-cache weighs a value when it is set, and not again for the same value: out and in.
    if (this.#shared?.peek(entry.text) !== entry) return;
    this.#shared.delete(entry.text);
    this.#shared.set(entry.text, entry);
  }

  /** Forgets every shared entry (for measurements, which each start from an empty cache). */
  clear(): void {
    this.#shared?.clear();
  }

  /** What the shared cache holds: entries and bytes (for /metrics and tests). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.#shared?.size ?? 0, bytes: this.#shared?.calculatedSize ?? 0 };
  }
}
