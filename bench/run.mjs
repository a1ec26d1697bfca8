// Runs every benchmark scenario (or those named) and records each in BENCHMARKS.md,
// then prints the Goals table (kept at the top of BENCHMARKS.md).
// Usage: npm run bench [-- --quick] [-- --profile[=dir]] [-- scenario ...]
// The soaks run only when named: npm run bench -- soak --duration=60m (see scenarios/soak.mjs).
// anonymous-flood takes --duration, --facade=<other checkout>, --heap and more (see attacks/anonymous-flood.mjs);
// token-flood takes --baseline=<other checkout>, --duration, --rate, --heap and more (see attacks/token-flood.mjs).
// keyless-flood takes --baseline=<other checkout>, --duration and more (see attacks/keyless-flood.mjs).
// connection-caps, keepalive-webhook and idle-headers take --baseline=<checkout with dist/ built>: its build runs
// beside this one, in the same table (see attacks/front-door.mjs).
// view-reads takes --baseline=<checkout> too ((a) and (b) on its build after this one's).
// single-read, realtime, realtime-redis and fan-out take --baseline=<checkout> (its build side by side); the realtime
// ones take --subscribers, --per-delivery, --rate and more (see scenarios/realtime.mjs); realtime-scale and
// realtime-redis-scale are their 10,000- and 20,000-subscriber variants, realtime-one the common case (one
// subscriber per delivery, 1,000 webhooks/s); --perf writes where their CPU goes (Linux perf).
// --profile (or BENCH_PROFILE=<dir>): every facade started runs under --cpu-prof and
// writes a .cpuprofile into the directory (bench/profiles/ by default, not committed) when it stops.
import path from 'node:path';
import { singleRead } from './scenarios/single-read.mjs';
import { batchRead } from './scenarios/batch-read.mjs';
import { viewReads } from './scenarios/view-reads.mjs';
import {
  realtime,
  realtimeOne,
  realtimeScale,
  realtimeRedis,
  realtimeRedisScale,
  redisReplicaAck,
  fanOut,
} from './scenarios/realtime.mjs';
import { startup } from './scenarios/startup.mjs';
import { reconcile } from './scenarios/reconcile.mjs';
import { soak, soakRedis } from './scenarios/soak.mjs';
import { anonymousFlood } from './attacks/anonymous-flood.mjs';
import { tokenFlood } from './attacks/token-flood.mjs';
import { keylessFlood } from './attacks/keyless-flood.mjs';
import { connectionCaps, idleHeaders, keptAliveWebhook } from './attacks/front-door.mjs';
import { ScenarioSkipped } from './lib/contenders.mjs';
import { BENCH } from './lib/proc.mjs';
import { printGoals } from './lib/report.mjs';

const SCENARIOS = {
  'single-read': singleRead,
  'batch-read': batchRead,
  'view-reads': viewReads,
  realtime,
  'realtime-one': realtimeOne,
  'realtime-redis': realtimeRedis,
  'fan-out': fanOut,
  startup,
  reconcile,
  'anonymous-flood': anonymousFlood,
  'connection-caps': connectionCaps,
  'keepalive-webhook': keptAliveWebhook,
  'idle-headers': idleHeaders,
  'token-flood': tokenFlood,
  'keyless-flood': keylessFlood,
};
/** Too long for every run (and for CI): only when named. */
const ON_DEMAND = {
  soak,
  'soak-redis': soakRedis,
  'redis-replica-ack': redisReplicaAck,
  'realtime-scale': realtimeScale,
  'realtime-redis-scale': realtimeRedisScale,
};
const args = process.argv.slice(2);
const quick = args.includes('--quick');
// --name=value flags, for the scenarios that take them.
const flags = Object.fromEntries(
  args.filter((arg) => /^--[\w-]+=/.test(arg)).map((arg) => arg.slice(2).split(/=(.*)/s, 2)),
);
// --perf (the realtime scenarios): where each facade's CPU goes, sampled by Linux perf (bench/lib/perf.mjs).
if (args.includes('--perf')) flags.perf = 'on';
const chosen = args.filter((arg) => !arg.startsWith('--'));
const unknown = chosen.filter((name) => !(name in SCENARIOS) && !(name in ON_DEMAND));
if (unknown.length > 0) {
  console.error(
    `unknown scenario(s): ${unknown.join(', ')}; known: ${[...Object.keys(SCENARIOS), ...Object.keys(ON_DEMAND)].join(', ')}`,
  );
  process.exit(2);
}
if (args.includes('--profile') || flags.profile)
  process.env.BENCH_PROFILE = flags.profile ?? path.join(BENCH, 'profiles');
if (process.env.BENCH_PROFILE)
  console.log(`CPU profiles of the facade into ${path.resolve(process.env.BENCH_PROFILE)}`);
const command = `npm run bench${args.length ? ` -- ${args.join(' ')}` : ''}`;
for (const name of chosen.length ? chosen : Object.keys(SCENARIOS)) {
  console.log(`\n== ${name}${quick ? ' (quick)' : ''}`);
  try {
    await (SCENARIOS[name] ?? ON_DEMAND[name])({ quick, command, flags });
  } catch (error) {
    if (!(error instanceof ScenarioSkipped)) throw error;
    console.log(`skipped ${name}: ${error.message}`);
  }
}
printGoals({ quick });
