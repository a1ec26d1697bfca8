// The sandbox's fault and speed knobs: defaults and the one place a patch is
// checked, so the library, the control route and the CLI reject the same inputs.
import type { SandboxKnobs } from './types.js';
import { OUTCOMES } from './state.js';
import { isSeed, MAX_SEED, WEBHOOK_ORDERS } from './webhook-script.js';

/**
 * Time between milestones, the same whether the sandbox runs alone (`npm run
 * sandbox`) or inside the facade (SANDBOX_STEP_MS): three seconds, so a whole
 * delivery plays out in about 20 s, slow enough to watch in a demo. Tests set their own.
 */
export const DEFAULT_STEP_MS = 3000;

export const DEFAULT_KNOBS: Readonly<SandboxKnobs> = Object.freeze({
  stepMs: DEFAULT_STEP_MS,
  locationTicks: 3,
  latencyMs: 0,
  errorRate: 0,
  duplicateRate: 0,
  reorderRate: 0,
  // Every webhook is sent (and retried) unless a test asks for some to be lost.
  dropRate: 0,
  // Each delivery's webhooks go out as they happen unless asked otherwise.
  webhookOrder: 'as_emitted',
  // Unseeded: each delivery draws a fresh seed (shown in its history).
  seed: null,
  // Outcomes are drawn at pickup from returnRate unless weights are given.
  outcomeWeights: null,
  // Every delivery is delivered unless asked otherwise: tests and demos opt in.
  returnRate: 0,
  // Every courier keeps their delivery unless asked otherwise.
  reassignRate: 0,
  webhookTimeoutMs: 5000,
  retryBaseMs: 500,
  // The document gives delivery_date on read as a full datetime without saying which time: midnight unless set.
  deliveryMinuteOfDay: 0,
  // The document's 404 for a read is "no delivery with this uid belongs to the platform": the
  // sandbox scopes reads to the merchant key unless asked to scope them to the platform.
  readScope: 'merchant',
  // The document's webhook body has neither partner field: a partner order's events carry them only when asked.
  partnerWebhookFields: false,
  // Creates answer at once unless a test wants the answer lost after the booking was made.
  createAnswerDelayMs: 0,
  // The document shows create's answer only as carrying uid and tracking_link: at the top level with 201 unless asked.
  createAnswerShape: 'top-level',
});

const RATES = new Set<keyof SandboxKnobs>([
  'errorRate',
  'duplicateRate',
  'reorderRate',
  'dropRate',
  'returnRate',
  'reassignRate',
]);
const INTEGERS = new Set<keyof SandboxKnobs>(['locationTicks', 'deliveryMinuteOfDay']);
/** A zero timeout would fail every webhook attempt before it is sent. */
const POSITIVE = new Set<keyof SandboxKnobs>(['webhookTimeoutMs']);
/** Knobs that take one of a few words, and those words. */
const CHOICES: Partial<Record<keyof SandboxKnobs, readonly string[]>> = {
  readScope: ['merchant', 'platform'],
  createAnswerShape: ['top-level', 'data'],
  webhookOrder: WEBHOOK_ORDERS,
};
const SWITCHES = new Set<keyof SandboxKnobs>(['partnerWebhookFields']);

/**
 * Checks a partial knob set and copies it onto `target` in place (the live
 * object everybody reads). All-or-nothing: a bad entry changes nothing.
 */
export function applyKnobs(target: SandboxKnobs, patch: unknown): void {
  if (patch === undefined || patch === null) return;
  if (typeof patch !== 'object' || Array.isArray(patch)) {
    throw new RangeError('knobs must be an object');
  }
  const accepted: Partial<SandboxKnobs> = {};
  for (const [name, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    if (!(name in DEFAULT_KNOBS)) throw new RangeError(`unknown knob ${name}`);
    const knob = name as keyof SandboxKnobs;
    if (knob === 'seed') {
      if (value !== null && !isSeed(value))
        throw new RangeError(`seed must be null or an integer from 0 to ${MAX_SEED}`);
      accepted.seed = value as number | null;
      continue;
    }
    if (knob === 'outcomeWeights') {
      accepted.outcomeWeights = outcomeWeights(value);
      continue;
    }
    const choices = CHOICES[knob];
    if (choices) {
      if (typeof value !== 'string' || !choices.includes(value))
        throw new RangeError(`${knob} must be one of ${choices.join(', ')}`);
      (accepted as Record<string, unknown>)[knob] = value;
      continue;
    }
    if (SWITCHES.has(knob)) {
      if (typeof value !== 'boolean') throw new RangeError(`${knob} must be true or false`);
      (accepted as Record<string, unknown>)[knob] = value;
      continue;
    }
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      throw new RangeError(`${knob} must be a finite number >= 0`);
    }
    if (POSITIVE.has(knob) && value === 0) throw new RangeError(`${knob} must be greater than 0`);
    if (RATES.has(knob) && value > 1) throw new RangeError(`${knob} must be between 0 and 1`);
    if (knob === 'deliveryMinuteOfDay' && value > 1439) throw new RangeError(`${knob} must be between 0 and 1439`);
    if (INTEGERS.has(knob) && !Number.isInteger(value)) {
      throw new RangeError(`${knob} must be an integer`);
    }
    (accepted as Record<string, unknown>)[knob] = value;
  }
  Object.assign(target, accepted);
}

/**
 * null, or an object of outcome → weight (finite, >= 0, at least one above 0); copied so the caller's object cannot
 * change it later.
 */
function outcomeWeights(value: unknown): SandboxKnobs['outcomeWeights'] {
  if (value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value))
    throw new RangeError(`outcomeWeights must be null or an object of ${OUTCOMES.join(', ')} to weights`);
  const weights: Record<string, number> = {};
  for (const [outcome, weight] of Object.entries(value)) {
    if (!(OUTCOMES as readonly string[]).includes(outcome))
      throw new RangeError(`outcomeWeights: ${outcome} is not one of ${OUTCOMES.join(', ')}`);
    if (typeof weight !== 'number' || !Number.isFinite(weight) || weight < 0)
      throw new RangeError(`outcomeWeights: the weight of ${outcome} must be a finite number >= 0`);
    weights[outcome] = weight;
  }
  if (!Object.values(weights).some((weight) => weight > 0))
    throw new RangeError('outcomeWeights: at least one weight must be above 0');
  return Object.freeze(weights);
}
