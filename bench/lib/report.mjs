// Prints a scenario's table and writes it into BENCHMARKS.md between markers,
// with the date, the machine and the exact command; keeps the Goals table at the
// top of BENCHMARKS.md in step with the recorded sections.
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from './proc.mjs';

const FILE = path.join(ROOT, 'BENCHMARKS.md');
const RESULTS = path.join(ROOT, 'bench/results');

/** The goals, in the order of the table; each measured by one scenario and recorded in its section. */
export const GOALS = [
  { id: 'read-vs-proxy', what: 'single read, throughput vs a plain undici reverse proxy', goal: '≥ 0.70×' },
  {
    id: 'read-cpu-vs-proxy',
    what: 'single read, CPU per read against a plain undici reverse proxy (at max throughput)',
    goal: '≤ 1.8×',
  },
  { id: 'read-vs-mesh', what: 'single read, throughput vs Mesh on Hive Gateway', goal: '≥ 7×' },
  { id: 'read-added-p99', what: 'single read, added p99 at 200 req/s over a direct GET', goal: '≤ +2 ms' },
  { id: 'loop-single-read', what: 'single read at 200 req/s: event-loop delay max (from /metrics)', goal: '≤ 10 ms' },
  {
    id: 'view-polling',
    what: 'reads from the view: a polling backend (1,000 deliveries, a webhook every 5 s each, all read every 10 s), upstream GETs per 1,000 reads',
    goal: '≤ 50',
  },
  {
    id: 'view-delivered',
    what: 'reads from the view: delivered deliveries re-read after their confirming read',
    goal: '0 GETs',
  },
  { id: 'view-cpu', what: "CPU per read from the view vs a reverse proxy's per proxied read", goal: '≤ 0.8×' },
  { id: 'view-p99', what: 'p99 of a read from the view at 200 req/s', goal: '≤ 2 ms' },
  {
    id: 'realtime',
    what: 'webhook → subscriber, one instance (SQLite), 500 events/s, 1,000 subscribers (10 per delivery), warmed',
    goal: 'p99 ≤ 10 ms in every run, 0 lost',
  },
  { id: 'realtime-cpu', what: 'CPU per delivered message in that run (the facade, all threads)', goal: '≤ 80 µs' },
  { id: 'loop-realtime', what: 'event-loop delay max during that run', goal: '≤ 10 ms' },
  { id: 'ingest', what: 'max verified-and-stored events/s, one instance (SQLite)', goal: '≥ 8,000' },
  {
    id: 'realtime-one',
    what: 'webhook → subscriber, one instance (SQLite), 1,000 events/s, 1,000 subscribers (one per delivery: the tracking page), warmed',
    goal: 'p99 ≤ 20 ms, 0 lost, ≤ 200 µs per message',
  },
  { id: 'loop-realtime-one', what: 'event-loop delay max during that run', goal: '≤ 10 ms' },
  {
    id: 'realtime-scale',
    what: 'webhook → subscriber, one instance (SQLite), 100 events/s, 10,000 subscribers (100 per delivery)',
    goal: 'p99 ≤ 50 ms, 0 lost, ≤ 45 µs per message',
  },
  { id: 'loop-realtime-scale', what: 'event-loop delay max during that run', goal: '≤ 10 ms' },
  {
    id: 'realtime-redis',
    what: 'same realtime run, two instances on Redis (appendonly yes, appendfsync always), webhooks to A, subscribers on B',
    goal: 'p99 ≤ 15 ms, 0 lost, ≤ 100 µs per message (A + B)',
  },
  { id: 'loop-realtime-redis', what: 'event-loop delay max during that run (either instance)', goal: '≤ 10 ms' },
  { id: 'ingest-redis', what: 'max verified-and-stored events/s on Redis, one instance', goal: '≥ 2,000' },
  {
    id: 'realtime-redis-scale',
    what: 'two instances on Redis, 100 events/s, 20,000 subscribers (half on each, 100 per delivery)',
    goal: 'p99 ≤ 50 ms, 0 lost, ≤ 45 µs per message',
  },
  { id: 'loop-realtime-redis-scale', what: 'event-loop delay max during that run (either instance)', goal: '≤ 10 ms' },
  {
    id: 'anonymous-flood',
    what: 'anonymous flood of distinct ~10 KB, then ~1 MB documents, 60 s each, 12 connections, 50 signed webhooks/s meanwhile (issue 20)',
    goal: 'RSS ≤ start + 150 MiB, /health p99 < 100 ms, every webhook acknowledged',
  },
  {
    id: 'token-flood',
    what: 'one client token sending distinct fragment-heavy documents inside its rate limit for 60 s, a merchant reading at 50/s meanwhile (issue 29)',
    goal: "read p99 ≤ 4× before, RSS ≤ start + 300 MiB, heap within 10 % of the document cache's count",
  },
  {
    id: 'keyless-flood',
    what: "keyless floods, 3 connections each: costly introspection (development), 220-fragment __typename documents and the same with a made-up key (production); a merchant's read at 50/s, 30 s before and during (issue 29)",
    goal: "merchant's read p99 during each ≤ 4× before",
  },
  {
    id: 'connection-caps',
    what: "70 idle connections from one address with MAX_CONNECTIONS=60, with WEBHOOK_PORT and on a shared port: the upstream's webhooks and two merchants on other addresses (issue 29)",
    goal: 'every webhook acknowledged, every read answered',
  },
  {
    id: 'keepalive-webhook',
    what: 'a webhook with a 40 KB token after GET /health or POST /graphql on the same kept-alive connection (issue 29)',
    goal: 'every one stored',
  },
  {
    id: 'idle-headers',
    what: '3,000 idle connections to /graphql holding 12 KiB of headers until the deadline: peak RSS against the --baseline build (issue 37; 200 KiB trickled, with WEBHOOK_PORT and on a shared port, measured beside it)',
    goal: '≤ 1.0×',
  },
];

const NOISE = [
  'Each row comes from one recorded run of the scenario named in the last column (no mixing of runs).',
  'Throughput cells are medians of 3 rounds (the single read alternates its contenders within each round),',
  'with the lowest and highest round: that range is the noise to read them with. Latency cells are',
  'percentiles of one run (the added p99 is the median of 3 rounds of 2,000 requests, with its range; the',
  'realtime p99 is over 100,000 messages). "Other load" is how much of a core the rest of the machine (not',
  "the bench's processes) used meanwhile: the machine has 2 cores, so anything above a few % moves the cell.",
].join('\n');

/** Goal results of this process's scenarios, for the table printed at the end of a quick run. */
const measuredThisRun = [];

/**
 * Whether this run's tables go into BENCHMARKS.md: not for quick runs (CI) nor
 * profiled ones (--cpu-prof slows the facade), unless BENCH_WRITE=1.
 */
const recording = (quick) => (!quick && !process.env.BENCH_PROFILE) || process.env.BENCH_WRITE === '1';

export function machine() {
  return `${os.cpus().length} cores (${os.cpus()[0]?.model.trim() ?? 'unknown CPU'}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}`;
}

export function table(headers, rows) {
  const line = (cells) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map(() => '---')), ...rows.map(line)].join('\n');
}

/**
 * Replaces the scenario's section (between its markers) in BENCHMARKS.md, or
 * appends it. `goals` are its measured goals, [{ id, measured, met }]: kept in
 * the section as a comment, from which the Goals table is rebuilt.
 */
export function writeSection(id, title, body, { command, quick, goals = [] }) {
  const stamp = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const section = [
    `<!-- bench:${id}:start -->`,
    `### ${title}`,
    '',
    `Measured ${stamp} UTC on ${machine()}${quick ? ' — quick mode (a few seconds per run; indicative only)' : ''}${process.env.BENCH_PROFILE ? ' — facade under --cpu-prof' : ''}.`,
    `Command: \`${command}\``,
    '',
    body,
    ...(goals.length ? [`<!-- goals ${JSON.stringify(goals)} -->`] : []),
    `<!-- bench:${id}:end -->`,
  ].join('\n');
  console.log(`\n${section}\n`);
  measuredThisRun.push(...goals.map((goal) => ({ ...goal, from: { id, title, stamp } })));
  if (!recording(quick)) return; // quick and profiled runs print but keep the recorded full results
  let text = existsSync(FILE) ? readFileSync(FILE, 'utf8') : '# Benchmarks\n';
  archive(id, text);
  text = replaceBlock(text, id, section);
  writeFileSync(FILE, replaceBlock(text, 'goals', goalsBlock(recordedGoals(text))));
}

/** The run a new recording replaces goes to bench/results/<id>.md (oldest first): BENCHMARKS.md shows the latest. */
function archive(id, text) {
  const previous = new RegExp(`<!-- bench:${id}:start -->([\\s\\S]*?)<!-- bench:${id}:end -->`).exec(text);
  if (!previous) return;
  const body = previous[1].replace(/^<!-- goals .*-->$/m, '').trim();
  const file = path.join(RESULTS, `${id}.md`);
  mkdirSync(RESULTS, { recursive: true });
  if (!existsSync(file))
    writeFileSync(
      file,
      `# Earlier runs: ${id}\n\nEach run BENCHMARKS.md showed until a newer one replaced it, oldest first.\n`,
    );
  appendFileSync(file, `\n${body}\n`);
}

function replaceBlock(text, id, block) {
  const pattern = new RegExp(`<!-- bench:${id}:start -->[\\s\\S]*?<!-- bench:${id}:end -->`);
  return pattern.test(text) ? text.replace(pattern, () => block) : `${text.trimEnd()}\n\n${block}\n`;
}

/** The goal results kept in BENCHMARKS.md's recorded sections, with the section each came from. */
function recordedGoals(text) {
  const found = [];
  for (const [, id, content] of text.matchAll(/<!-- bench:([\w-]+):start -->([\s\S]*?)<!-- bench:\1:end -->/g)) {
    const goals = /<!-- goals (.*) -->/.exec(content);
    if (!goals) continue;
    const title = /^### (.*)$/m.exec(content)?.[1] ?? id;
    const stamp = /Measured (\S+ \S+) UTC/.exec(content)?.[1] ?? '';
    for (const goal of JSON.parse(goals[1])) found.push({ ...goal, from: { id, title, stamp } });
  }
  return found;
}

/** GitHub's anchor for a heading. */
const anchor = (title) =>
  title
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s-]/gu, '')
    .trim()
    .replace(/\s/g, '-');

function goalsTable(results) {
  return table(
    ['what', 'goal', 'measured', 'status', 'from'],
    GOALS.map(({ id, what, goal }) => {
      const result = results.find((r) => r.id === id);
      if (!result) return [what, goal, 'not recorded yet', '', ''];
      return [
        what,
        goal,
        result.measured,
        result.met ? 'met' : '**not met**',
        `[${result.from.title}](#${anchor(result.from.title)}), ${result.from.stamp} UTC`,
      ];
    }),
  );
}

function goalsBlock(results) {
  return ['<!-- bench:goals:start -->', goalsTable(results), '', NOISE, '<!-- bench:goals:end -->'].join('\n');
}

/**
 * At the end of a run: the Goals table as recorded (full run) or from this run alone (quick or profiled run, not
 * recorded).
 */
export function printGoals({ quick }) {
  const recorded = recording(quick);
  const results = recorded && existsSync(FILE) ? recordedGoals(readFileSync(FILE, 'utf8')) : measuredThisRun;
  console.log(
    `\n== goals (${recorded ? 'as recorded in BENCHMARKS.md' : 'this run alone, not recorded'})\n\n${goalsTable(results)}\n`,
  );
}

export const fmt = (n, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');

/** 5216 → "5,216". */
export const thousands = (n) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
