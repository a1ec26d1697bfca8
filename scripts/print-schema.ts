// Prints schema.graphql from the Pothos code, sorted so the file is stable.
// With --check it writes nothing and fails when the file has drifted.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { lexicographicSortSchema, printSchema } from 'graphql';
import { toSchema } from '../src/graphql/schema.js';

const target = fileURLToPath(new URL('../schema.graphql', import.meta.url));
const printed = `${printSchema(lexicographicSortSchema(toSchema()))}\n`;

if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(target, 'utf8');
  } catch {
    // a missing file is drift too
  }
  if (current !== printed) {
    console.error('schema.graphql is out of date with the Pothos code: run `npm run schema` and commit the result.');
    process.exit(1);
  }
  console.log('schema.graphql is up to date.');
} else {
  writeFileSync(target, printed);
  console.log(`wrote ${target}`);
}
