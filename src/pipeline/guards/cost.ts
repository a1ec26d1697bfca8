// OPERATION_LIMITS.cost: the most field values one answer may hold, counted on
// an operation plan in two steps that both come before any resolver runs. The
// plan keeps what no variables can change (its least and most cost); an
// operation that only some variables put over the limit (`deliveries(uids:
// $uids)` with a long list) is counted again with the request's variables.
// Replaces graphql-armor's cost rule, which multiplies only by literal
// `first`/`last`: a list argument, a variable or an omitted `first` counted once.
import { Kind, type DocumentNode, type FieldNode, type FragmentDefinitionNode, type GraphQLError, type GraphQLSchema, type OperationDefinitionNode, type SelectionSetNode, type ValueNode } from 'graphql';
import { createGraphQLError } from 'graphql-yoga';
import { OPERATION_LIMITS } from '../limits.js';

/** A GraphQL type as the cost walk reads it (duck-typed: graphql may be loaded twice, see guards/introspection.ts). */
interface TypeLike {
  ofType?: TypeLike;
  getFields?: () => Record<string, { type: TypeLike; args: ReadonlyArray<{ name: string; type: TypeLike }> }>;
  readonly [Symbol.toStringTag]?: string;
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

/** The types introspection's root fields return (they are not among the schema's own fields). */
const INTROSPECTION_TYPES: Readonly<Record<string, string>> = { __schema: '__Schema', __type: '__Type' };

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
    // __typename, and introspection's root fields, whose lists count once.
    if (!node.selectionSet) return 1;
    const type = walk.schema.getType(INTROSPECTION_TYPES[name] ?? '') as TypeLike | null | undefined;
    return 1 + selectionCost(node.selectionSet, type ?? undefined, 1, walk);
  }
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

function selectionCost(set: SelectionSetNode, type: TypeLike | undefined, page: number, walk: CostWalk): number {
  let cost = 0;
  for (const selection of set.selections) {
    if (selection.kind === Kind.FIELD) {
      cost += fieldCost(selection, type, page, walk);
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      const on = selection.typeCondition ? (walk.schema.getType(selection.typeCondition.name.value) as TypeLike | undefined) : type;
      cost += selectionCost(selection.selectionSet, on, page, walk);
    } else {
      const fragment = walk.fragments.get(selection.name.value);
      if (!fragment) continue;
      const key = `${fragment.name.value} ${page}`;
      let fragmentCost = walk.memo.get(key);
      if (fragmentCost === undefined) {
        fragmentCost = selectionCost(fragment.selectionSet, walk.schema.getType(fragment.typeCondition.name.value) as TypeLike | undefined, page, walk);
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
  for (const definition of document.definitions) if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const defaults = new Map<string, ValueNode>();
  for (const definition of operation.variableDefinitions ?? []) if (definition.defaultValue) defaults.set(definition.variable.name.value, definition.defaultValue);
  const walk: CostWalk = { schema, fragments, defaults, variables, maxBatch, memo: new Map(), usesVariables: false };
  const root = operation.operation === 'query' ? schema.getQueryType() : operation.operation === 'mutation' ? schema.getMutationType() : schema.getSubscriptionType();
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

export function costRefusal(cost: number, limit: number, validation: boolean, node?: OperationDefinitionNode, atLeast = false): GraphQLError {
  const message =
    `Operation cost limit of ${limit} exceeded, found ${atLeast ? 'at least ' : ''}${cost}: every field counts once per value the answer can hold, ` +
    `deliveries(uids:) once per uid, _entities(representations:) once per representation and Delivery.events once per event of its page (first, or ${OPERATION_LIMITS.eventsPage} without it). ` +
    'Ask for fewer uids, fields or events.';
  // The same marks yoga gives every validation error (HTTP 400), which an HTTP answer keeps to itself;
  // refused once the variables are known, the answer is an execution result and carries only the code.
  const extensions = validation ? { code: 'GRAPHQL_VALIDATION_FAILED', http: { spec: true, status: 400 } } : { code: 'GRAPHQL_VALIDATION_FAILED' };
  return createGraphQLError(message, { nodes: node, extensions });
}

/** The cost plan of one operation of a valid document. */
export function costPlanOf(schema: GraphQLSchema, document: DocumentNode, operation: OperationDefinitionNode, maxBatch: number): CostPlan {
  const least = operationCost(schema, document, operation, 'least', maxBatch);
  const most = least.usesVariables ? operationCost(schema, document, operation, 'most', maxBatch).cost : least.cost;
  return { least: least.cost, usesVariables: least.usesVariables, most };
}

/** Why an operation is over the limit before its variables are known (a validation error); undefined when it may run. */
export function costBeforeVariables(plan: CostPlan, limit: number, operation: OperationDefinitionNode): GraphQLError | undefined {
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
