// Where a facade's CPU goes, over all its threads, sampled by Linux perf
// (`perf record -e cpu-clock -g`: on-CPU time only, unlike V8's profiler, which
// samples wall time and so charges a thread's waits to whatever it was in).
// The facade runs with --perf-basic-prof, so its JIT frames carry their names.
// Each sample goes to the first part of the webhook's path one of its frames
// belongs to, from the innermost frame out (a socket write made by the ack is a
// socket write, not the receiver); the shares are then scaled to the CPU the
// process used per message, read from /proc (perf drops some samples).
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';

/** Whether `perf record` works here (installed, and allowed to sample a process). */
export function perfAvailable() {
  const probe = spawnSync('perf', ['record', '-e', 'cpu-clock', '-o', '/dev/null', '--', 'true'], { stdio: 'ignore' });
  return probe.status === 0;
}

/** Starts sampling every thread of `pid` into `file`; `stop()` ends it once the file is written. */
export function startPerf(pid, file) {
  const child = spawn('perf', ['record', '-e', 'cpu-clock', '-F', '1999', '-g', '-p', String(pid), '-o', file], {
    stdio: 'ignore',
  });
  return {
    async stop() {
      child.kill('SIGINT');
      if (child.exitCode === null) await once(child, 'exit');
    },
  };
}

/** The parts of the path, each with how its frames are recognised; matched in this order for each frame. */
const KERNEL_WRITE = /(^|\b)(__x64_sys_writev|__x64_sys_write|do_writev|tcp_sendmsg|sock_write_iter)\b/;
const KERNEL_READ = /(^|\b)(__x64_sys_read|tcp_recvmsg|sock_read_iter|__x64_sys_recvfrom)\b/;
const KERNEL_WAIT = /(^|\b)(__x64_sys_epoll_pwait|do_epoll_wait|__x64_sys_futex|finish_task_switch|__schedule)\b/;
const KERNEL_FSYNC = /(^|\b)(__x64_sys_fsync|__x64_sys_fdatasync|ext4_sync_file|jbd2_|blkdev_issue_flush)/;
const KERNEL_FILE = /(^|\b)(__x64_sys_pwrite64|__x64_sys_pread64|__x64_sys_lseek|__x64_sys_fcntl|ext4_)/;
export const PARTS = [
  [
    'JWT verification (RSA, claims)',
    (f) => /webhooks\/verify\.js|^bn_|^__bn_|^rsa_|RSA_|EVP_DigestVerify|jose/.test(f),
  ],
  ['socket writes (kernel: loopback TCP)', (f) => KERNEL_WRITE.test(f)],
  ['socket reads (kernel)', (f) => KERNEL_READ.test(f)],
  ['fsync (kernel)', (f) => KERNEL_FSYNC.test(f)],
  ['file reads and writes (kernel)', (f) => KERNEL_FILE.test(f)],
  ['waiting and scheduling (kernel: epoll, futex, switches)', (f) => KERNEL_WAIT.test(f)],
  [
    'garbage collection',
    (f) =>
      /v8::internal::(Scavenger|Heap::|MarkCompact|ConcurrentMarking|Sweeper|MinorMarkCompact|IncrementalMarking)|ScavengeObject|MarkingVisitor/.test(
        f,
      ),
  ],
  ['compiling (V8)', (f) => /v8::internal::(compiler|baseline|Compiler|Parser|maglev)|Builtins_CompileLazy/.test(f)],
  ['SQLite (statements, commit)', (f) => /sqlite3|better_sqlite3|better-sqlite3|Statement::JS_|Database::JS_/.test(f)],
  [
    'store writes in JS (JSON, hashing, judging, the view)',
    (f) =>
      /store\/sqlite-(append|records|writer)\.js|domain\/(canonical-json|milestones|delivery-view|status)\.js/.test(f),
  ],
  [
    'hand-off between threads (postMessage, answers)',
    (f) => /MessagePort|postMessage|store\/sqlite\.js|messageport/.test(f),
  ],
  [
    'webhook receiver and group commit (body, ack)',
    (f) => /webhooks\/(receiver|group-commit)\.js|_http_outgoing/.test(f),
  ],
  [
    'HTTP parsing and the front door',
    (f) =>
      /llhttp|node::\(anonymous namespace\)::Parser|_http_server|_http_common|_http_incoming|http\/(front|request-framing|server|server-limits)\.js|observability\/request/.test(
        f,
      ),
  ],
  ['fan-out execution (graphql-js)', (f) => /node_modules\/graphql\/|realtime\/fanout\.js|pipeline\/plan\.js/.test(f)],
  ['frames and WebSocket sends', (f) => /realtime\/frames\.js|http\/ws\.js|node_modules\/(ws|graphql-ws)\//.test(f)],
  [
    'publication, streams and queues',
    (f) =>
      /realtime\/(bus|streams|queue|reconcile|access|redis-bus)\.js|graphql-yoga|access\/owners|guards\/key-refusal/.test(
        f,
      ),
  ],
  [
    'sockets and streams (net, streams)',
    (f) => /node:net|internal\/streams|stream_base_commons|StreamBase|LibuvStreamWrap/.test(f),
  ],
];
export const OTHER = 'everything else (timers, promises, metrics, event loop)';

/** The frames of each sample of a `perf script` text, by thread. */
function* samplesOf(text) {
  let tid;
  let frames = [];
  for (const line of text.split('\n')) {
    if (line.length === 0) {
      if (tid !== undefined) yield { tid, frames };
      tid = undefined;
      frames = [];
    } else if (line[0] !== '\t') {
      tid = Number(line.trim().split(/\s+/)[0]);
    } else {
      const symbol = line.trim().replace(/^[0-9a-f]+\s+/, '');
      frames.push(symbol);
    }
  }
  if (tid !== undefined) yield { tid, frames };
}

/** Sample counts by part, for the main thread (tid = pid), the writer thread (`writerTid`, if any) and the rest. */
export function splitPerf(file, pid, writerTid) {
  const script = spawnSync('perf', ['script', '-i', file, '-F', 'tid,ip,sym'], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  const byThread = new Map();
  for (const { tid, frames } of samplesOf(script.stdout)) {
    let part = OTHER;
    for (const frame of frames) {
      const hit = PARTS.find(([, match]) => match(frame));
      if (hit) {
        part = hit[0];
        break;
      }
    }
    const counts = byThread.get(tid) ?? new Map();
    counts.set(part, (counts.get(part) ?? 0) + 1);
    byThread.set(tid, counts);
  }
  const others = [...byThread].filter(([tid]) => tid !== pid && tid !== writerTid);
  const merge = (list) => {
    const merged = new Map();
    for (const [, counts] of list) for (const [part, n] of counts) merged.set(part, (merged.get(part) ?? 0) + n);
    return merged;
  };
  return { main: byThread.get(pid) ?? new Map(), writer: byThread.get(writerTid) ?? new Map(), rest: merge(others) };
}

/**
 * µs per message by thread and part: each thread's samples scaled to the µs that thread used per message
 * (`perMessage`: { main, writer, rest }, from /proc).
 */
export function microsecondsByPart(split, perMessage) {
  const out = {};
  for (const thread of ['main', 'writer', 'rest']) {
    const counts = split[thread];
    const total = [...counts.values()].reduce((sum, n) => sum + n, 0);
    out[thread] = Object.fromEntries(
      [...counts].map(([part, n]) => [part, total ? (n / total) * perMessage[thread] : 0]),
    );
  }
  return out;
}
