// Runs every benchmark scenario (or those named) and records each in BENCHMARKS.md.
// Usage: npm run bench [-- --quick] [-- scenario ...]
// The soaks run only when named: npm run bench -- soak --duration=60m (see scenarios/soak.mjs).
import { singleRead } from './scenarios/single-read.mjs';
import { batchRead } from './scenarios/batch-read.mjs';
import { realtime, realtimeRedis, fanOut } from './scenarios/realtime.mjs';
import { startup } from './scenarios/startup.mjs';
import { soak, soakRedis } from './scenarios/soak.mjs';
import { ScenarioSkipped } from './lib/contenders.mjs';

const SCENARIOS = { 'single-read': singleRead, 'batch-read': batchRead, realtime, 'realtime-redis': realtimeRedis, 'fan-out': fanOut, startup };
/** Too long for every run (and for CI): only when named. */
const ON_DEMAND = { soak, 'soak-redis': soakRedis };
const args = process.argv.slice(2);
const quick = args.includes('--quick');
// --name=value flags, for the scenarios that take them (the soaks).
const flags = Object.fromEntries(args.filter((arg) => /^--[\w-]+=/.test(arg)).map((arg) => arg.slice(2).split(/=(.*)/s, 2)));
const chosen = args.filter((arg) => !arg.startsWith('--'));
const unknown = chosen.filter((name) => !(name in SCENARIOS) && !(name in ON_DEMAND));
if (unknown.length > 0) {
  console.error(`unknown scenario(s): ${unknown.join(', ')}; known: ${[...Object.keys(SCENARIOS), ...Object.keys(ON_DEMAND)].join(', ')}`);
  process.exit(2);
}
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
