// The embedded store's file is checked before anything uses it. A file SQLite
// cannot read whole (pages overwritten, cut short, not a database at all) would
// otherwise start, answer /ready, and fail later on the pages it cannot read (a
// replay, a trim); an empty file where a store was kept would silently begin a
// new event log, and every cursor and record of the old one would be gone.
// Either stops the start with one line naming the file and what to do; a
// damage met later (a read or write SQLite finds corrupt) fails /ready with the
// same line (SqliteStore.ping).
import { statSync } from 'node:fs';
import type Database from 'better-sqlite3';
import type { Logger } from '../logger.js';

/** The store file cannot be used as it is; the message names it and what to do. */
export class StoreFileError extends Error {
  override name = 'StoreFileError';
}

/** SQLite's answers for a file whose content it cannot read as a database. */
const DAMAGE_CODES: ReadonlySet<string> = new Set(['SQLITE_CORRUPT', 'SQLITE_NOTADB']);

export function isDamage(error: unknown): error is Error {
  return error instanceof Error && DAMAGE_CODES.has((error as { code?: string }).code ?? '');
}

const HELP = 'docs/operations.md, "A damaged store file"';

/** The one line for a damaged file: what SQLite said, and how to get a usable file back. */
export function damagedFileMessage(file: string, reason: string): string {
  const recovered = `${file}.recovered`;
  return (
    `${file} is damaged (${reason}). Stop every process on it and keep a copy of it and its -wal, then restore a backup, ` +
    `or recover what SQLite can still read (sqlite3 ${file} .recover | sqlite3 ${recovered}) and put ${recovered} in its place (${HELP})`
  );
}

export interface StoreFileFacts {
  /** The file was not there before this open: SQLite has just created it, empty. */
  created: boolean;
  /** The data folder's lock file was there before this start: a store has been kept here. */
  heldBefore: boolean;
  /** The lock file, named in the message. */
  lockFile: string;
}

/**
 * Checks the just-opened file before the store writes anything to it: throws
 * StoreFileError when it is damaged, or empty where a store was kept. An empty
 * file in a folder that never held one is a new store; a missing file where one
 * was kept (deleted on purpose, to start anew) is a new store too, and says so.
 *
 * Damage is found with SQLite's `PRAGMA quick_check`: it reads every page and
 * checks each b-tree's structure, which is what a replay or a trim would trip
 * on, in about 0.8 s for a 950 MB file (a warm page cache; the 2.9 s of
 * integrity_check buy only the cross-check of indexes against their tables).
 */
export function checkStoreFile(db: Database.Database, facts: StoreFileFacts, logger: Logger | undefined): void {
  const file = db.name;
  try {
    const tables = db.prepare<[], number>("SELECT count(*) FROM sqlite_master WHERE type = 'table'").pluck().get()!;
    if (tables === 0) {
      if (!facts.heldBefore) return;
      if (facts.created) {
        logger?.warn(
          { file, lockFile: facts.lockFile },
          'the store file is missing from a data folder that held one: a new, empty event log starts',
        );
        return;
      }
      throw new StoreFileError(
        `${file} is empty (${statSync(file).size} bytes, no tables), but ${facts.lockFile} shows a store was kept in this folder: starting would begin a new, empty event log, so nothing was changed. ` +
          `Restore the file from a backup, or delete it to start a new log on purpose (${HELP})`,
      );
    }
    // The first problem is enough to refuse the file; listing more would read no faster.
    const verdict = db.pragma('quick_check(1)', { simple: true }) as string;
    if (verdict !== 'ok') {
      // SQLite heads the list with the database's name on a line of its own: one line, the problems themselves.
      const problems = verdict.split('\n').filter((line) => !line.startsWith('*** in database'));
      throw new StoreFileError(damagedFileMessage(file, `quick_check: ${problems.join('; ')}`));
    }
  } catch (error) {
    if (isDamage(error)) throw new StoreFileError(damagedFileMessage(file, error.message));
    throw error;
  }
}
