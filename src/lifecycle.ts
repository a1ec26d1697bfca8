// What startApp opened, closed in reverse order: on a graceful stop, and when a
// later step of start-up fails (a busy port, Redis not answering), so a failed
// start leaves no sandbox, store or socket behind. One close that throws does not
// keep the others from running.
import type { Logger } from './logger.js';

export class Teardown {
  readonly #steps: Array<{ name: string; close: () => unknown }> = [];

  /** Registers how to close something that was just opened. */
  add(name: string, close: () => unknown): void {
    this.#steps.push({ name, close });
  }

  /** Closes everything registered, newest first; every step runs, failures are logged and then thrown together. */
  async run(logger: Logger): Promise<void> {
    const failures: unknown[] = [];
    for (const { name, close } of this.#steps.splice(0).reverse()) {
      try {
        await close();
      } catch (error) {
        logger.warn({ err: error, part: name }, 'did not close cleanly');
        failures.push(error);
      }
    }
    if (failures.length > 0) throw new AggregateError(failures, `${failures.length} part(s) did not close cleanly`);
  }
}
