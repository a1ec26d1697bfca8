// Any process 'warning' (MaxListenersExceededWarning, a deprecation, an experimental
// feature) fails the test file it happened in: `npm test` prints no warning line.
// Registered for the unit and integration tiers in vitest.config.ts. Nothing is
// excused here; a warning that is legitimate would be named below with its reason.
import { afterAll } from 'vitest';

const seen: string[] = [];
const record = (warning: Error) => {
  seen.push(`${warning.name}: ${warning.message}`);
};
process.on('warning', record);

afterAll(async () => {
  // Node emits a warning on the next tick: let the last one arrive.
  await new Promise((resolve) => setImmediate(resolve));
  process.off('warning', record);
  if (seen.length) {
    const lines = seen.splice(0);
    throw new Error(`the process warned ${lines.length} time(s) in this file:\n${lines.join('\n')}`);
  }
});
