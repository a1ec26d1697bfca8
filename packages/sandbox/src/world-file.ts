// The sandbox's world on disk (`dataDir`): its deliveries where they stand, their
// webhooks not yet sent and their histories, the revoked keys and how many
// bookings were made, so a sandbox restarted on the same folder goes on where it
// stood (the signing key sits beside it, signing-key.pem). One SQLite file, held
// by one process at a time; changes are written in one transaction a turn of the
// event loop after they happen, and at stop.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { DeliveryRecord, SandboxState } from './state.js';
import type { SandboxMerchant } from './types.js';
import { deriveSeed, seededRandom } from './webhook-script.js';
import type { OutboxSnapshot } from './webhooks.js';

/** The file in `dataDir`. */
export const WORLD_FILE = 'world.sqlite';
/** The signing key's file in `dataDir`, unless the sandbox is given another. */
export const SIGNING_KEY_FILE = 'signing-key.pem';
/** Bumped when what is kept changes shape: a file of another format is refused, not misread. */
const FORMAT = 1;

export class SandboxWorldInUseError extends Error {
  constructor(dataDir: string, pid: number | undefined) {
    super(
      `the sandbox world in ${dataDir} is in use by another process${pid ? ` (pid ${pid})` : ''}: stop that one, or start this one on another folder`,
    );
    this.name = 'SandboxWorldInUseError';
  }
}

/** What a world file gives back at start. */
export interface KeptWorld {
  /** The deliveries, in booking order; those of merchants this sandbox does not have are left out. */
  deliveries: DeliveryRecord[];
  /** Their webhooks, in the order they settled (unsettled last). */
  webhooks: [uid: string, snapshot: OutboxSnapshot][];
  /** Revoked keys among this sandbox's merchants. */
  revokedKeys: string[];
  booked: number;
}

/** Where the world's changes are read from when they are written. */
export interface WorldSources {
  state: SandboxState;
  webhooks(uid: string): OutboxSnapshot | undefined;
}

/** A delivery as kept: the record without its draw function, and the merchant key only as its digest. */
type KeptRecord = Omit<DeliveryRecord, 'random' | 'merchantKey'> & { merchantKeySha256: string };

/** No merchant key is written down: a delivery names its merchant by the key's digest. */
const digest = (key: string) => createHash('sha256').update(key).digest('hex');

export class WorldFile {
  private readonly db: Database.Database;
  private readonly pidFile: string;
  private sources: WorldSources | undefined;
  private readonly dirtyDeliveries = new Set<string>();
  private readonly dirtyWebhooks = new Set<string>();
  private dirtyMeta = false;
  private flushing: NodeJS.Immediate | undefined;

  /** Opens (or creates) the world in `dataDir`; throws SandboxWorldInUseError when another process holds it. */
  constructor(readonly dataDir: string) {
    mkdirSync(dataDir, { recursive: true });
    const file = path.join(dataDir, WORLD_FILE);
    this.pidFile = `${file}.pid`;
    this.db = new Database(file, { timeout: 0 });
    try {
      // The exclusive lock, once taken, is held until close: the operating system lets go of it however the process
      // ends.
      this.db.pragma('locking_mode = EXCLUSIVE');
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = NORMAL');
      this.db.exec('BEGIN EXCLUSIVE; COMMIT');
    } catch (error) {
      this.db.close();
      if ((error as { code?: string }).code !== 'SQLITE_BUSY') throw error;
      throw new SandboxWorldInUseError(dataDir, pidIn(this.pidFile));
    }
    // Only for the message a second process prints: the lock itself is SQLite's.
    writeFileSync(this.pidFile, String(process.pid));
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS deliveries (uid TEXT PRIMARY KEY, record TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS webhooks (uid TEXT PRIMARY KEY, outbox TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS revoked_keys (key_sha256 TEXT PRIMARY KEY);
    `);
    const format = this.meta('format');
    if (format === undefined)
      this.db.prepare('INSERT INTO meta (name, value) VALUES (?, ?)').run('format', String(FORMAT));
    else if (Number(format) !== FORMAT) {
      this.close();
      throw new Error(
        `${file} holds a sandbox world of format ${format}, not ${FORMAT}: move it aside or give the sandbox another folder`,
      );
    }
  }

  /** What was kept, for this sandbox's merchants. */
  load(merchants: readonly SandboxMerchant[]): KeptWorld {
    const keyOf = new Map(merchants.map((m) => [digest(m.key), m.key]));
    const deliveries: DeliveryRecord[] = [];
    for (const row of this.db.prepare('SELECT record FROM deliveries ORDER BY rowid').all() as { record: string }[]) {
      const kept = JSON.parse(row.record) as KeptRecord;
      const merchantKey = keyOf.get(kept.merchantKeySha256);
      // Booked with a key this sandbox no longer has: nobody could read it.
      if (merchantKey !== undefined) deliveries.push(revive(kept, merchantKey));
    }
    const known = new Set(deliveries.map((record) => record.uid));
    const webhooks = (this.db.prepare('SELECT uid, outbox FROM webhooks').all() as { uid: string; outbox: string }[])
      .filter((row) => known.has(row.uid))
      .map((row): [string, OutboxSnapshot] => [row.uid, JSON.parse(row.outbox) as OutboxSnapshot])
      .sort(([, a], [, b]) => (a.settled ?? Infinity) - (b.settled ?? Infinity));
    const revoked = (this.db.prepare('SELECT key_sha256 FROM revoked_keys').all() as { key_sha256: string }[]).flatMap(
      (row) => keyOf.get(row.key_sha256) ?? [],
    );
    return { deliveries, webhooks, revokedKeys: revoked, booked: Number(this.meta('booked') ?? 0) };
  }

  /** From now on, changes marked below are read from these and written. */
  attach(sources: WorldSources): void {
    this.sources = sources;
  }

  /** A delivery changed (booked, moved, canceled, another courier). */
  deliveryChanged(uid: string): void {
    this.dirtyDeliveries.add(uid);
    this.dirtyMeta = true;
    this.schedule();
  }

  /** A delivery's webhooks changed, or were forgotten. */
  webhooksChanged(uid: string): void {
    this.dirtyWebhooks.add(uid);
    this.schedule();
  }

  /** Written at once: a revocation is rare and must not be lost. */
  keyRevoked(key: string): void {
    this.db.prepare('INSERT OR IGNORE INTO revoked_keys (key_sha256) VALUES (?)').run(digest(key));
  }

  /** Writes every pending change now, in one transaction. */
  flush(): void {
    if (this.flushing) clearImmediate(this.flushing);
    this.flushing = undefined;
    const sources = this.sources;
    if (!sources || !this.db.open) return;
    // An upsert keeps a row's rowid: rows stay in the order they were first written, which is booking order.
    const putDelivery = this.db.prepare(
      'INSERT INTO deliveries (uid, record) VALUES (?, ?) ON CONFLICT (uid) DO UPDATE SET record = excluded.record',
    );
    const putWebhooks = this.db.prepare(
      'INSERT INTO webhooks (uid, outbox) VALUES (?, ?) ON CONFLICT (uid) DO UPDATE SET outbox = excluded.outbox',
    );
    const dropWebhooks = this.db.prepare('DELETE FROM webhooks WHERE uid = ?');
    this.db.transaction(() => {
      for (const uid of this.dirtyDeliveries) {
        const record = sources.state.deliveries.get(uid);
        if (record) putDelivery.run(uid, JSON.stringify(keep(record)));
      }
      for (const uid of this.dirtyWebhooks) {
        const snapshot = sources.webhooks(uid);
        if (snapshot) putWebhooks.run(uid, JSON.stringify(snapshot));
        else dropWebhooks.run(uid);
      }
      if (this.dirtyMeta)
        this.db
          .prepare(
            'INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value',
          )
          .run('booked', String(sources.state.booked));
    })();
    this.dirtyDeliveries.clear();
    this.dirtyWebhooks.clear();
    this.dirtyMeta = false;
  }

  /** Writes what is pending and lets go of the file (and its lock). */
  close(): void {
    if (!this.db.open) return;
    this.flush();
    rmSync(this.pidFile, { force: true });
    this.db.close();
  }

  private schedule(): void {
    // A step's events come in one burst: one transaction for all of them.
    this.flushing ??= setImmediate(() => this.flush());
  }

  private meta(name: string): string | undefined {
    return (this.db.prepare('SELECT value FROM meta WHERE name = ?').get(name) as { value: string } | undefined)?.value;
  }
}

function keep(record: DeliveryRecord): KeptRecord {
  const { random: _draws, merchantKey, ...rest } = record;
  return { ...rest, merchantKeySha256: digest(merchantKey) };
}

function revive(kept: KeptRecord, merchantKey: string): DeliveryRecord {
  const { merchantKeySha256: _digest, ...rest } = kept;
  const date = (value: Date) => new Date(value as unknown as string);
  return {
    ...rest,
    merchantKey,
    createdAt: date(kept.createdAt),
    etaAt: date(kept.etaAt),
    canceled: kept.canceled && { ...kept.canceled, at: date(kept.canceled.at) },
    providerCancellation: kept.providerCancellation && {
      ...kept.providerCancellation,
      at: date(kept.providerCancellation.at),
    },
    // Its draws go on from a stream of their own: a restart is not part of a replayed run.
    random: seededRandom(deriveSeed(kept.seed, 'lifecycle after restart')),
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
