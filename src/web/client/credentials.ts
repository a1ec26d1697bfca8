// Whose view the page shows: a client token from the link it was opened with, or the merchant key typed in; and the
// uid a link names.
import { ui } from './ui.js';

/**
 * A client token, from a link a merchant handed out: `/?token=…` or `/#token=…`.
 * It is moved into the fragment at once, which the browser never sends, so it
 * does not linger in server logs, proxies or a Referer (the page sends none anyway).
 */
function tokenFromLocation(): string {
  const fromQuery = new URLSearchParams(location.search).get('token')?.trim();
  const fromHash = new URLSearchParams(location.hash.slice(1)).get('token')?.trim();
  return fromQuery || fromHash || '';
}
export const clientToken = tokenFromLocation();

/** The credential the socket opens with: the page's client token when it was opened with one, else the key typed in. */
export function currentKey(): string {
  return clientToken || ui.keyInput.value.trim();
}

/** The uid the link names (`#uid=…`), or nothing. */
export function uidFromHash(): string {
  return new URLSearchParams(location.hash.slice(1)).get('uid')?.trim() ?? '';
}
