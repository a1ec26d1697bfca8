// Prints the tables of docs/ that the code decides (scripts/docs/tables.ts) into their pages.
// With --check it writes nothing and fails when a page's table has drifted.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { GENERATED_TABLES, withTable } from './docs/tables.js';

const check = process.argv.includes('--check');
let drifted = false;
for (const table of GENERATED_TABLES) {
  const file = fileURLToPath(new URL(`../${table.page}`, import.meta.url));
  const current = readFileSync(file, 'utf8');
  const printed = withTable(current, table);
  if (printed === current) continue;
  if (check) {
    console.error(`${table.page}: its table is out of date with the code: run \`npm run docs\` and commit the result.`);
    drifted = true;
  } else {
    writeFileSync(file, printed);
    console.log(`wrote ${table.page}`);
  }
}
if (drifted) process.exit(1);
