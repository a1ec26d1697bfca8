// Where the 2 cores went during a measurement: the CPU time each of our
// processes used (from /proc/<pid>/stat) and the machine's in all (/proc/stat),
// so a table can say how much was the contender, how much the load processes,
// and how much something else on the machine (CI, other work) took.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

const TICK_MS = 1000 / (Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100);

/** CPU time (user + system) the process has used so far, in ms. */
export function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // After "pid (name) ": state is field 3, utime and stime fields 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
}

/** CPU time every core of the machine has spent busy so far, in ms. */
function machineBusyMs() {
  const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = ticks;
  return (user + nice + system + irq + softirq + steal) * TICK_MS;
}

/**
 * Starts counting for the named processes ({ name, pid }); `stop()` returns each
 * one's share of one core over the interval, the machine's busy share (up to
 * 100 × cores), and what the rest of the machine used beyond our processes
 * (this orchestrator included among ours).
 */
export function cpuMeter(processes) {
  const ours = [...processes, { name: 'orchestrator', pid: process.pid }];
  const start = ours.map(({ pid }) => cpuMs(pid));
  const machineStart = machineBusyMs();
  const started = performance.now();
  return {
    stop() {
      const wall = performance.now() - started;
      const used = ours.map(({ pid }, k) => cpuMs(pid) - start[k]);
      const share = (ms) => (100 * ms) / wall;
      const machine = share(machineBusyMs() - machineStart);
      return {
        byName: Object.fromEntries(processes.map(({ name }, k) => [name, share(used[k])])),
        /** CPU time each used over the interval, ms (all its threads). */
        msByName: Object.fromEntries(processes.map(({ name }, k) => [name, used[k]])),
        wallMs: wall,
        machine,
        others: Math.max(0, machine - share(used.reduce((sum, ms) => sum + ms, 0))),
      };
    },
  };
}

/** "facade 96 %, subscribers 41 %, …; machine 178 % of 200 %, of which 12 % not ours". */
export function describeCpu({ byName, machine, others }, cores) {
  const each = Object.entries(byName).map(([name, pct]) => `${name} ${Math.round(pct)} %`);
  return `${each.join(', ')}; machine ${Math.round(machine)} % of ${cores * 100} %, of which ${Math.round(others)} % not ours`;
}

/** CPU time (ms) and file writes (bytes handed to storage, write syscalls) of each thread of the process so far. */
function threadUsage(pid) {
  const used = new Map();
  let tids = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return used;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const io = readFileSync(`/proc/${pid}/task/${tid}/io`, 'utf8');
      const count = (name) => Number(new RegExp(`^${name}: (\\d+)`, 'm').exec(io)?.[1] ?? 0);
      used.set(Number(tid), {
        ms: (Number(fields[11]) + Number(fields[12])) * TICK_MS,
        writes: count('write_bytes') + count('syscw'),
      });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return used;
}

/**
 * Starts counting one process's CPU by thread; `stop()` returns the ms its main
 * thread used, the ms of the SQLite writer thread (the thread other than the
 * main one that wrote most to files meanwhile; 0 when none did: on Redis there
 * is none), and the ms of all the rest (V8's helpers: GC marking, compiling;
 * libuv's pool).
 */
export function threadMeter(pid) {
  const start = threadUsage(pid);
  return {
    stop() {
      const used = [...threadUsage(pid)].map(([tid, { ms, writes }]) => {
        const before = start.get(tid) ?? { ms: 0, writes: 0 };
        return { tid, ms: ms - before.ms, writes: writes - before.writes };
      });
      const main = used.find(({ tid }) => tid === pid)?.ms ?? 0;
      const others = used.filter(({ tid }) => tid !== pid).sort((a, b) => b.writes - a.writes);
      const writer = others[0]?.writes > 0 ? others[0] : undefined;
      const rest = others.filter((t) => t !== writer).reduce((sum, t) => sum + t.ms, 0);
      return { main, writer: writer?.ms ?? 0, writerTid: writer?.tid, rest };
    },
  };
}
