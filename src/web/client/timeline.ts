// The facts (status, courier, distance left, expected dropoff) and the timeline of milestones, each with when it was
// reached.
import { distanceMeters, formatDistance } from './map.js';
import { LABELS, MILESTONES, rank, TERMINAL } from './milestones.js';
import type { Tracking } from './tracking-state.js';
import { ui } from './ui.js';

export function render(state: Tracking): void {
  ui.facts.uid.textContent = state.uid;
  ui.facts.status.textContent = LABELS[state.status] ?? state.status;
  ui.facts.status.dataset.status = state.status;
  ui.facts.courier.textContent = state.courierName ?? '—';
  ui.facts.left.textContent =
    state.status === 'DROPOFF_COMPLETE'
      ? 'arrived'
      : state.courier && state.dropoff
        ? formatDistance(distanceMeters(state.courier, state.dropoff))
        : '—';
  const current = rank(state.status);
  const offPath = !MILESTONES.includes(state.status as never);
  // No dropoff time once the delivery is over or has left the way to the dropoff (a failure, a return).
  ui.facts.eta.textContent =
    state.estimatedDropoffAt && !TERMINAL.has(state.status) && !offPath ? clock(state.estimatedDropoffAt) : '—';
  // Off the way to the dropoff, every step taken is shown in order: e.g. failed, being returned, returned.
  const detour = [...state.reached.keys()].filter((status) => !MILESTONES.includes(status as never));
  if (offPath && !detour.includes(state.status)) detour.push(state.status);
  const steps: string[] = [...MILESTONES, ...detour];
  ui.timeline.replaceChildren(
    ...steps.map((status, index) => {
      const item = document.createElement('li');
      item.dataset.status = status;
      const seen = state.reached.get(status);
      const done = status === state.status || (index <= current && current >= 0) || (offPath && seen !== undefined);
      item.className = status === state.status ? 'current done' : done ? 'done' : 'pending';
      if (offPath && status === state.status) item.classList.add('off-path');
      const label = document.createElement('span');
      label.className = 'label';
      label.textContent = LABELS[status] ?? status;
      const time = document.createElement('time');
      if (seen) {
        time.dateTime = seen.at;
        time.textContent = clock(seen.at);
      }
      item.append(label, time);
      if (seen?.text && !sameWords(seen.text, status) && !sameWords(seen.text, LABELS[status] ?? '')) {
        const text = document.createElement('span');
        text.className = 'text';
        text.textContent = seen.text;
        item.append(text);
      }
      return item;
    }),
  );
}

/** "Pickup Enroute" says nothing PICKUP_ENROUTE does not; only other words from the upstream are shown. */
function sameWords(text: string, status: string): boolean {
  const letters = (value: string) => value.toLowerCase().replace(/[^a-z]/g, '');
  return letters(text) === letters(status);
}

export function clock(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleTimeString();
}
