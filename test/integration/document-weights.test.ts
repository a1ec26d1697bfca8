// Issue 29, "weigh what is held, not an estimate": what the shared document
// cache counts for an entry (and so what GRAPHQL_CACHE_BYTES bounds) is the heap
// the entry holds, for every shape of document, whoever sent it. Measured in a
// child process with --expose-gc (test/helpers/document-heap.ts): a real stack,
// real requests, the heap's growth against the cache's count. Compiles are let
// through here (GRAPHQL_COMPILE_MAX_FIELDS and the budget raised) so that the
// executors graphql-jit makes for large documents are weighed too: issue 29's
// fragment-heavy document held 7.5 MB compiled where the cache counted 0.39.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { PersistedQueriesMeasure, ShapeMeasure, ShapeRun } from '../helpers/document-heap.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HARNESS = fileURLToPath(new URL('../helpers/document-heap.ts', import.meta.url));

/** The harness's answer, run in a child process of its own with --expose-gc. */
async function harness<T>(request: object): Promise<T> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', HARNESS, JSON.stringify(request)],
    {
      cwd: ROOT,
      maxBuffer: 1 << 20,
      timeout: 240_000,
    },
  );
  return JSON.parse(stdout.trim().split('\n').pop()!) as T;
}

const measure = (shapes: ShapeRun[], env: Record<string, string>) => harness<ShapeMeasure[]>({ shapes, env });

const describeEntry = (m: ShapeMeasure) =>
  `${m.shape} from a ${m.caller}, ${m.entries} entries (${m.compiled} compiled): held ${Math.round(m.held / m.entries)} B each, counted ${Math.round(m.counted / m.entries)}`;

describe('the document cache weighs what each entry holds', () => {
  it(
    'counts at least 90 % (and at most 150 %) of the heap its entries hold: plain, wide and fragment-heavy documents, compiled or not, invalid ones',
    { timeout: 300_000 },
    async () => {
      const measures = await measure(
        [
          { shape: 'plain', count: 60, runs: 3, caller: 'merchant' },
          { shape: 'wide', count: 8, runs: 3, caller: 'merchant' },
          { shape: 'fragment-heavy', count: 6, runs: 3, caller: 'merchant' },
          { shape: 'fragment-heavy', count: 20, runs: 3, caller: 'client-token' },
          { shape: 'invalid', count: 60, runs: 2, caller: 'merchant' },
        ],
        {
          GRAPHQL_CACHE_BYTES: '4000000000',
          GRAPHQL_COMPILE_MAX_FIELDS: '100000',
          GRAPHQL_COMPILES_PER_MINUTE: '100000',
        },
      );
      // Every shape at once, so that a failure names them all.
      const outside = measures
        .filter((m) => !(m.counted >= 0.9 * m.held && m.counted <= 1.5 * m.held))
        .map(describeEntry);
      expect(outside).toEqual([]);
      for (const m of measures) {
        // Every document stayed cached (nothing evicted), and the accepted key's valid ones compiled.
        expect(m.entries, describeEntry(m)).toBe(m.count);
        if (m.caller === 'merchant' && m.shape !== 'invalid') expect(m.compiled, describeEntry(m)).toBe(m.count);
      }
    },
  );

  it(
    'weighs each automatic persisted query by its hash and its text as V8 holds them, not by its length',
    { timeout: 120_000 },
    async () => {
      const measures = await harness<PersistedQueriesMeasure[]>({
        persistedQueries: [
          { count: 5_000, length: 40 },
          { count: 3_000, length: 1_000 },
          { count: 1_000, length: 16_000 },
        ],
      });
      const outside = measures
        .filter((m) => !(m.counted >= 0.9 * m.held && m.counted <= 1.5 * m.held))
        .map((m) => `${m.count} queries of ${m.length} characters: held ${m.held}, counted ${m.counted}`);
      expect(outside).toEqual([]);
    },
  );
});
