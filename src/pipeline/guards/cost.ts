// OPERATION_LIMITS.cost: the most field values one answer may hold, counted on
// an operation plan in two steps that both come before any resolver runs. The
// plan keeps what no variables can change (its least and most cost); an
// operation that only some variables put over the limit (`deliveries(uids:
// $uids)` with a long list) is counted again with the request's variables.
// Replaces graphql-armor's cost rule, which multiplies only by literal
// `first`/`last`: a list argument, a variable or an omitted `first` counted once.
// Introspection (`__schema`, `__type`) is counted by what its lists hold in this
// schema (every type, every field of each, …), and federation's `_service { sdl }`
// by the definitions the SDL writes, once per alias: what needs no key is
// counted like what does.
import {
  Kind,
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLError,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValueNode,
} from 'graphql';
import { createGraphQLError } from 'graphql-yoga';
import { OPERATION_LIMITS } from '../limits.js';

/** A GraphQL type as the cost walk reads it (duck-typed: graphql may be loaded twice, see guards/introspection.ts). */
interface TypeLike {
  name?: string;
  ofType?: TypeLike;
  getFields?: () => Record<string, FieldLike>;
  readonly [Symbol.toStringTag]?: string;
}

interface FieldLike {
  type: TypeLike;
  args: ReadonlyArray<{ name: string; type: TypeLike }>;
  /** Introspection's fields resolve from the schema's own objects. */
  resolve?: (
    source: unknown,
    args: Record<string, unknown>,
    context: unknown,
    info: { schema: GraphQLSchema },
  ) => unknown;
}

/** Whether a type is a list (under any non-null), and the named type inside. */
function unwrap(type: TypeLike): { list: boolean; named: TypeLike } {
  let list = false;
  let inner = type;
  while (inner.ofType) {
    if (inner[Symbol.toStringTag] === 'GraphQLList') list = true;
    inner = inner.ofType;
  }
  return { list, named: inner };
}

/**
 * How arguments given as variables count: as the request gives them (execution),
 * or, before they are known (validation), at their least (1) or their most (a
 * full batch, a full page).
 */
type VariableValues = Readonly<Record<string, unknown>> | 'least' | 'most';

interface CostWalk {
  schema: GraphQLSchema;
  fragments: ReadonlyMap<string, FragmentDefinitionNode>;
  /** The operation's variable defaults, as written. */
  defaults: ReadonlyMap<string, ValueNode>;
  variables: VariableValues;
  maxBatch: number;
  /** Fragment costs already counted, by name and page size. */
  memo: Map<string, number>;
  /** Set once a multiplier comes from a variable. */
  usesVariables: boolean;
  /** Introspection values already counted, by selection set and the schema object it was counted on. */
  introspected: Map<SelectionSetNode, Map<unknown, number>>;
}

/** The items of a list argument: a single value is a list of one. */
function listLength(value: ValueNode, walk: CostWalk): number {
  if (value.kind === Kind.LIST) return value.values.length;
  if (value.kind === Kind.NULL) return 0;
  if (value.kind !== Kind.VARIABLE) return 1;
  walk.usesVariables = true;
  const { variables } = walk;
  if (variables === 'least') return 1;
  if (variables === 'most') return walk.maxBatch;
  const name = value.name.value;
  if (!Object.hasOwn(variables, name)) {
    const fallback = walk.defaults.get(name);
    return fallback ? listLength(fallback, walk) : 0;
  }
  const given = variables[name];
  return Array.isArray(given) ? given.length : given == null ? 0 : 1;
}

/** A page size given as `first` or `last`; undefined when left to the field (a full page). */
function pageSize(value: ValueNode | undefined, walk: CostWalk): number | undefined {
  if (value?.kind === Kind.INT) return Math.max(0, Number.parseInt(value.value, 10));
  if (value?.kind !== Kind.VARIABLE) return undefined;
  walk.usesVariables = true;
  const { variables } = walk;
  if (variables === 'least') return 1;
  if (variables === 'most') return undefined;
  const name = value.name.value;
  if (!Object.hasOwn(variables, name)) return pageSize(walk.defaults.get(name), walk);
  const given = variables[name];
  return typeof given === 'number' && Number.isFinite(given) ? Math.max(0, Math.trunc(given)) : undefined;
}

/**
 * One field: itself and everything under it, times the entries it holds. A list
 * field with a list argument (`deliveries(uids:)`) holds one entry per item; a
 * field with `first`/`last` (`Delivery.events`) passes its page size to its list
 * fields (the connection's `edges`), a full page when it is not given. Other lists
 * (a package's items, both groups' availability) hold as many entries as their
 * parent passes down, 1 elsewhere.
 */
function fieldCost(node: FieldNode, parent: TypeLike | undefined, page: number, walk: CostWalk): number {
  const name = node.name.value;
  const field = parent?.getFields?.()[name];
  if (!field) {
    // __typename, and introspection's root fields, counted on the schema itself.
    if (!node.selectionSet) return 1;
    return 1 + introspectionRootCost(node, walk);
  }
  // The whole schema as text: as many values as the definitions it writes.
  if (name === 'sdl' && parent?.name === '_Service') return sdlValues(walk.schema);
  const { list, named } = unwrap(field.type);
  const argument = (argName: string) => node.arguments?.find((arg) => arg.name.value === argName)?.value;
  const paged = field.args.some((arg) => arg.name === 'first' || arg.name === 'last');
  const ownPage = paged ? (pageSize(argument('first') ?? argument('last'), walk) ?? OPERATION_LIMITS.eventsPage) : 1;
  let times = 1;
  if (list) {
    const listArg = field.args.find((arg) => unwrap(arg.type).list);
    const items = listArg && argument(listArg.name);
    times = items ? listLength(items, walk) : paged ? ownPage : page;
  }
  const inner = node.selectionSet ? selectionCost(node.selectionSet, named, list ? 1 : ownPage, walk) : 0;
  return times * (1 + inner);
}

/**
 * What introspection's resolvers are asked with: deprecated fields, arguments and values included (counting more is
 * safe).
 */
const INCLUDE_DEPRECATED = Object.freeze({ includeDeprecated: true });

/**
 * `__schema { … }` or `__type(name:) { … }`: the values of its answer, counted
 * on the schema's own objects by introspection's own resolvers (the types, the
 * fields of each, the arguments of each, …) without writing anything. A name
 * given in a variable that is not known yet counts as the largest type.
 */
function introspectionRootCost(node: FieldNode, walk: CostWalk): number {
  const set = node.selectionSet!;
  const { schema } = walk;
  if (node.name.value === '__schema') return introspectionValues(set, '__Schema', schema, walk);
  if (node.name.value !== '__type') return selectionCost(set, undefined, 1, walk);
  const argument = node.arguments?.find((arg) => arg.name.value === 'name')?.value;
  let name: unknown;
  if (argument?.kind === Kind.STRING) name = argument.value;
  else if (argument?.kind === Kind.VARIABLE && typeof walk.variables === 'object')
    name = walk.variables[argument.name.value];
  if (typeof name === 'string') {
    const type = schema.getType(name);
    return type ? introspectionValues(set, '__Type', type, walk) : 0;
  }
  let most = 0;
  for (const type of Object.values(schema.getTypeMap()))
    most = Math.max(most, introspectionValues(set, '__Type', type, walk));
  return most;
}

/**
 * The values a selection on an introspection type holds for one schema object
 * (the schema, a type, a field, …): a list field once per item it holds, each
 * with what is selected under it. Stops counting past OPERATION_LIMITS.cost, so
 * a nesting made to be huge is over the limit for the price of the limit.
 */
function introspectionValues(set: SelectionSetNode, typeName: string, source: unknown, walk: CostWalk): number {
  let bySource = walk.introspected.get(set);
  if (!bySource) walk.introspected.set(set, (bySource = new Map()));
  const known = bySource.get(source);
  if (known !== undefined) return known;
  const fields = (walk.schema.getType(typeName) as TypeLike | undefined)?.getFields?.() ?? {};
  const info = { schema: walk.schema };
  let cost = 0;
  for (const selection of set.selections) {
    if (cost > OPERATION_LIMITS.cost) break;
    if (selection.kind === Kind.INLINE_FRAGMENT) {
      cost += introspectionValues(selection.selectionSet, typeName, source, walk);
      continue;
    }
    if (selection.kind === Kind.FRAGMENT_SPREAD) {
      const fragment = walk.fragments.get(selection.name.value);
      if (fragment) cost += introspectionValues(fragment.selectionSet, typeName, source, walk);
      continue;
    }
    const field = fields[selection.name.value];
    // __typename, or a field this type does not have (validation refused it).
    if (!field) {
      cost += 1;
      continue;
    }
    const value = field.resolve
      ? field.resolve(source, INCLUDE_DEPRECATED, undefined, info)
      : (source as Record<string, unknown>)[selection.name.value];
    const inner = unwrap(field.type).named.name ?? '';
    const items = Array.isArray(value) ? value : value == null ? [] : [value];
    if (!selection.selectionSet) cost += Math.max(1, items.length);
    else if (items.length === 0) cost += 1;
    else {
      for (const item of items) {
        cost += 1 + introspectionValues(selection.selectionSet, inner, item, walk);
        if (cost > OPERATION_LIMITS.cost) break;
      }
    }
  }
  bySource.set(source, cost);
  return cost;
}

const SDL_VALUES = new WeakMap<GraphQLSchema, number>();

/**
 * The definitions the schema's SDL writes: its types, and their fields, arguments, input fields and enum values, and
 * the directives.
 */
function sdlValues(schema: GraphQLSchema): number {
  let count = SDL_VALUES.get(schema);
  if (count !== undefined) return count;
  count = schema.getDirectives().reduce((sum, directive) => sum + 1 + directive.args.length, 0);
  for (const type of Object.values(schema.getTypeMap())) {
    // Introspection's own types are not written.
    if (type.name.startsWith('__')) continue;
    count += 1;
    const members = type as {
      getFields?: () => Record<string, { args?: readonly unknown[] }>;
      getValues?: () => readonly unknown[];
    };
    for (const field of Object.values(members.getFields?.() ?? {})) count += 1 + (field.args?.length ?? 0);
    count += members.getValues?.().length ?? 0;
  }
  SDL_VALUES.set(schema, count);
  return count;
}

function selectionCost(set: SelectionSetNode, type: TypeLike | undefined, page: number, walk: CostWalk): number {
  let cost = 0;
  for (const selection of set.selections) {
    if (selection.kind === Kind.FIELD) {
      cost += fieldCost(selection, type, page, walk);
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      const on = selection.typeCondition
        ? (walk.schema.getType(selection.typeCondition.name.value) as TypeLike | undefined)
        : type;
      cost += selectionCost(selection.selectionSet, on, page, walk);
    } else {
      const fragment = walk.fragments.get(selection.name.value);
      if (!fragment) continue;
      const key = `${fragment.name.value} ${page}`;
      let fragmentCost = walk.memo.get(key);
      if (fragmentCost === undefined) {
        fragmentCost = selectionCost(
          fragment.selectionSet,
          walk.schema.getType(fragment.typeCondition.name.value) as TypeLike | undefined,
          page,
          walk,
        );
        walk.memo.set(key, fragmentCost);
      }
      cost += fragmentCost;
    }
  }
  return cost;
}

/**
 * The most field values an operation's answer may hold (OPERATION_LIMITS.cost),
 * for a valid document: fragments are counted where they are spread, and a
 * type's fields under every type condition (an upper bound for unions).
 */
export function operationCost(
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  variables: VariableValues,
  maxBatch: number,
): { cost: number; usesVariables: boolean } {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions)
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const defaults = new Map<string, ValueNode>();
  for (const definition of operation.variableDefinitions ?? [])
    if (definition.defaultValue) defaults.set(definition.variable.name.value, definition.defaultValue);
  const walk: CostWalk = {
    schema,
    fragments,
    defaults,
    variables,
    maxBatch,
    memo: new Map(),
    usesVariables: false,
    introspected: new Map(),
  };
  const root =
    operation.operation === 'query'
      ? schema.getQueryType()
      : operation.operation === 'mutation'
        ? schema.getMutationType()
        : schema.getSubscriptionType();
  const cost = selectionCost(operation.selectionSet, (root ?? undefined) as TypeLike | undefined, 1, walk);
  return { cost, usesVariables: walk.usesVariables };
}

/** What one operation may cost before its variables are known. */
export interface CostPlan {
  /** With every variable multiplier at 1: over the limit, no variables can save it. */
  least: number;
  /** Whether a multiplier comes from a variable (then `least` is only a bound). */
  usesVariables: boolean;
  /** With every variable multiplier at its most: within the limit, no variables can break it. */
  most: number;
}

export function costRefusal(
  cost: number,
  limit: number,
  validation: boolean,
  node?: OperationDefinitionNode,
  atLeast = false,
): GraphQLError {
  const message =
    `Operation cost limit of ${limit} exceeded, found ${atLeast ? 'at least ' : ''}${cost}: every field counts once per value the answer can hold, ` +
    `deliveries(uids:) once per uid, _entities(representations:) once per representation and Delivery.events once per event of its page (first, or ${OPERATION_LIMITS.eventsPage} without it). ` +
    'Ask for fewer uids, fields or events.';
  // The same marks yoga gives every validation error (HTTP 400), which an HTTP answer keeps to itself;
  // refused once the variables are known, the answer is an execution result and carries only the code.
  const extensions = validation
    ? { code: 'GRAPHQL_VALIDATION_FAILED', http: { spec: true, status: 400 } }
    : { code: 'GRAPHQL_VALIDATION_FAILED' };
  return createGraphQLError(message, { nodes: node, extensions });
}

/** The cost plan of one operation of a valid document. */
export function costPlanOf(
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  maxBatch: number,
): CostPlan {
  const least = operationCost(schema, document, operation, 'least', maxBatch);
  const most = least.usesVariables ? operationCost(schema, document, operation, 'most', maxBatch).cost : least.cost;
  return { least: least.cost, usesVariables: least.usesVariables, most };
}

/**
 * Why an operation is over the limit before its variables are known (a validation error); undefined when it may run.
 */
export function costBeforeVariables(
  plan: CostPlan,
  limit: number,
  operation: OperationDefinitionNode,
): GraphQLError | undefined {
  return plan.least > limit ? costRefusal(plan.least, limit, true, operation, plan.usesVariables) : undefined;
}

/** Why an operation is over the limit with these variables (an execution result's error); undefined when it may run. */
export function costWithVariables(
  plan: CostPlan,
  limit: number,
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  variables: Readonly<Record<string, unknown>> | undefined,
  maxBatch: number,
): GraphQLError | undefined {
  if (plan.most <= limit) return undefined;
  const { cost } = operationCost(schema, document, operation, variables ?? {}, maxBatch);
  return cost > limit ? costRefusal(cost, limit, false) : undefined;
}
