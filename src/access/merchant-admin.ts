// What an operator does for merchants (`npm run merchant -- <command>`,
// scripts/merchant.ts): link a key whose previous key is already revoked (so
// linkMerchantKey cannot be given it), merge two merchants that both have
// history (which a link refuses), undo a link, claim for a merchant a
// delivery booked outside the facade that nothing a merchant can read proves
// (a platform-group delivery on a platform-scoped upstream), and show what is
// recorded. The operator's word is the proof: these commands are for the
// people who run the facade, never exposed to merchants. Keys are read from
// standard input, one a line, never from the command line (argv is visible to
// every process and kept in shell histories); hashes and uids may be arguments.
import { hashKey } from '../domain/merchant-key.js';
import { uidRefusal } from '../domain/uid.js';
import type { OwnerGroup, Store } from '../store/store.js';
import { MERCHANT_CACHE_MS, Merchants } from './merchants.js';

export const MERCHANT_USAGE = `npm run merchant -- <command> [--flag=value ...]   (keys on standard input, one a line; never as arguments)

  hash                             prints the hash of the key read from standard input (what --*-key-hash takes)
  link [--old-key-hash=HEX]        makes the new key a key of the old key's merchant. Reads the new key from standard
                                   input (and first, the old key, when --old-key-hash is not given); the new key must
                                   be accepted by the upstream now. For an old key already revoked: with both still
                                   valid, the merchant calls linkMerchantKey itself. Moves nothing: refused when both
                                   keys have deliveries or idempotency keys of their own (see merge)
  merge --key-hash=HEX --into-key-hash=HEX
                                   makes the merchant of the first key part of the merchant of the second, both with
                                   history: moves its owner records and idempotency claims; its cursors are not valid
                                   after. Run it again ${MERCHANT_CACHE_MS / 1000} s later to move what running instances wrote meanwhile
  unlink --key-hash=HEX            undoes the link of that key: it is a merchant of its own again, with nothing (what it
                                   booked while linked stays with the merchant it was linked to: claim gives it back)
  show [--key-hash=HEX]            prints the merchant id of that key (or of the key on standard input)
  owner --uid=UID                  prints the merchant id recorded for a delivery, and how it was proven
  claim --uid=UID [--group=PLATFORM|PARTNER] [--key-hash=HEX]
                                   records the delivery as the merchant's (the key on standard input when no
                                   --key-hash), replacing any record: for deliveries booked outside the facade`;

/** What the command needs: the store, and (for link) the upstream's word on a key. */
export interface MerchantAdminDeps {
  store: Store;
  /**
   * Whether the upstream accepts the key now; undefined: no upstream to ask (then link refuses unless --unverified).
   */
  accepts?: (key: string) => Promise<boolean>;
}

export interface MerchantAdminResult {
  /** The process's exit code: 0 done, 1 refused, 2 misused. */
  code: number;
  lines: string[];
}

const HASH = /^[0-9a-f]{64}$/;

/** One command's call: its flags, the keys read from standard input, and the merchants it works on. */
interface Invocation {
  flags: ReadonlyMap<string, string>;
  keys: readonly string[];
  merchants: Merchants;
  deps: MerchantAdminDeps;
}

type Command = (call: Invocation) => MerchantAdminResult | Promise<MerchantAdminResult>;

/** Runs one command with its flags and the text of standard input. */
export async function merchantCommand(
  argv: readonly string[],
  input: string,
  deps: MerchantAdminDeps,
): Promise<MerchantAdminResult> {
  const [command, ...rest] = argv;
  const flags = new Map<string, string>();
  for (const arg of rest) {
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match)
      return misuse(`unexpected argument: ${arg.startsWith('sk_') ? '(a key? keys go on standard input)' : arg}`);
    flags.set(match[1]!, match[2] ?? '');
  }
  const keys = input
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '');
  const merchants = new Merchants(deps.store, { cacheMs: 0 });
  const run = command === undefined ? undefined : COMMANDS.get(command);
  if (!run) return misuse(command === undefined ? 'no command' : `unknown command: ${command}`);
  return run({ flags, keys, merchants, deps });
}

/** --name's key hash: undefined when not given, an Error when it is not one. */
function hashFlag(flags: ReadonlyMap<string, string>, name: string): string | undefined | Error {
  const value = flags.get(name);
  if (value === undefined) return undefined;
  return HASH.test(value)
    ? value
    : new Error(`--${name} takes 64 lowercase hex characters (npm run merchant -- hash prints one)`);
}

function printHash({ keys }: Invocation): MerchantAdminResult {
  if (keys.length !== 1) return misuse('hash reads one key from standard input');
  return done(hashKey(keys[0]!));
}

async function linkKey({ flags, keys, merchants, deps }: Invocation): Promise<MerchantAdminResult> {
  const oldHash = hashFlag(flags, 'old-key-hash');
  if (oldHash instanceof Error) return misuse(oldHash.message);
  const expected = oldHash ? 1 : 2;
  if (keys.length !== expected)
    return misuse(
      oldHash
        ? 'link reads the new key from standard input'
        : 'link reads two keys from standard input: the old one, then the new one',
    );
  const newKey = keys[expected - 1]!;
  const from = oldHash ?? hashKey(keys[0]!);
  if (from === hashKey(newKey)) return refused('the old and the new key are the same key');
  if (!deps.accepts) {
    if (!flags.has('unverified'))
      return refused('no UPSTREAM_URL to check the new key with; pass --unverified to link it unchecked');
  } else if (!(await deps.accepts(newKey)))
    return refused('the upstream does not accept the new key: nothing was linked');
  const link = await merchants.link(hashKey(newKey), from);
  if (link.outcome === 'refused') {
    return refused(
      `both keys have deliveries or idempotency keys of their own, and a link moves nothing: if they are one merchant's, merge them (npm run merchant -- merge --key-hash=${hashKey(newKey)} --into-key-hash=${from})`,
    );
  }
  return done(
    link.outcome === 'linked'
      ? `linked: the new key is a key of merchant ${link.merchant}`
      : `nothing to do: the keys are merchant ${link.merchant}'s already`,
  );
}

async function mergeMerchants({ flags, merchants }: Invocation): Promise<MerchantAdminResult> {
  const from = hashFlag(flags, 'key-hash');
  const into = hashFlag(flags, 'into-key-hash');
  if (from instanceof Error) return misuse(from.message);
  if (into instanceof Error) return misuse(into.message);
  if (!from || !into) return misuse('merge needs --key-hash and --into-key-hash');
  const merge = await merchants.merge(from, into);
  const moved = `moved ${merge.records} owner records and ${merge.claims} idempotency claims${merge.conflicts > 0 ? ` (${merge.conflicts} idempotency keys both had used: merchant ${merge.merchant}'s claims kept, the others dropped)` : ''}`;
  if (!merge.merged)
    return done(
      `nothing to link: the keys are merchant ${merge.merchant}'s already; ${moved} recorded under its linked ids`,
    );
  return {
    code: 0,
    lines: [
      `merged: merchant ${merge.merged} is part of merchant ${merge.merchant} now; ${moved}`,
      `cursors given to its keys are not valid any more; run the same command again in ${MERCHANT_CACHE_MS / 1000} s to move what running instances recorded under its id meanwhile`,
    ],
  };
}

async function unlinkKey({ flags, merchants }: Invocation): Promise<MerchantAdminResult> {
  const hash = hashFlag(flags, 'key-hash');
  if (hash instanceof Error) return misuse(hash.message);
  if (!hash) return misuse('unlink needs --key-hash');
  return (await merchants.unlink(hash))
    ? done(
        `unlinked: ${hash} is a merchant of its own again; what it booked while linked stays with the merchant it was linked to (claim hands a delivery back)`,
      )
    : refused(`${hash} has no link`);
}

async function showMerchant({ flags, keys, merchants }: Invocation): Promise<MerchantAdminResult> {
  const hash = keyHashOf(hashFlag(flags, 'key-hash'), keys);
  if (hash instanceof Error) return misuse(hash.message);
  return done(`merchant ${await merchants.rootOf(hash)}`);
}

async function showOwner({ flags, merchants, deps }: Invocation): Promise<MerchantAdminResult> {
  const uid = flags.get('uid');
  const refusal = uid === undefined ? 'owner needs --uid' : uidRefusal(uid, '--uid');
  if (refusal) return misuse(refusal);
  const record = (await deps.store.ownersOf([uid!])).get(uid!);
  if (!record) return refused(`no owner is recorded for ${uid}`);
  return done(
    `merchant ${await merchants.rootOf(record.owner)} (recorded as ${record.owner}; group ${record.group ?? 'unknown'}; proof ${record.proof ?? 'none: recorded before proofs were kept'})`,
  );
}

async function claimDelivery({ flags, keys, merchants, deps }: Invocation): Promise<MerchantAdminResult> {
  const uid = flags.get('uid');
  const refusal = uid === undefined ? 'claim needs --uid' : uidRefusal(uid, '--uid');
  if (refusal) return misuse(refusal);
  const group = flags.get('group') ?? 'PLATFORM';
  if (group !== 'PLATFORM' && group !== 'PARTNER') return misuse('--group is PLATFORM or PARTNER');
  const hash = keyHashOf(hashFlag(flags, 'key-hash'), keys);
  if (hash instanceof Error) return misuse(hash.message);
  const merchant = await merchants.rootOf(hash);
  const before = (await deps.store.ownersOf([uid!])).get(uid!);
  await deps.store.recordOwners([
    { uid: uid!, owner: merchant, group: group as OwnerGroup, proof: 'claimed', replace: true },
  ]);
  const replaced =
    before && (await merchants.rootOf(before.owner)) !== merchant
      ? ` (it was merchant ${await merchants.rootOf(before.owner)}'s)`
      : '';
  return done(`claimed: ${uid} is merchant ${merchant}'s${replaced}`);
}

const COMMANDS: ReadonlyMap<string, Command> = new Map<string, Command>([
  ['hash', printHash],
  ['link', linkKey],
  ['merge', mergeMerchants],
  ['unlink', unlinkKey],
  ['show', showMerchant],
  ['owner', showOwner],
  ['claim', claimDelivery],
]);

/** The key hash of --key-hash, or of the one key on standard input. */
function keyHashOf(flag: string | undefined | Error, keys: readonly string[]): string | Error {
  if (flag instanceof Error) return flag;
  if (flag) return flag;
  if (keys.length !== 1) return new Error('give --key-hash, or one key on standard input');
  return hashKey(keys[0]!);
}

const done = (line: string): MerchantAdminResult => ({ code: 0, lines: [line] });
const refused = (line: string): MerchantAdminResult => ({ code: 1, lines: [`refused: ${line}`] });
const misuse = (line: string): MerchantAdminResult => ({ code: 2, lines: [line, '', MERCHANT_USAGE] });
