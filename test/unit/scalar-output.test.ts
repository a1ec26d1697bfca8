// The output scalars pass a value already in their form as it is, checked
// without parsing it again (src/graphql/scalars.ts). That check must agree
// with the full conversion everywhere: same text out, same refusals. Each
// case is judged against something the fast path does not use (Date for
// instants and dates, decimalFrom for decimals).
import { GraphQLError, type GraphQLScalarType } from 'graphql';
import { LocalDateResolver } from 'graphql-scalars';
import { describe, expect, it } from 'vitest';
import { toSchema } from '../../src/graphql/schema.js';
import { decimalFrom } from '../../src/mapping/scalars.js';

const schema = toSchema();
const scalar = (name: string) => schema.getType(name) as GraphQLScalarType;

/** What serialize gives, or the GraphQLError it throws (any other error fails the test). */
function serialized(type: GraphQLScalarType, value: unknown): unknown {
  try {
    return type.serialize(value);
  } catch (error) {
    if (error instanceof GraphQLError) return 'refused';
    throw error;
  }
}

const YEARS = ['0000', '1900', '2000', '2023', '2024', '9999'];
const MONTHS = Array.from({ length: 14 }, (_, m) => String(m).padStart(2, '0'));
const DAYS = ['00', '01', '28', '29', '30', '31', '32'];
const dates = YEARS.flatMap((y) => MONTHS.flatMap((m) => DAYS.map((d) => `${y}-${m}-${d}`)));

describe('output scalars: the form check agrees with the full conversion', () => {
  it('DateTime passes a real UTC instant as itself and refuses an impossible one', () => {
    const DateTime = scalar('DateTime');
    const times = ['00:00:00', '23:59:59', '24:00:00', '23:60:00', '23:59:60', '09:05:07'];
    let checked = 0;
    for (const date of dates) {
      for (const time of times) {
        const text = `${date}T${time}`;
        const instant = new Date(`${text}Z`);
        const real = !Number.isNaN(instant.getTime()) && instant.toISOString().slice(0, 19) === text;
        for (const suffix of ['Z', '+00:00']) {
          expect(serialized(DateTime, `${text}${suffix}`), `${text}${suffix}`).toBe(real ? `${text}Z` : 'refused');
          checked += 1;
        }
      }
    }
    expect(checked).toBe(dates.length * 12);
    // Other ISO forms are still converted (a resolver's value need not be the output form already), the fraction kept.
    expect(serialized(DateTime, '2024-02-29T10:00:00.5+02:00')).toBe('2024-02-29T08:00:00.5Z');
    expect(serialized(DateTime, '2024-02-29T08:00:00.125Z')).toBe('2024-02-29T08:00:00.125Z');
    for (const value of ['2024-2-29T10:00:00Z', '2024-02-29X10:00:00Z', 'not a time', '', 20240229, null]) {
      expect(serialized(DateTime, value), String(value)).toBe('refused');
    }
  });

  it('Date passes a real calendar date as itself and refuses what LocalDate refuses', () => {
    const DateScalar = scalar('Date');
    for (const date of dates) {
      const real = new Date(`${date}T00:00:00Z`);
      const expected = !Number.isNaN(real.getTime()) && real.toISOString().slice(0, 10) === date ? date : 'refused';
      expect(serialized(DateScalar, date), date).toBe(expected);
      expect(serialized(LocalDateResolver, date), date).toBe(expected);
    }
    for (const value of [' 2024-01-01', '2024-1-01', '2024-01-01T00:00:00Z', 20240101, null]) {
      expect(serialized(DateScalar, value), String(value)).toBe('refused');
    }
  });

  it('Decimal gives what decimalFrom gives, and refuses what it cannot read', () => {
    const DecimalScalar = scalar('Decimal');
    const texts = [
      '12.50',
      '0.00',
      '-0.00',
      '-3.10',
      '007.50',
      '12.5',
      '12',
      '12.500',
      '12.345',
      '0.1',
      '9999999999999.99',
      '10000000000000.00',
      ' 1.00',
      '1e3',
      '1.',
      '.5',
      'abc',
      '',
      '-',
    ];
    for (const text of texts) {
      expect(serialized(DecimalScalar, text), text).toBe(decimalFrom(text) ?? 'refused');
    }
    // The form passes as the very same text.
    expect(serialized(DecimalScalar, '12.50')).toBe('12.50');
  });
});
