// The client address that limits per address are kept for: the socket's peer,
// or X-Forwarded-For read from the right as far as TRUST_PROXY says, never
// further; and IPv6 addresses grouped by their /64.
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import {
  addressGroup,
  clientAddress,
  normalizeAddress,
  UNKNOWN_ADDRESS,
} from '../../src/observability/client-address.js';
import { loadConfig } from '../../src/config.js';

/** A request as Node gives it: the peer on the socket, X-Forwarded-For as one joined header. */
function request(peer: string | undefined, forwardedFor?: string): Pick<IncomingMessage, 'headers' | 'socket'> {
  return {
    socket: { remoteAddress: peer } as IncomingMessage['socket'],
    headers: forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor },
  };
}

describe('clientAddress', () => {
  it('is the socket peer when no proxy is trusted, whatever X-Forwarded-For says', () => {
    expect(clientAddress(request('198.51.100.7', '203.0.113.1'), 0)).toBe('198.51.100.7');
    expect(clientAddress(request('::ffff:198.51.100.7'), 0)).toBe('198.51.100.7');
    expect(clientAddress(request('2001:DB8::1'), 0)).toBe('2001:db8::1');
  });

  it('behind one proxy is the entry that proxy appended, not what the client wrote before it', () => {
    // The client forged "203.0.113.66"; the proxy (10.0.0.2, the peer) appended the address it heard from.
    expect(clientAddress(request('10.0.0.2', '203.0.113.66, 198.51.100.7'), 1)).toBe('198.51.100.7');
    expect(clientAddress(request('10.0.0.2', '198.51.100.7'), 1)).toBe('198.51.100.7');
  });

  it('behind N proxies is the address N hops left of the peer', () => {
    const req = request('10.0.0.3', '203.0.113.66, 198.51.100.7, 10.0.0.2');
    expect(clientAddress(req, 2)).toBe('198.51.100.7');
    expect(clientAddress(req, 1)).toBe('10.0.0.2');
    expect(clientAddress(req, 0)).toBe('10.0.0.3');
  });

  it('takes the leftmost entry when the header is shorter than the hops, and the peer when there is none', () => {
    expect(clientAddress(request('10.0.0.3', '198.51.100.7'), 3)).toBe('198.51.100.7');
    expect(clientAddress(request('10.0.0.3'), 2)).toBe('10.0.0.3');
  });

  it('skips an entry that is not an address for the next one to its right', () => {
    expect(clientAddress(request('10.0.0.2', '198.51.100.9, unknown'), 1)).toBe('10.0.0.2');
    expect(clientAddress(request('10.0.0.2', 'x, 198.51.100.9'), 2)).toBe('198.51.100.9');
  });

  it('reads ports, brackets and zones off the entries', () => {
    expect(clientAddress(request('10.0.0.2', '198.51.100.7:51234'), 1)).toBe('198.51.100.7');
    expect(clientAddress(request('10.0.0.2', '[2001:db8::7]:443'), 1)).toBe('2001:db8::7');
    expect(normalizeAddress('fe80::1%eth0')).toBe('fe80::1');
    expect(normalizeAddress('not an address')).toBeUndefined();
  });

  it('is "unknown" without a request (in-process calls) or without a peer', () => {
    expect(clientAddress(undefined, 0)).toBe(UNKNOWN_ADDRESS);
    expect(clientAddress(request(undefined), 0)).toBe(UNKNOWN_ADDRESS);
  });

  it('follows TRUST_PROXY as config parses it', () => {
    const req = request('10.0.0.3', '203.0.113.66, 198.51.100.7, 10.0.0.2');
    const hops = (value: string | undefined) =>
      loadConfig(value === undefined ? {} : { TRUST_PROXY: value }).server.trustProxyHops;
    expect(clientAddress(req, hops(undefined))).toBe('10.0.0.3');
    expect(clientAddress(req, hops('false'))).toBe('10.0.0.3');
    expect(clientAddress(req, hops('true'))).toBe('10.0.0.2');
    expect(clientAddress(req, hops('2'))).toBe('198.51.100.7');
  });
});

describe('addressGroup', () => {
  it('keeps an IPv4 address as it is', () => {
    expect(addressGroup('198.51.100.7')).toBe('198.51.100.7');
  });

  it('puts every address of one IPv6 /64 in one group, and other /64s in others', () => {
    const group = addressGroup('2001:db8:0:42::1');
    expect(group).toBe('2001:db8:0:42::/64');
    expect(addressGroup('2001:0db8:0000:0042:ffff:1234:5678:9abc')).toBe(group);
    expect(addressGroup('2001:db8:0:43::1')).not.toBe(group);
    expect(addressGroup('::1')).toBe('0:0:0:0::/64');
    expect(addressGroup('64:ff9b::198.51.100.7')).toBe('64:ff9b:0:0::/64');
  });
});
