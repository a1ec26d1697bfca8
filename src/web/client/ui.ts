// The page's elements, the message line and the connection indicator.

function element<T extends Element>(selector: string): T {
  const found = document.querySelector<T>(selector);
  if (!found) throw new Error(`the page has no ${selector}`);
  return found;
}
export const meta = (name: string) => document.querySelector<HTMLMetaElement>(`meta[name="${name}"]`)?.content ?? '';

export const ui = {
  keyForm: element<HTMLFormElement>('#key-form'),
  keyHint: element<HTMLElement>('#key-hint'),
  keyInput: element<HTMLInputElement>('#key'),
  bookForm: element<HTMLFormElement>('#book-form'),
  bookButton: element<HTMLButtonElement>('#book'),
  openForm: element<HTMLFormElement>('#open-form'),
  uidInput: element<HTMLInputElement>('#uid-input'),
  message: element<HTMLElement>('#message'),
  connection: element<HTMLElement>('#connection'),
  tracker: element<HTMLElement>('#tracker'),
  map: element<SVGSVGElement>('#map'),
  timeline: element<HTMLOListElement>('#timeline'),
  facts: {
    uid: element<HTMLElement>('#fact-uid'),
    status: element<HTMLElement>('#fact-status'),
    courier: element<HTMLElement>('#fact-courier'),
    left: element<HTMLElement>('#fact-left'),
    eta: element<HTMLElement>('#fact-eta'),
  },
};

export function say(text: string, tone: 'info' | 'error' | 'done' = 'info'): void {
  ui.message.textContent = text;
  ui.message.dataset.tone = tone;
}

/**
 * The socket's state, top right. "offline" only once a connection was tried and is down: before
 * anything is followed (or after the key changed) the page is simply not following anything.
 */
const CONNECTION_TEXT = {
  none: 'not following',
  connecting: 'connecting…',
  live: 'live',
  idle: 'idle',
  closed: 'offline',
} as const;

export function setConnection(state: keyof typeof CONNECTION_TEXT, detail = ''): void {
  ui.connection.dataset.state = state;
  ui.connection.textContent = detail ? `${CONNECTION_TEXT[state]} (${detail})` : CONNECTION_TEXT[state];
}
