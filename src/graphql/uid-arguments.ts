// Resolvers' own check of the uids they are given (the rule is src/domain/uid.ts):
// the same refusal the upstream clients would make, but naming the argument, and
// before anything is looked up for any uid of a list, or answered from a client
// token's scope without the upstream.
import { uidRefusal } from '../domain/uid.js';
import { BadUserInputError } from '../errors.js';

/** The uid, or BAD_USER_INPUT naming `name` (the argument, e.g. `uid` or `uids[2]`). */
export function checkUid(value: string, name = 'uid'): string {
  const refusal = uidRefusal(value, name);
  if (refusal) throw new BadUserInputError(refusal);
  return value;
}

/** A field's `uid` and `uids` arguments checked (the first bad one named, e.g. `uids[1]`), and returned as they are. */
export function checkUidArguments<T>(args: T): T {
  const { uid, uids } = (args ?? {}) as { uid?: unknown; uids?: unknown };
  if (uid != null) checkUid(String(uid));
  if (Array.isArray(uids)) uids.forEach((each, index) => checkUid(String(each), `uids[${index}]`));
  return args;
}
