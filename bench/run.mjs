// Runs every benchmark scenario (or those named) and records each in BENCHMARKS.md.
// Usage: npm run bench [-- --quick] [-- scenario ...]
import { singleRead } from './scenarios/single-read.mjs';
import { batchRead } from './scenarios/batch-read.mjs';
import { realtime, realtimeRedis, fanOut } from './scenarios/realtime.mjs';
import { startup } from './scenarios/startup.mjs';
import { ScenarioSkipped } from './lib/contenders.mjs';

const SCENARIOS = { 'single-read': singleRead, 'batch-read': batchRead, realtime, 'realtime-redis': realtimeRedis, 'fan-out': fanOut, startup };
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const chosen = args.filter((arg) => !arg.startsWith('--'));
const unknown = chosen.filter((name) => !(name in SCENARIOS));
if (unknown.length > 0) {
  console.error(`unknown scenario(s): ${unknown.join(', ')}; known: ${Object.keys(SCENARIOS).join(', ')}`);
  process.exit(2);
}
const command = `npm run bench${args.length ? ` -- ${args.join(' ')}` : ''}`;
for (const name of chosen.length ? chosen : Object.keys(SCENARIOS)) {
  console.log(`\n== ${name}${quick ? ' (quick)' : ''}`);
  try {
    await SCENARIOS[name]({ quick, command });
  } catch (error) {
    if (!(error instanceof ScenarioSkipped)) throw error;
    console.log(`skipped ${name}: ${error.message}`);
  }
}
