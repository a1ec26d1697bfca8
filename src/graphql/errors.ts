// Expected outcomes as typed results: each error class of src/errors.ts that a
// client may get as data is an object type implementing the Error interface.
import {
  DeliveryGraphError,
  BookingOutcomeUnknownError,
  CancelRefusedError,
  IdempotencyConflictError,
  KeyLinkRefusedError,
  NotCancelableError,
  NotFoundError,
  ValidationError,
  type FieldProblem,
} from '../errors.js';
import type { UpstreamRefusal } from '../upstream/refusal.js';
import { builder } from './builder.js';
import { utcSeconds } from '../mapping/scalars.js';

const UpstreamRefusalRef = builder.objectRef<UpstreamRefusal>('UpstreamRefusal').implement({
  description:
    "What the delivery service said when it refused a call, scrubbed of keys and tokens and cut to a bounded length (never its raw body). The same object is a GraphQL error's extensions.upstream.",
  fields: (t) => ({
    status: t.exposeInt('status', { description: 'The HTTP status it answered.' }),
    error: t.exposeString('error', {
      nullable: true,
      description:
        "Its error code: the body's `code` (platform group) or `error` (partner group), e.g. not_cancelable; null when it sent none.",
    }),
    message: t.exposeString('message', { nullable: true, description: 'Its message; null when it sent none.' }),
  }),
});

export const ErrorInterface = builder.interfaceRef<DeliveryGraphError>('Error').implement({
  description: 'An expected failure returned as data in a mutation result union.',
  fields: (t) => ({
    message: t.exposeString('message', { description: 'What went wrong, for people.' }),
    code: t.exposeString('code', { description: 'Stable machine-readable code, e.g. VALIDATION_FAILED.' }),
    upstream: t.field({
      type: UpstreamRefusalRef,
      nullable: true,
      description:
        "The delivery service's own status, error code and message when this is its refusal; null when the facade decided alone (its own checks, an idempotency conflict).",
      resolve: (error) => error.upstream ?? null,
    }),
  }),
});

const FieldErrorRef = builder.objectRef<FieldProblem>('FieldError').implement({
  description: 'One problem with one input field.',
  fields: (t) => ({
    path: t.exposeString('path', { description: 'Input path of the field, e.g. "input.pickup.phone".' }),
    message: t.exposeString('message', { description: 'What is wrong with it.' }),
  }),
});

builder.objectType(ValidationError, {
  name: 'ValidationError',
  description:
    'The input breaks one or more rules of the chosen group (checked before any upstream call, or reported by the upstream).',
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof ValidationError,
  fields: (t) => ({
    fields: t.field({
      type: [FieldErrorRef],
      description: 'Every problem found, one per field and rule.',
      resolve: (error) => error.fields,
    }),
  }),
});

builder.objectType(NotFoundError, {
  name: 'NotFoundError',
  description: 'No delivery with this uid belongs to the caller.',
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof NotFoundError,
});

builder.objectType(NotCancelableError, {
  name: 'NotCancelableError',
  description: 'The upstream refused to cancel: the delivery is past pickup or already finished.',
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof NotCancelableError,
});

builder.objectType(CancelRefusedError, {
  name: 'CancelRefusedError',
  description:
    'The upstream refused to cancel this delivery with an answer of its own (e.g. already_canceled, a 403, a 422): its status, code and message are in upstream. Nothing was canceled by this call. (not_cancelable and 409 are NotCancelableError; 404 NotFoundError.)',
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof CancelRefusedError,
  fields: (t) => ({
    upstream: t.field({
      type: UpstreamRefusalRef,
      description: "The delivery service's status, error code (e.g. already_canceled) and message.",
      resolve: (error) => error.upstream!,
    }),
  }),
});

builder.objectType(IdempotencyConflictError, {
  name: 'IdempotencyConflictError',
  description: 'The idempotency key was already used by this merchant with different input; nothing was booked.',
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof IdempotencyConflictError,
});

builder.objectType(KeyLinkRefusedError, {
  name: 'KeyLinkRefusedError',
  description:
    "linkMerchantKey's previousKey is not accepted by the delivery service now, or is the caller's own key, or both keys already have deliveries or idempotency keys of their own (only the facade's operator merges two merchants): nothing was linked.",
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof KeyLinkRefusedError,
});

builder.objectType(BookingOutcomeUnknownError, {
  name: 'BookingOutcomeUnknownError',
  description:
    "An earlier request with this idempotency key reached the upstream but its answer was lost, so it may have booked; nothing new was booked. Retry the same key later: it returns that booking once the upstream's webhook for it arrives. A new key books again.",
  interfaces: [ErrorInterface],
  isTypeOf: (value) => value instanceof BookingOutcomeUnknownError,
  fields: (t) => ({
    since: t.field({
      type: 'DateTime',
      description: "When the earlier request's answer was lost.",
      resolve: (error) => utcSeconds(error.since),
    }),
  }),
});
