// Who may use the /sandbox control routes. On loopback with no token they are open (tests, `npm start` on a
// laptop); beyond loopback they need the control token; in production nothing they could change is theirs.
import { createHash, timingSafeEqual } from 'node:crypto';
import { BlockList, isIP } from 'node:net';

/** The header a control request carries the token in (Authorization holds merchant keys on some routes). */
export const CONTROL_TOKEN_HEADER = 'sandbox-control-token';
/** Shorter control tokens are refused: beyond loopback the token is all that guards the simulator's controls. */
export const MIN_CONTROL_TOKEN_LENGTH = 16;

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');

/** Whether a listen address reaches this machine alone: 127.0.0.0/8, ::1 or localhost. Any other name is not. */
export function isLoopbackHost(host: string): boolean {
  const address = host.replace(/^\[(.*)\]$/, '$1');
  if (address.toLowerCase() === 'localhost') return true;
  const family = isIP(address);
  return family !== 0 && LOOPBACK.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

/** Refuses, before anything is opened, a token too weak to guard anything and a listener beyond loopback without one. */
export function checkControlOptions(host: string, token: string | undefined): void {
  if (token !== undefined) {
    if (/\s/.test(token)) throw new RangeError('controlToken must not contain whitespace');
    if (token.length < MIN_CONTROL_TOKEN_LENGTH)
      throw new RangeError(
        `controlToken is ${token.length} characters; at least ${MIN_CONTROL_TOKEN_LENGTH} are required`,
      );
  }
  if (token === undefined && !isLoopbackHost(host))
    throw new RangeError(
      `the sandbox would listen on ${host}, beyond loopback, with its control routes open: give it a controlToken, or listen on 127.0.0.1`,
    );
}

/** Compares in constant time: both sides are hashed first, so neither the content nor the length leaks. */
export function tokenMatches(expected: string, given: string | string[] | undefined): boolean {
  if (typeof given !== 'string') return false;
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(expected), digest(given));
}
