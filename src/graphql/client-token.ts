// ClientToken, the createClientToken mutation and the clientToken query: how a
// merchant lets a browser or phone follow some deliveries without its key.
import { NotFoundError, ValidationError, type FieldProblem } from '../errors.js';
import { builder } from './builder.js';
import { CLIENT_TOKEN_LIMITS, type IssuedClientToken } from '../access/client-tokens.js';
import { checkUid } from './uid-arguments.js';
import { utcSeconds } from '../mapping/scalars.js';

const ClientTokenRef = builder.objectRef<IssuedClientToken>('ClientToken').implement({
  description:
    'A credential for a browser or phone: send it where a merchant key goes (`Authorization: Bearer <token>`, `connection_init {authorization}`, or the tracking page at `/?token=<token>`). It reads `delivery`, `deliveries` and `node`, and follows `deliveryUpdated`, `courierLocation` and `deliveryEvents`, for its uids only; anything else is refused. The merchant key it acts for is encrypted inside it and cannot be read from it.',
  fields: (t) => ({
    token: t.exposeString('token', {
      description:
        'The token itself: opaque, URL-safe, to be kept as carefully as the access it grants until it expires.',
    }),
    expiresAt: t.field({
      type: 'DateTime',
      description: 'When the token stops being accepted; its open subscriptions end then.',
      resolve: (issued) => utcSeconds(issued.expiresAt),
    }),
    uids: t.exposeIDList('uids', {
      description: 'The deliveries the token may read and follow; others read as not found.',
    }),
  }),
});

/** The problems with createClientToken's arguments, one per rule broken. */
function problemsOf(uids: readonly string[], ttlSeconds: number): FieldProblem[] {
  const { minTtlSeconds, maxTtlSeconds, maxUids } = CLIENT_TOKEN_LIMITS;
  const problems: FieldProblem[] = [];
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < minTtlSeconds || ttlSeconds > maxTtlSeconds) {
    problems.push({
      path: 'ttlSeconds',
      message: `must be from ${minTtlSeconds} to ${maxTtlSeconds} seconds; got ${ttlSeconds}`,
    });
  }
  if (uids.length < 1 || uids.length > maxUids)
    problems.push({ path: 'uids', message: `must name 1 to ${maxUids} deliveries; got ${uids.length}` });
  return problems;
}

builder.mutationField('createClientToken', (t) =>
  t.field({
    type: ClientTokenRef,
    nullable: false,
    description:
      'Makes a client token for these deliveries, to hand to a browser or phone instead of the merchant key (which this mutation needs: a client token cannot make another). Each uid is checked to be readable with the key first.',
    errors: {
      types: [ValidationError, NotFoundError],
      result: { description: 'The token was made.' },
      union: { description: 'The token, or why none was made.' },
      dataField: { description: 'The new token.' },
    },
    args: {
      uids: t.arg.idList({
        required: true,
        description: `The deliveries the token may read and follow: 1 to ${CLIENT_TOKEN_LIMITS.maxUids} (repeats count once).`,
      }),
      ttlSeconds: t.arg.int({
        required: true,
        defaultValue: 3600,
        description: `How long the token is accepted, in seconds: ${CLIENT_TOKEN_LIMITS.minTtlSeconds} to ${CLIENT_TOKEN_LIMITS.maxTtlSeconds}.`,
      }),
    },
    resolve: async (_root, args, ctx) => {
      // A client token cannot make another, whatever it was let through.
      const key = ctx.requireMerchantKey();
      // A malformed uid is refused as on every other path (BAD_USER_INPUT), before any is looked up.
      args.uids.forEach((uid, index) => checkUid(String(uid), `uids[${index}]`));
      const uids = [...new Set(args.uids.map(String))];
      const problems = problemsOf(uids, args.ttlSeconds);
      if (problems.length > 0) throw new ValidationError(problems);
      // Every uid at once (at most 100): stored ownership answers most without the upstream.
      const readable = await Promise.all(uids.map((uid) => ctx.services.access.canRead(key, uid)));
      const unknown = uids.find((_uid, index) => !readable[index]);
      if (unknown !== undefined)
        throw new NotFoundError(`No delivery ${unknown} belongs to the caller; no token was made.`);
      return ctx.services.clientTokens.issue(key, uids, args.ttlSeconds);
    },
  }),
);

builder.queryField('clientToken', (t) =>
  t.field({
    type: ClientTokenRef,
    nullable: true,
    description:
      'The client token this request was made with (what it grants and until when); null with a merchant key. The tracking page reads it to know which deliveries to show.',
    resolve: (_root, _args, ctx) => {
      ctx.requireKey();
      return ctx.clientToken
        ? { token: ctx.clientToken.token, expiresAt: ctx.clientToken.expiresAt, uids: ctx.clientToken.uids }
        : null;
    },
  }),
);
