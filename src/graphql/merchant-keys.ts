// linkMerchantKey: how a merchant that rotated its key keeps its deliveries,
// idempotency keys and cursors (src/access/merchants.ts). Called with the new
// key, it presents the previous one; the upstream must accept both now, so
// nobody can present a key it does not hold. A link moves nothing: the key
// with nothing of its own joins the other's merchant, whichever key calls, and
// two keys that both have history are refused (an operator merges them). A
// previous key already revoked is linked by an operator instead
// (scripts/merchant.ts; docs/operations.md).
import { Kind, type GraphQLResolveInfo } from 'graphql';
import { BadUserInputError, KeyLinkRefusedError, RateLimitedError, UnauthenticatedError } from '../errors.js';
import { hashKey } from '../domain/merchant-key.js';
import { builder } from './builder.js';
import type { GraphQLContext } from './context.js';

interface MerchantKeyLink {
  linked: boolean;
}

const MerchantKeyLinkRef = builder.objectRef<MerchantKeyLink>('MerchantKeyLink').implement({
  description:
    "The caller's key and the previous key are one merchant's: its deliveries, idempotency keys and deliveryEvents cursors answer to either.",
  fields: (t) => ({
    linked: t.exposeBoolean('linked', {
      description: "True when this call linked them; false when they were one merchant's already (nothing changed).",
    }),
  }),
});

const REFUSED =
  "The previous key is not one the delivery service accepts now (unknown, revoked, or not valid for this platform): nothing was linked. A key already revoked is linked by the facade's operator.";
const BOTH_HAVE_HISTORY =
  "Both keys already have deliveries or idempotency keys of their own: a link moves nothing, so linking them would take one merchant's from it, and nothing was linked. If both keys are truly one merchant's, the facade's operator merges them (npm run merchant -- merge; docs/operations.md).";

/** Whether the field's argument came as a variable: a key written into the query text would sit in document caches. */
function passedAsVariable(info: GraphQLResolveInfo, name: string): boolean {
  const argument = info.fieldNodes[0]?.arguments?.find((node) => node.name.value === name);
  return argument?.value.kind === Kind.VARIABLE;
}

/**
 * Whether the upstream accepts `key` now: one availability call on the platform group (401 for a key not valid for the
 * platform).
 */
async function accepted(ctx: GraphQLContext, key: string): Promise<boolean> {
  try {
    await ctx.services.upstream.platform.availability(key);
    return true;
  } catch (error) {
    if (error instanceof UnauthenticatedError) return false;
    throw error;
  }
}

builder.mutationField('linkMerchantKey', (t) =>
  t.field({
    type: MerchantKeyLinkRef,
    nullable: false,
    description:
      "After a key rotation: makes the caller's key (the new one) and previousKey one merchant's keys, while the delivery service still accepts both. The key with nothing of its own yet (no booking, idempotency key or linked key: the new one, in a rotation) joins the merchant of the other, whichever of the two calls, and nothing moves: that merchant's deliveries, idempotency keys (a retry with the new key books nothing new) and deliveryEvents cursors answer to both keys from then on. When both keys have deliveries or idempotency keys of their own, nothing is linked (KeyLinkRefusedError): only the facade's operator merges two merchants. Proof is holding both keys: each is checked with the delivery service. A previous key already revoked is linked by the facade's operator (docs/operations.md).",
    errors: {
      types: [KeyLinkRefusedError],
      result: { description: 'The keys are linked.' },
      union: { description: 'The link, or why none was made.' },
      dataField: { description: 'The link.' },
    },
    args: {
      previousKey: t.arg.string({
        required: true,
        description:
          'The merchant key used before this one, passed as a variable (never written into the query text, which may be cached). It is checked with the delivery service, never stored or logged.',
      }),
    },
    resolve: async (_root, { previousKey }, ctx, info) => {
      const key = ctx.requireMerchantKey();
      if (!passedAsVariable(info, 'previousKey'))
        throw new BadUserInputError(
          'Pass previousKey as a variable: a key written into the query text may be kept in document caches. Nothing was linked.',
        );
      if (previousKey === key)
        throw new KeyLinkRefusedError("previousKey is the caller's own key: nothing was linked.");
      // A key not accepted yet costs the address a try, as it would sent as a credential.
      const wait = (await ctx.limits?.chargeKeyTry(previousKey, ctx.clientAddress)) ?? 0;
      if (wait > 0)
        throw new RateLimitedError(
          wait,
          'Too many keys the delivery service has not accepted were tried from this address; slow down.',
        );
      const [callerAccepted, previousAccepted] = await Promise.all([accepted(ctx, key), accepted(ctx, previousKey)]);
      if (!callerAccepted) throw new UnauthenticatedError('The delivery service refused the merchant key.');
      if (!previousAccepted) throw new KeyLinkRefusedError(REFUSED);
      const { outcome } = await ctx.services.merchants.link(hashKey(key), hashKey(previousKey));
      if (outcome === 'refused') throw new KeyLinkRefusedError(BOTH_HAVE_HISTORY);
      return { linked: outcome === 'linked' };
    },
  }),
);
