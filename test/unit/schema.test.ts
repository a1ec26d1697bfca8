// schema.graphql against the design's target schema: every name there exists
// here with the same arguments, types and nullability; and everything is described.
import { readFileSync } from 'node:fs';
import {
  buildSchema,
  isEnumType,
  isInputObjectType,
  isInterfaceType,
  isObjectType,
  isUnionType,
  type GraphQLNamedType,
  type GraphQLSchema,
} from 'graphql';
import { describe, expect, it } from 'vitest';

const root = new URL('../..', import.meta.url);
const ours = buildSchema(readFileSync(new URL('schema.graphql', root), 'utf8'));
const targetPath = new URL('test/fixtures/schema.target.graphql', root);

function userTypes(schema: GraphQLSchema): GraphQLNamedType[] {
  return Object.values(schema.getTypeMap()).filter((type) => !type.name.startsWith('__'));
}

describe('schema.graphql', () => {
  const target = buildSchema(readFileSync(targetPath, 'utf8'));

  for (const type of userTypes(target)) {
    it(`has ${type.name} as the target schema defines it`, () => {
      const mine = ours.getType(type.name);
      expect(mine, `${type.name} is missing`).toBeDefined();
      expect(mine!.constructor.name).toBe(type.constructor.name);
      if (isObjectType(type) || isInterfaceType(type) || isInputObjectType(type)) {
        const myFields = (mine as typeof type).getFields() as Record<string, any>;
        for (const [name, field] of Object.entries(type.getFields() as Record<string, any>)) {
          expect(myFields[name], `${type.name}.${name} is missing`).toBeDefined();
          expect(String(myFields[name].type), `${type.name}.${name}`).toBe(String(field.type));
          for (const arg of field.args ?? []) {
            const myArg = myFields[name].args.find((a: any) => a.name === arg.name);
            expect(myArg, `${type.name}.${name}(${arg.name})`).toBeDefined();
            expect(String(myArg.type)).toBe(String(arg.type));
            expect(myArg.defaultValue).toEqual(arg.defaultValue);
          }
          // No extra required arguments: every client of the target still works.
          for (const myArg of myFields[name].args ?? []) {
            if (!field.args.some((a: any) => a.name === myArg.name))
              expect(String(myArg.type).endsWith('!')).toBe(false);
          }
        }
      }
      if (isObjectType(type)) {
        expect(
          (mine as typeof type)
            .getInterfaces()
            .map((i) => i.name)
            .sort(),
        ).toEqual(
          type
            .getInterfaces()
            .map((i) => i.name)
            .sort(),
        );
      }
      if (isUnionType(type)) {
        // Every member of the target's union, and possibly more (BookingOutcomeUnknownError): a client's fragments on
        // the target's members still match.
        expect((mine as typeof type).getTypes().map((t) => t.name)).toEqual(
          expect.arrayContaining(type.getTypes().map((t) => t.name)),
        );
      }
      if (isEnumType(type)) {
        expect(
          (mine as typeof type)
            .getValues()
            .map((v) => v.name)
            .sort(),
        ).toEqual(
          type
            .getValues()
            .map((v) => v.name)
            .sort(),
        );
      }
    });
  }

  it('describes every type, field, argument and enum value', () => {
    const missing: string[] = [];
    for (const type of userTypes(ours)) {
      if (!type.description) missing.push(type.name);
      if (isObjectType(type) || isInterfaceType(type) || isInputObjectType(type)) {
        for (const field of Object.values(type.getFields() as Record<string, any>)) {
          if (!field.description) missing.push(`${type.name}.${field.name}`);
          for (const arg of field.args ?? [])
            if (!arg.description) missing.push(`${type.name}.${field.name}(${arg.name})`);
        }
      }
      if (isEnumType(type))
        for (const value of type.getValues()) if (!value.description) missing.push(`${type.name}.${value.name}`);
    }
    expect(missing).toEqual([]);
  });
});
