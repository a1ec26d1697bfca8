// Where a facade's main thread spends its busy time, from a V8 CPU profile
// (--cpu-prof): each sample goes to the first part of the webhook's path that
// one of its frames belongs to, from the innermost frame out (a socket write
// made by the ack counts as a write, not as the receiver). Idle samples are left
// out; `skipMs` drops the profile's start (start-up, connecting the fleet).
import { readFileSync } from 'node:fs';

/** The parts, in the order a frame is matched against them. */
export const PARTS = [
  [
    'socket writes (writev: acks and frames)',
    (f) => /^(writev|writeUtf8String|writeBuffer|writeLatin1String)$/.test(f.name),
  ],
  ['garbage collection', (f) => f.name === '(garbage collector)'],
  ['JWT verification (RSA and claims)', (f) => /webhooks\/verify\.js|jose/.test(f.url)],
  [
    'hand-off to the SQLite writer (postMessage, answers)',
    (f) => f.name === 'postMessage' || /store\/sqlite\.js|per_context\/messageport/.test(f.url),
  ],
  [
    'webhook receiver and group commit (body, ack)',
    (f) => /webhooks\/(receiver|group-commit)\.js|_http_outgoing/.test(f.url),
  ],
  [
    'HTTP parsing and the front door',
    (f) =>
      /_http_server|_http_common|_http_incoming|http\/(front|request-framing|server|server-limits)\.js|observability\/request/.test(
        f.url,
      ),
  ],
  [
    'fan-out execution (graphql-js)',
    (f) => /node_modules\/graphql\/|realtime\/fanout\.js|pipeline\/plan\.js/.test(f.url),
  ],
  [
    'frames and WebSocket sends',
    (f) => /realtime\/frames\.js|http\/ws\.js|node_modules\/(ws|graphql-ws)\//.test(f.url),
  ],
  [
    'publication, streams and queues',
    (f) => /realtime\/(bus|streams|queue|reconcile|access|redis-bus)\.js|graphql-yoga|access\/owners/.test(f.url),
  ],
  ['sockets and streams (net, streams)', (f) => /node:net|internal\/streams|stream_base_commons/.test(f.url)],
];
const OTHER = 'everything else (timers, promises, metrics, logging)';

/** Shares (0–1) of the busy time by part, and the busy ms sampled. */
export function splitProfile(file, { skipMs = 0 } = {}) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const partOf = new Map();
  const classify = (id) => {
    if (partOf.has(id)) return partOf.get(id);
    let found = OTHER;
    for (let at = id; at !== undefined; at = parent.get(at)) {
      const { functionName: name, url } = byId.get(at).callFrame;
      const hit = PARTS.find(([, match]) => match({ name, url }));
      if (hit) {
        found = hit[0];
        break;
      }
    }
    partOf.set(id, found);
    return found;
  };
  const busy = new Map();
  let total = 0;
  let at = profile.startTime;
  for (let index = 0; index < profile.samples.length; index += 1) {
    at += profile.timeDeltas[index];
    if ((at - profile.startTime) / 1000 < skipMs) continue;
    const id = profile.samples[index];
    const name = byId.get(id).callFrame.functionName;
    if (name === '(idle)' || name === '(program)') continue;
    const us = profile.timeDeltas[index + 1] ?? profile.timeDeltas[index];
    const part = classify(id);
    busy.set(part, (busy.get(part) ?? 0) + us);
    total += us;
  }
  const shares = Object.fromEntries(
    [...PARTS.map(([name]) => name), OTHER].map((name) => [name, (busy.get(name) ?? 0) / total]),
  );
  return { shares, busyMs: total / 1000 };
}
