// The cost guard on what needs no key (issue 29): introspection counted by what
// its lists hold in this schema, and federation's `_service { sdl }` by the
// definitions it writes, once per alias, against the real schema.
import { execute, getIntrospectionQuery, getOperationAST, parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import { toSchema } from '../../src/graphql/schema.js';
import { costPlanOf } from '../../src/pipeline/guards/cost.js';

describe('the cost of what needs no key', () => {
  const schema = toSchema();
  const costOf = (text: string) => {
    const document = parse(text);
    return costPlanOf(schema, document, getOperationAST(document)!, 100).least;
  };
  /** The values of an answer, counted as the cost guard counts them (every field value, list items one by one). */
  const valuesOf = (value: unknown): number => {
    if (Array.isArray(value)) return value.reduce((sum: number, item) => sum + Math.max(1, valuesOf(item)), 0);
    if (value && typeof value === 'object')
      return Object.values(value).reduce(
        (sum: number, field) => sum + 1 + (field && typeof field === 'object' ? valuesOf(field) : 0),
        0,
      );
    return 0;
  };

  it('counts an introspection by what its lists hold in this schema, not once a list', () => {
    const full = getIntrospectionQuery({
      descriptions: true,
      specifiedByUrl: true,
      directiveIsRepeatable: true,
      inputValueDeprecation: true,
    });
    const answer = execute({ schema, document: parse(full) }) as { data: unknown };
    const values = valuesOf(answer.data);
    expect(values).toBeGreaterThan(3_000);
    // An upper bound (deprecated members included), close to what the answer holds.
    expect(costOf(full)).toBeGreaterThanOrEqual(values);
    expect(costOf(full)).toBeLessThan(values * 1.3);
    // `types { name fields { name } }`: each type, its name, and each of its fields with its name (a type without
    // fields: its null).
    const typesAndFields = costOf('{ __schema { types { name fields(includeDeprecated: true) { name } } } }');
    // Objects and interfaces have fields (and interfaces of their own); other kinds answer null.
    const fieldsOf = (type: object) =>
      'getInterfaces' in type ? Object.keys((type as unknown as { getFields(): object }).getFields()).length : 0;
    const expected =
      1 +
      Object.values(schema.getTypeMap()).reduce(
        (sum, type) => sum + 2 + (fieldsOf(type) > 0 ? 2 * fieldsOf(type) : 1),
        0,
      );
    expect(typesAndFields).toBe(expected);
  });

  it('counts `__type(name:)` by the type named, and aliases each', () => {
    const delivery = schema.getType('Delivery') as unknown as { getFields(): Record<string, unknown> };
    const fieldCount = Object.keys(delivery.getFields()).length;
    expect(costOf('{ __type(name: "Delivery") { fields { name } } }')).toBe(1 + fieldCount * 2);
    expect(
      costOf('{ a: __type(name: "Delivery") { fields { name } } b: __type(name: "Delivery") { fields { name } } }'),
    ).toBe(2 * (1 + fieldCount * 2));
    expect(costOf('{ __type(name: "NoSuchType") { name } }')).toBe(1);
  });

  it('puts 20 aliased full listings of the types over the limit', () => {
    const types =
      'types { name kind description fields(includeDeprecated: true) { name description isDeprecated args { name description defaultValue type { name kind ofType { name kind } } } ' +
      'type { name kind ofType { name kind ofType { name kind } } } } enumValues(includeDeprecated: true) { name description } inputFields { name description type { name kind ofType { name kind } } } }';
    expect(costOf(`{ __schema { ${types} } }`)).toBeLessThan(50_000);
    expect(
      costOf(`{ __schema { ${Array.from({ length: 20 }, (_, i) => `t${i}: ${types}`).join(' ')} } }`),
    ).toBeGreaterThan(50_000);
  });

  it('counts `_service { sdl }` as the definitions the SDL writes, once per alias', () => {
    const one = costOf('{ _service { sdl } }');
    expect(one).toBeGreaterThan(100);
    expect(costOf(`{ ${Array.from({ length: 30 }, (_, i) => `s${i}: _service { sdl }`).join(' ')} }`)).toBe(30 * one);
  });
});
