// Who is asking, for limits kept per client address. Without proxies it is the
// socket's peer. Behind N proxies that each append the address they heard from
// to X-Forwarded-For, it is the address N hops from the right of
// [...X-Forwarded-For, socket peer]: whatever lies further left was written by
// the client itself and proves nothing. Every transport (the direct JSON path,
// yoga's handler, SSE, WebSocket) has the Node request, so all use this.
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';

/** The address of a request that came without a socket (in-process `yoga.fetch`). */
export const UNKNOWN_ADDRESS = 'unknown';

/** A literal IP address as one spelling: no brackets, port or zone; IPv4-mapped IPv6 as IPv4; lower case. */
export function normalizeAddress(raw: string | undefined): string | undefined {
  if (!raw) return undefined;
  let value = raw.trim();
  // "[2001:db8::1]:443" or "[2001:db8::1]"
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(value);
  if (bracketed) value = bracketed[1]!;
  // "203.0.113.7:5678": one colon can only be an IPv4 address with a port.
  else if (/^[\d.]+:\d+$/.test(value)) value = value.slice(0, value.indexOf(':'));
  const zone = value.indexOf('%');
  if (zone >= 0) value = value.slice(0, zone);
  value = value.toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(value);
  if (mapped) value = mapped[1]!;
  return isIP(value) === 0 ? undefined : value;
}

/**
 * The client's address: the socket's peer when `trustProxyHops` is 0, else the
 * entry `trustProxyHops` places left of the peer in X-Forwarded-For (the
 * leftmost when the header has fewer). An entry that is not an address is
 * skipped for the next one to its right, which a more trusted hop wrote.
 */
export function clientAddress(
  req: Pick<IncomingMessage, 'headers' | 'socket'> | undefined,
  trustProxyHops: number,
): string {
  const peer = normalizeAddress(req?.socket?.remoteAddress);
  if (!req || trustProxyHops <= 0) return peer ?? UNKNOWN_ADDRESS;
  const header = req.headers['x-forwarded-for'];
  // Node joins repeated X-Forwarded-For headers with ", " in arrival order.
  const forwarded = (Array.isArray(header) ? header.join(',') : (header ?? ''))
    .split(',')
    .filter((entry) => entry.trim() !== '');
  const hops = [...forwarded, req.socket?.remoteAddress ?? ''];
  for (let index = Math.max(0, hops.length - 1 - trustProxyHops); index < hops.length; index += 1) {
    const address = normalizeAddress(hops[index]);
    if (address) return address;
  }
  return UNKNOWN_ADDRESS;
}

/**
 * What one budget is kept for: an IPv4 address, or the /64 network of an IPv6
 * address (one subscriber usually holds a whole /64, so single IPv6 addresses
 * would give it unlimited fresh budgets).
 */
export function addressGroup(address: string): string {
  if (isIP(address) !== 6) return address;
  return `${expandIpv6(address).slice(0, 4).join(':')}::/64`;
}

/** The eight 16-bit groups of an IPv6 address, without leading zeros. */
function expandIpv6(address: string): string[] {
  const [head = '', tail] = address.split('::', 2) as [string, string | undefined];
  const groupsOf = (part: string): string[] => {
    if (part === '') return [];
    const pieces = part.split(':');
    const last = pieces[pieces.length - 1]!;
    // An embedded IPv4 tail (64:ff9b::192.0.2.1) is two groups.
    if (last.includes('.')) {
      const [a, b, c, d] = last.split('.').map(Number) as [number, number, number, number];
      pieces.splice(-1, 1, ((a << 8) | b).toString(16), ((c << 8) | d).toString(16));
    }
    return pieces.map((piece) => Number.parseInt(piece, 16).toString(16));
  };
  const left = groupsOf(head);
  const right = tail === undefined ? [] : groupsOf(tail);
  const zeros = Array.from({ length: Math.max(0, 8 - left.length - right.length) }, () => '0');
  return [...left, ...zeros, ...right];
}
