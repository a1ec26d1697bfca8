// The live tracking page served at `/`: book a sandbox delivery or open a uid,
// then follow it through graphql-ws, the same subscriptions any client uses
// (deliveryUpdated for the timeline, courierLocation for the pin). Bundled by
// esbuild when the facade first serves it (src/web/page.ts); nothing loads from
// anywhere but the facade. This file wires the page: the forms, the link it was
// opened with, and a client token's view.
import { book } from './booking.js';
import { clientToken, uidFromHash } from './credentials.js';
import { TOKEN_SCOPE } from './operations.js';
import { dropClient, execute } from './socket.js';
import { open, stopTracking, trackedUid } from './tracking.js';
import { meta, say, setConnection, ui } from './ui.js';
import './app.css';

/** With a client token: no key, no booking; the token's deliveries only. */
async function openWithToken(): Promise<void> {
  ui.keyForm.hidden = true;
  ui.keyHint.hidden = true;
  ui.bookForm.hidden = true;
  ui.openForm.hidden = true;
  document.body.dataset.mode = 'token';
  // The sandbox's demo key has no place on a customer's page: not even in the head. Nor has a developer's tool.
  document.querySelector('meta[name="dg-sandbox-key"]')?.remove();
  document.querySelector('#graphiql-link')?.remove();
  say('Opening the tracking link…');
  let scope: { uids: string[]; expiresAt: string } | null;
  try {
    scope = (await execute<{ clientToken: { uids: string[]; expiresAt: string } | null }>(TOKEN_SCOPE, {})).clientToken;
  } catch (error) {
    return say(`This tracking link cannot be opened: ${(error as Error).message}`, 'error');
  }
  if (!scope || scope.uids.length === 0) return say('This tracking link names no delivery.', 'error');
  // Several deliveries: the uid in the fragment if the token has it, else the first; a chooser for the rest.
  if (scope.uids.length > 1) {
    ui.openForm.hidden = false;
    ui.uidInput.setAttribute('list', 'token-uids');
    const list = document.createElement('datalist');
    list.id = 'token-uids';
    for (const uid of scope.uids) list.append(Object.assign(document.createElement('option'), { value: uid }));
    ui.openForm.append(list);
  }
  const wanted = uidFromHash();
  await open(scope.uids.includes(wanted) ? wanted : scope.uids[0]!);
}

const sandboxKey = clientToken ? '' : meta('dg-sandbox-key');
if (sandboxKey) ui.keyInput.value = sandboxKey;
ui.bookForm.hidden = !sandboxKey;

ui.bookForm.addEventListener('submit', (event) => {
  event.preventDefault();
  void book();
});
ui.openForm.addEventListener('submit', (event) => {
  event.preventDefault();
  void open(ui.uidInput.value.trim());
});
ui.keyInput.addEventListener('change', () => {
  stopTracking();
  dropClient();
  setConnection('none');
});

window.addEventListener('hashchange', () => {
  const uid = uidFromHash();
  if (uid && uid !== trackedUid()) void open(uid);
});
setConnection('none');
// GraphiQL (when the server has it on) is for the merchant's view only.
if (!clientToken) document.querySelector('#graphiql-link')?.removeAttribute('hidden');
if (clientToken) {
  if (location.search.includes('token=')) history.replaceState(null, '', `${location.pathname}#token=${clientToken}`);
  void openWithToken();
} else if (uidFromHash()) void open(uidFromHash());
else
  say(
    sandboxKey
      ? 'Book a sandbox delivery, or enter the uid of one to follow.'
      : 'Enter your merchant key and the uid of a delivery to follow.',
  );
document.body.dataset.ready = 'true';
