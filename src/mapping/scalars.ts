// Money, time and number conversions shared by every mapping. Money never goes
// through binary float arithmetic: upstream floats are re-read as decimals.
import { Decimal } from 'decimal.js';
import type { AmountUnit } from '../config.js';

/** Numbers the upstream may send as numeric strings are read as numbers; anything else is null. */
export function num(value: unknown): number | null {
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (typeof value === 'string' && value.trim() !== '') {
    const parsed = Number(value);
    return Number.isFinite(parsed) ? parsed : null;
  }
  return null;
}

export function int(value: unknown): number | null {
  const parsed = num(value);
  return parsed === null ? null : Math.trunc(parsed);
}

export function str(value: unknown): string | null {
  if (typeof value === 'string') return value === '' ? null : value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return null;
}

/**
 * A decimal string in major units from an upstream amount (float or decimal
 * string). 15 significant digits drop binary artifacts such as
 * 0.30000000000000004; at least two decimals are shown ("12.50").
 */
export function decimalFrom(value: unknown): string | null {
  let decimal: Decimal;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) return null;
    // The common case, an amount in cents: its shortest form is already exact.
    const shortest = String(value);
    if (CENTS.test(shortest)) return withTwoDecimals(shortest);
    decimal = new Decimal(value.toPrecision(15));
    // Beyond 15 significant digits (over 10^13 with cents) rounding to 15 would
    // change the amount; a shortest form with at most two decimals is the exact
    // cents value the upstream converted, not an artifact.
    if (!decimal.equals(value) && /^-?\d+(\.\d{1,2})?$/.test(shortest)) decimal = new Decimal(shortest);
  } else if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value.trim())) {
    const text = value.trim();
    // The common case, "2.50": already the exact form (no leading zero to drop, at most cents).
    if (PLAIN_CENTS.test(text)) return withTwoDecimals(text);
    decimal = new Decimal(text);
  } else {
    return null;
  }
  return formatDecimal(decimal);
}

const CENTS = /^-?\d{1,13}(\.\d{1,2})?$/;
/** CENTS without leading zeros, as a decimal string may have them ("007.5"). */
const PLAIN_CENTS = /^-?(0|[1-9]\d{0,12})(\.\d{1,2})?$/;
/** PLAIN_CENTS with exactly two decimals: the form decimalFrom gives a cents amount. */
const DECIMAL_CENTS = /^-?(0|[1-9]\d{0,12})\.\d\d$/;

/** Whether `text` is already what decimalFrom makes of it, in the common case of a cents amount ("12.50"). */
export function isDecimalCentsText(text: string): boolean {
  return DECIMAL_CENTS.test(text);
}

function withTwoDecimals(text: string): string {
  const dot = text.indexOf('.');
  if (dot < 0) return `${text}.00`;
  return text.length - dot === 2 ? `${text}0` : text;
}

/**
 * An amount the upstream gives in `unit` as a decimal string in major units:
 * cents are divided by 100 (1234 → "12.34"), major units are read as they are.
 */
export function amountFromUpstream(value: unknown, unit: AmountUnit): string | null {
  const decimal = decimalFrom(value);
  if (decimal === null || unit === 'major') return decimal;
  return formatDecimal(new Decimal(decimal).div(100));
}

export function formatDecimal(decimal: Decimal): string {
  const places = Math.max(2, decimal.decimalPlaces());
  return decimal.toFixed(places);
}

const ISO_WITH_OFFSET = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$/;

/**
 * Any ISO 8601 datetime the upstream sends (`+00:00`, `Z`, fractions) as UTC,
 * "YYYY-MM-DDTHH:MM:SSZ", with the fraction of a second as given when there is
 * one ("…:SS.125Z"): an offset is whole minutes, so it never changes the
 * fraction. A datetime without an offset is taken as UTC, since the upstream
 * speaks UTC only. Unreadable: null. `fraction: false` drops it (what the
 * upstream accepts in requests).
 */
export function utcDateTime(value: unknown, { fraction = true }: { fraction?: boolean } = {}): string | null {
  if (typeof value !== 'string') return null;
  // Already the output form: itself, no copy.
  if (value.length === 20 && isUtcSecondsText(value)) return value;
  // The upstream's own form, already UTC: "YYYY-MM-DDTHH:MM:SS+00:00".
  if (value.length === 25 && isUtcSecondsText(value)) return `${value.slice(0, 19)}Z`;
  const text = value.trim();
  const match = ISO_WITH_OFFSET.exec(text);
  if (!match) return null;
  const [, year, month, day, hour, minute, second, part, offset] = match;
  // Date.parse rolls impossible values over (2026-02-30 → 2026-03-02, 24:00 → next day).
  if (!isCalendarDay(year!, month!, day!) || !isClockTime(hour!, minute!, second ?? '0')) return null;
  const seconds = part === undefined ? text : text.replace(part, '');
  const millis = Date.parse(offset ? seconds : `${seconds}Z`);
  if (Number.isNaN(millis)) return null;
  const iso = new Date(millis).toISOString();
  // An offset can push an instant out of years 0000–9999 ("+010000-…", "-000001-…"): not representable.
  if (iso.length !== 24) return null;
  return `${iso.slice(0, 19)}${fraction && part !== undefined ? part : ''}Z`;
}

/** An instant the facade itself makes (a receipt, a check, an expiry), to the second: "YYYY-MM-DDTHH:MM:SSZ". */
export function utcSeconds(instant: Date | string): string {
  const iso = typeof instant === 'string' ? instant : instant.toISOString();
  return iso.length === 20 ? iso : `${iso.slice(0, 19)}Z`;
}

/** A calendar date from `YYYY-MM-DD` or from a full datetime (the read's `delivery_date`). */
export function calendarDate(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const text = value.trim();
  if (PLAIN_DATE.test(text)) return isCalendarDateText(text) ? text : null;
  return utcDateTime(text)?.slice(0, 10) ?? null;
}

const UTC_SECONDS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:Z|\+00:00)$/;
const PLAIN_DATE = /^\d{4}-\d{2}-\d{2}$/;
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/**
 * Whether `text` is a real UTC instant to the second, "YYYY-MM-DDTHH:MM:SSZ"
 * (the DateTime output form) or "…+00:00". Checked without copying anything:
 * the DateTime scalar asks this of every value it writes.
 */
export function isUtcSecondsText(text: string): boolean {
  return (
    UTC_SECONDS.test(text) &&
    isDay(digitsAt(text, 0, 4), digitsAt(text, 5, 2), digitsAt(text, 8, 2)) &&
    digitsAt(text, 11, 2) <= 23 &&
    digitsAt(text, 14, 2) <= 59 &&
    digitsAt(text, 17, 2) <= 59
  );
}

/** Whether `text` is a real calendar date, "YYYY-MM-DD" (the Date output form). */
export function isCalendarDateText(text: string): boolean {
  return PLAIN_DATE.test(text) && isDay(digitsAt(text, 0, 4), digitsAt(text, 5, 2), digitsAt(text, 8, 2));
}

/** The number written by `count` ASCII digits at `at` (the caller has checked they are digits). */
function digitsAt(text: string, at: number, count: number): number {
  let value = 0;
  for (let i = at; i < at + count; i += 1) value = value * 10 + text.charCodeAt(i) - 48;
  return value;
}

function isCalendarDay(year: string, month: string, day: string): boolean {
  return isDay(Number(year), Number(month), Number(day));
}

function isDay(y: number, m: number, d: number): boolean {
  if (m < 1 || m > 12 || d < 1) return false;
  const leap = m === 2 && y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  return d <= DAYS_IN_MONTH[m - 1]! + (leap ? 1 : 0);
}

function isClockTime(hour: string, minute: string, second: string): boolean {
  return Number(hour) <= 23 && Number(minute) <= 59 && Number(second) <= 59;
}

export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
