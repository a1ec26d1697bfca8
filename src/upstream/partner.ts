// Client of the partner endpoint group, directly under {base_url}.
import type { UpstreamHttp } from './http.js';
import { referenceSegment, requireData, uidSegment, type CallOptions } from './platform.js';
import type {
  WireAvailability,
  WireDeliveryRequest,
  WireOrder,
  WirePartnerCancellation,
  WireQuoteResult,
} from './wire.js';

export class PartnerClient {
  readonly #http: UpstreamHttp;

  constructor(http: UpstreamHttp) {
    this.#http = http;
  }

  quote(key: string, body: WireDeliveryRequest, options: CallOptions = {}): Promise<WireQuoteResult> {
    return this.#http.call({
      group: 'partner',
      method: 'POST',
      path: '/quote',
      route: '/quote',
      key,
      body,
      ...options,
    });
  }

  async getOrder(key: string, uid: string, options: CallOptions = {}): Promise<WireOrder> {
    const result = await this.#http.call<{ data?: WireOrder }>({
      group: 'partner',
      method: 'GET',
      path: `/orders/${uidSegment(uid)}`,
      route: '/orders/{uid}',
      key,
      ...options,
    });
    return requireData(result, 'GET /orders/{uid}');
  }

  async getOrderByReference(key: string, partnerReference: string, options: CallOptions = {}): Promise<WireOrder> {
    const result = await this.#http.call<{ data?: WireOrder }>({
      group: 'partner',
      method: 'GET',
      path: `/orders/partner/${referenceSegment(partnerReference)}`,
      route: '/orders/partner/{partner_reference}',
      key,
      ...options,
    });
    return requireData(result, 'GET /orders/partner/{partner_reference}');
  }

  async cancel(key: string, uid: string, options: CallOptions = {}): Promise<WirePartnerCancellation> {
    return this.#http.call({
      group: 'partner',
      method: 'POST',
      path: `/orders/${uidSegment(uid)}/cancel`,
      route: '/orders/{uid}/cancel',
      key,
      cancel: true,
      ...options,
    });
  }

  availability(key: string, options: CallOptions = {}): Promise<WireAvailability> {
    return this.#http.call({
      group: 'partner',
      method: 'GET',
      path: '/availability',
      route: '/availability',
      key,
      ...options,
    });
  }
}
