// ServiceAvailability and the availability query: both groups, concurrently.
import { DeliveryGraphError, UnauthenticatedError } from '../errors.js';
import type { ApiGroup } from '../mapping/model.js';
import { builder } from './builder.js';
import { ApiGroupEnum } from './enums.js';
import { utcSeconds } from '../mapping/scalars.js';

interface ServiceAvailability {
  group: ApiGroup;
  service: string | null;
  available: boolean;
  checkedAt: string;
  errorCode: string | null;
}

const ServiceAvailabilityRef = builder.objectRef<ServiceAvailability>('ServiceAvailability').implement({
  description: "One endpoint group's liveness, as its availability endpoint reports it.",
  fields: (t) => ({
    group: t.field({ type: ApiGroupEnum, description: 'The endpoint group checked.', resolve: (a) => a.group }),
    service: t.exposeString('service', {
      nullable: true,
      description: 'Name of the service, as the upstream reports it.',
    }),
    available: t.exposeBoolean('available', { description: 'True when the group answered that it is available.' }),
    checkedAt: t.expose('checkedAt', { type: 'DateTime', description: 'When the facade asked.' }),
    errorCode: t.exposeString('errorCode', {
      nullable: true,
      description:
        'Why the group is unavailable when the check itself failed (UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE, UPSTREAM_ERROR, or UNAUTHENTICATED when this group refused the key and the other accepted it); null otherwise.',
    }),
  }),
});

builder.queryField('availability', (t) =>
  t.field({
    type: [ServiceAvailabilityRef],
    description:
      "Both groups' availability, checked concurrently. A group that cannot be reached, or that refuses the key while the other accepts it, reads as unavailable with an errorCode; only a key both groups refuse is an UNAUTHENTICATED error.",
    resolve: async (_root, _args, ctx) => {
      const key = ctx.requireMerchantKey();
      const { upstream } = ctx.services;
      const checks: Array<[ApiGroup, () => Promise<{ service?: unknown; available?: unknown }>]> = [
        ['PLATFORM', () => upstream.platform.availability(key, { signal: ctx.clientGone() })],
        ['PARTNER', () => upstream.partner.availability(key, { signal: ctx.clientGone() })],
      ];
      const results = await Promise.allSettled(checks.map(([, check]) => check()));
      const checkedAt = utcSeconds(new Date());
      // A key neither group accepts is the caller's problem, not the services': say so as an error.
      // A key only one group refuses (a merchant onboarded on one group) is that group's entry.
      const refused = results.filter(
        (result) => result.status === 'rejected' && result.reason instanceof UnauthenticatedError,
      );
      if (refused.length === results.length) throw (refused[0] as PromiseRejectedResult).reason;
      return results.map((result, index): ServiceAvailability => {
        const group = checks[index]![0];
        if (result.status === 'fulfilled') {
          const { service, available } = result.value;
          return {
            group,
            service: typeof service === 'string' ? service : null,
            available: available === true,
            checkedAt,
            errorCode: null,
          };
        }
        const code = result.reason instanceof DeliveryGraphError ? result.reason.code : 'UPSTREAM_ERROR';
        return { group, service: null, available: false, checkedAt, errorCode: code };
      });
    },
  }),
);
