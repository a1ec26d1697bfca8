// The four custom scalars. DateTime and Decimal are written here because no kept
// library gives their exact wire forms (UTC seconds with a Z; exact decimal strings).
import { Decimal as DecimalJs } from 'decimal.js';
import { GraphQLError, GraphQLScalarType, Kind, type ValueNode } from 'graphql';
import { JSONResolver, LocalDateResolver } from 'graphql-scalars';
import {
  decimalFrom,
  formatDecimal,
  isCalendarDateText,
  isDecimalCentsText,
  isUtcSecondsText,
  utcDateTime,
} from '../mapping/scalars.js';
import { builder } from './builder.js';

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * An input instant with any offset → UTC "YYYY-MM-DDTHH:MM:SSZ", the form the upstream takes (it rejects numeric offsets
 * and shows no fraction).
 */
function parseDateTime(value: unknown): string {
  if (typeof value !== 'string' || !RFC3339.test(value)) {
    throw new GraphQLError(
      `DateTime must be an RFC 3339 date-time with an offset, e.g. "2026-05-01T14:30:00+02:00"; got ${JSON.stringify(value)}.`,
    );
  }
  const utc = utcDateTime(value, { fraction: false });
  if (!utc) throw new GraphQLError(`DateTime ${JSON.stringify(value)} is not a real instant.`);
  return utc;
}

builder.scalarType('DateTime', {
  description:
    'An instant. Output: always UTC, "YYYY-MM-DDTHH:MM:SSZ", with the fraction of a second where the upstream gave one ("…:SS.125Z"); the facade\'s own times (receipts, checks, expiries) are to the second. Input: any RFC 3339 date-time with an offset (Z or +hh:mm); the facade converts it to UTC, to the second, before calling the upstream.',
  serialize: (value) => {
    // What the mapping made is already the output form: checked, not parsed again. A fraction the upstream gave stays.
    if (typeof value === 'string' && value.length === 20 && isUtcSecondsText(value)) return value;
    const utc = utcDateTime(value);
    if (!utc) throw new GraphQLError('DateTime cannot represent this value.');
    return utc;
  },
  parseValue: parseDateTime,
  parseLiteral: (ast) => parseDateTime(ast.kind === Kind.STRING ? ast.value : undefined),
});

// LocalDate as it is, but a value already in its form is checked without building a Date.
const LocalDate = new GraphQLScalarType({
  ...LocalDateResolver.toConfig(),
  serialize: (value) =>
    typeof value === 'string' && isCalendarDateText(value) ? value : LocalDateResolver.serialize(value),
});

builder.addScalarType('Date', LocalDate, {
  description: 'A calendar date, "YYYY-MM-DD".',
});

/**
 * Plain decimal notation only, at most 18 integer and 10 fractional digits: an
 * exponent like "1e-600000000" would otherwise expand into a huge string.
 */
const DECIMAL_TEXT = /^-?\d{1,18}(\.\d{1,10})?$/;

function parseDecimal(value: unknown): string {
  let text: string | undefined;
  if (typeof value === 'string') text = value.trim();
  else if (typeof value === 'number' && Number.isFinite(value))
    text = value
      .toPrecision(15)
      .replace(/(\.\d*?)0+$/, '$1')
      .replace(/\.$/, '');
  if (text === undefined || !DECIMAL_TEXT.test(text)) {
    throw new GraphQLError(
      `Decimal must be a decimal number in major units as a string, e.g. "12.50" (plain notation, at most 18 integer and 10 fractional digits); got ${JSON.stringify(value)?.slice(0, 40)}.`,
    );
  }
  return formatDecimal(new DecimalJs(text));
}

function decimalLiteral(ast: ValueNode): string {
  // Int and Float literals keep their source text, so no binary float is involved.
  if (ast.kind === Kind.STRING || ast.kind === Kind.INT || ast.kind === Kind.FLOAT) return parseDecimal(ast.value);
  throw new GraphQLError('Decimal must be given as a string, e.g. "12.50".');
}

builder.scalarType('Decimal', {
  description:
    'An exact decimal amount in major units, serialized as a string ("12.50"). Never a binary float on the wire.',
  serialize: (value) => {
    if (typeof value === 'string' && isDecimalCentsText(value)) return value;
    const text = decimalFrom(value);
    if (text === null) throw new GraphQLError('Decimal cannot represent this value.');
    return text;
  },
  parseValue: parseDecimal,
  parseLiteral: decimalLiteral,
});

builder.addScalarType('JSON', JSONResolver, {
  description: 'Any JSON value; payloads are stored and returned untouched.',
});
