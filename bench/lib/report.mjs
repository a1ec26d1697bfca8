// Prints a scenario's table and writes it into BENCHMARKS.md between markers,
// with the date, the machine and the exact command.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from './proc.mjs';

const FILE = path.join(ROOT, 'BENCHMARKS.md');

export function machine() {
  return `${os.cpus().length} cores (${os.cpus()[0]?.model.trim() ?? 'unknown CPU'}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}`;
}

export function table(headers, rows) {
  const line = (cells) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map(() => '---')), ...rows.map(line)].join('\n');
}

/** Replaces the scenario's section (between its markers) in BENCHMARKS.md, or appends it. */
export function writeSection(id, title, body, { command, quick }) {
  const stamp = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const section = [
    `<!-- bench:${id}:start -->`,
    `### ${title}`,
    '',
    `Measured ${stamp} UTC on ${machine()}${quick ? ' — quick mode (a few seconds per run; indicative only)' : ''}.`,
    `Command: \`${command}\``,
    '',
    body,
    `<!-- bench:${id}:end -->`,
  ].join('\n');
  console.log(`\n${section}\n`);
  if (quick && process.env.BENCH_WRITE !== '1') return; // quick runs (CI) print but keep the recorded full results
  let text = existsSync(FILE) ? readFileSync(FILE, 'utf8') : '# Benchmarks\n';
  const pattern = new RegExp(`<!-- bench:${id}:start -->[\\s\\S]*?<!-- bench:${id}:end -->`);
  text = pattern.test(text) ? text.replace(pattern, section) : `${text.trimEnd()}\n\n${section}\n`;
  writeFileSync(FILE, text);
}

export const fmt = (n, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
