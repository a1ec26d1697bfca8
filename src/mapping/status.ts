// Style and mode strings from the upstream mapped onto the GraphQL enums,
// case- and separator-insensitively, with OTHER for a style the facade does not
// know. (Statuses are the domain's: src/domain/status.ts.)
import { bareKey, enumKey } from '../domain/status.js';
import type { DeliveryMode, DeliveryStyle } from './model.js';

const STYLES: Record<string, DeliveryStyle> = {
  STANDARD: 'STANDARD',
  HYBRID: 'HYBRID',
  SPECIAL_HANDLING: 'SPECIAL_HANDLING',
  OVERSIZE: 'OVERSIZE',
};

const STYLE_BY_BARE_KEY = new Map(Object.entries(STYLES).map(([key, style]) => [bareKey(key), style]));

export function deliveryStyle(raw: unknown): DeliveryStyle | null {
  if (typeof raw !== 'string') return null;
  // The upstream's own spelling ("Standard") and the enum's are found as they are.
  const style = STYLE_AS_WRITTEN.get(raw);
  if (style !== undefined) return style;
  if (raw.trim() === '') return null;
  return STYLE_BY_BARE_KEY.get(bareKey(raw)) ?? 'OTHER';
}

/** The upstream's spelling of each style the facade can request. */
export const WIRE_STYLE: Record<Exclude<DeliveryStyle, 'OTHER'>, string> = {
  STANDARD: 'Standard',
  HYBRID: 'Hybrid',
  SPECIAL_HANDLING: 'Special Handling',
  OVERSIZE: 'Oversize',
};

const STYLE_AS_WRITTEN = new Map<string, DeliveryStyle>([
  ...Object.entries(STYLES),
  ...Object.entries(WIRE_STYLE).map(([style, wire]) => [wire, style as DeliveryStyle] as const),
]);

export function deliveryMode(raw: unknown): DeliveryMode | null {
  if (typeof raw !== 'string') return null;
  if (raw === 'NOW') return 'NOW';
  if (raw === 'SCHEDULED') return 'SCHEDULED';
  if (raw.trim() === '') return null;
  // The upstream treats anything but NOW as scheduled.
  return enumKey(raw) === 'NOW' ? 'NOW' : 'SCHEDULED';
}
