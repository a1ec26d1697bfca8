// A CPU profile of the facade serving the single read alone: the fixed upstream,
// one facade under --cpu-prof, a warm-up, then `--seconds` (default 15) at 32
// connections, every request a fresh uid. Prints req/s and the CPU per read, and
// where the .cpuprofile is. Usage: node bench/probes/profile-read.mjs [--seconds=15] [--dir=bench/profiles]
import path from 'node:path';
import { startFacade, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter } from '../lib/cpu.mjs';
import { BENCH } from '../lib/proc.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { facadeReadLoad, probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const seconds = Number(flags.seconds ?? 15);
process.env.BENCH_PROFILE = flags.dir ?? path.join(BENCH, 'profiles');
const upstream = await startUpstream();
const facade = await startFacade(upstream.url, { label: 'profile-read', entry: flags.entry, cwd: flags.cwd });
const http = forkWorker('http-load');
const request = facadeReadLoad(facade.origin);
await http.call('autocannon', { ...request, duration: 3 });
const cpu = cpuMeter([{ name: 'facade', pid: facade.child.pid }]);
const result = await http.call('autocannon', { ...request, duration: seconds });
const used = cpu.stop();
console.log(
  `${Math.round(result.rps)} req/s, errors ${result.errors + (result.non2xx ?? 0)}, CPU ${Math.round(used.byName.facade)} % of a core, ${Math.round(((used.byName.facade / 100) * 1e6) / result.rps)} us per read`,
);
await http.stop();
await facade.stop();
upstream.child.kill();
process.exit(0);
