// One process per SQLite file. Two processes on one DATA_DIR would each keep
// their own view of it (owner records and live events in memory), so a
// subscriber on one would hear nothing the other stored. The lock is an SQLite
// file of its own held in an exclusive transaction for the life of the store:
// the operating system's file lock behind it is released when the process
// ends, however it ends, so a crashed process never blocks the next start.
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';

export class DataDirInUseError extends Error {
  constructor(dataDir: string, pid: number | undefined) {
    super(
      `DATA_DIR=${dataDir} is in use by another delivery-graph process${pid ? ` (pid ${pid})` : ''}: ` +
        'give this one another DATA_DIR, or set REDIS_URL on every instance to run several on one store.',
    );
    this.name = 'DataDirInUseError';
  }
}

export interface DataDirLock {
  /** The lock file, which stays when the lock is released. */
  file: string;
  /** The lock file was there before: a store has been opened in this folder. */
  existed: boolean;
  release(): void;
}

/** Takes the lock of `file` (the store's file), or throws DataDirInUseError naming `dataDir`. */
export function lockDataDir(dataDir: string, file: string): DataDirLock {
  const lockFile = `${file}.lock`;
  const pidFile = `${lockFile}.pid`;
  const existed = existsSync(lockFile);
  const db = new Database(lockFile, { timeout: 0 });
  try {
    db.exec('BEGIN EXCLUSIVE');
  } catch (error) {
    db.close();
    if ((error as { code?: string }).code !== 'SQLITE_BUSY') throw error;
    throw new DataDirInUseError(dataDir, pidIn(pidFile));
  }
  // Only for the message a second process prints: the lock itself is the transaction.
  writeFileSync(pidFile, String(process.pid));
  return {
    file: lockFile,
    existed,
    release() {
      if (!db.open) return;
      rmSync(pidFile, { force: true });
      db.close();
    },
  };
}

function pidIn(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
