// What a caller without a working key may run: only root fields that need no
// credential. This reads the named operation's kind and root fields from the
// document's tokens, without building a syntax tree, so a flood of documents
// that need a key is refused for the price of a lexer pass. Anything it cannot
// read this way (a fragment spread at the root, a syntax error, an unknown
// operation name) is left to the full parse, which judges the same thing.
// Whatever such a caller does run is timed (KeylessWork) and charged to its
// address (access/rate-limit.ts).
import {
  Kind,
  Lexer,
  Source,
  TokenKind,
  type DocumentNode,
  type GraphQLError,
  type OperationDefinitionNode,
  type Token,
} from 'graphql';
import { createGraphQLError } from 'graphql-yoga';
import type { OperationKind } from '../../access/client-token-scope.js';

/** Root fields that need no credential: the schema's own description, and nothing of anyone's data. */
export const KEYLESS_ROOT_FIELDS: ReadonlySet<string> = new Set(['__typename', '__schema', '__type', '_service']);

/**
 * What an operation that needs no key may hold when its caller has no accepted
 * key. Introspection tools send a few fragments (GraphiQL's full introspection:
 * 3, costing about 4,500 here); a document of hundreds of fragments costs tens
 * of milliseconds of validation (every pair of fragments compared), and an
 * introspection listing the schema ten times over as many of running, each
 * held in one piece by the event loop, which every other caller then waits on.
 */
export const KEYLESS_LIMITS = {
  /** Fragment definitions in the document, checked before validation. */
  fragments: 20,
  /** Its cost (guards/cost.ts), against the 50,000 of an earned caller. */
  cost: 10_000,
} as const;

const SEND_A_KEY = 'Send a merchant key or client token, or ask for less.';

/** The validation refusal's marks (HTTP 400; 200 under application/json, as every validation error). */
const refusedAsInvalid = (message: string, node?: OperationDefinitionNode): GraphQLError =>
  createGraphQLError(message, {
    nodes: node,
    extensions: { code: 'GRAPHQL_VALIDATION_FAILED', http: { spec: true, status: 400 } },
  });

/**
 * Why a document that needs no key has too many fragments for a caller without one; undefined when it has few enough.
 */
export function keylessFragmentsRefusal(document: DocumentNode): GraphQLError | undefined {
  let fragments = 0;
  for (const definition of document.definitions) if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments += 1;
  if (fragments <= KEYLESS_LIMITS.fragments) return undefined;
  return refusedAsInvalid(
    `Without an accepted key, a document may hold at most ${KEYLESS_LIMITS.fragments} fragments; found ${fragments}. ${SEND_A_KEY}`,
  );
}

/**
 * Why an operation that needs no key costs too much for a caller without one (its cost before variables); undefined
 * when it may run.
 */
export function keylessCostRefusal(cost: number, operation: OperationDefinitionNode): GraphQLError | undefined {
  if (cost <= KEYLESS_LIMITS.cost) return undefined;
  return refusedAsInvalid(
    `Without an accepted key, an operation may cost at most ${KEYLESS_LIMITS.cost}; found ${cost} (introspection counts every type, field and argument it lists, each time it lists them). ${SEND_A_KEY}`,
    operation,
  );
}

export interface KeylessReading {
  kind: OperationKind;
  /** Whether any root field of the named operation needs a credential. */
  needsKey: boolean;
}

class Unreadable extends Error {}

/** The named operation's kind and whether it needs a key; undefined when the tokens alone cannot tell. */
export function readKeyless(
  text: string,
  operationName: string | undefined,
  maxTokens: number,
): KeylessReading | undefined {
  let lexer: Lexer;
  let count = 0;
  const next = (): Token => {
    if (++count > maxTokens) throw new Unreadable();
    return lexer.advance();
  };
  /** Skips a balanced group whose opening token was just read. */
  const skip = (open: TokenKind, close: TokenKind): Token => {
    let depth = 1;
    let token: Token;
    do {
      token = next();
      if (token.kind === TokenKind.EOF) throw new Unreadable();
      if (token.kind === open) depth += 1;
      else if (token.kind === close) depth -= 1;
    } while (depth > 0);
    return next();
  };
  /** Directives and their arguments, from `token` on; returns the first token after them. */
  const directives = (token: Token): Token => {
    while (token.kind === TokenKind.AT) {
      next(); // name
      token = next();
      if (token.kind === TokenKind.PAREN_L) token = skip(TokenKind.PAREN_L, TokenKind.PAREN_R);
    }
    return token;
  };
  try {
    lexer = new Lexer(new Source(text));
    const operations: Array<{ name: string | undefined; kind: OperationKind; fields: string[] }> = [];
    let token = next();
    while (token.kind !== TokenKind.EOF) {
      let kind: OperationKind = 'query';
      let name: string | undefined;
      if (token.kind === TokenKind.NAME) {
        if (token.value === 'fragment') {
          // fragment Name on Type @directives { … }
          while (token.kind !== TokenKind.BRACE_L && token.kind !== TokenKind.EOF) token = next();
          if (token.kind === TokenKind.EOF) throw new Unreadable();
          token = skip(TokenKind.BRACE_L, TokenKind.BRACE_R);
          continue;
        }
        if (token.value !== 'query' && token.value !== 'mutation' && token.value !== 'subscription')
          throw new Unreadable();
        kind = token.value as OperationKind;
        token = next();
        if (token.kind === TokenKind.NAME) {
          name = token.value;
          token = next();
        }
        if (token.kind === TokenKind.PAREN_L) token = skip(TokenKind.PAREN_L, TokenKind.PAREN_R);
        token = directives(token);
      }
      if (token.kind !== TokenKind.BRACE_L) throw new Unreadable();
      const fields: string[] = [];
      token = next();
      while (token.kind !== TokenKind.BRACE_R) {
        // A spread or inline fragment at the root: the full parse follows fragments.
        if (token.kind !== TokenKind.NAME) throw new Unreadable();
        let field = token.value;
        token = next();
        if (token.kind === TokenKind.COLON) {
          token = next();
          if (token.kind !== TokenKind.NAME) throw new Unreadable();
          field = token.value;
          token = next();
        }
        fields.push(field);
        if (token.kind === TokenKind.PAREN_L) token = skip(TokenKind.PAREN_L, TokenKind.PAREN_R);
        token = directives(token);
        if (token.kind === TokenKind.BRACE_L) token = skip(TokenKind.BRACE_L, TokenKind.BRACE_R);
      }
      operations.push({ name, kind, fields });
      token = next();
    }
    const chosen =
      operationName === undefined
        ? operations.length === 1
          ? operations[0]
          : undefined
        : operations.find((operation) => operation.name === operationName);
    if (!chosen) return undefined;
    return { kind: chosen.kind, needsKey: chosen.fields.some((field) => !KEYLESS_ROOT_FIELDS.has(field)) };
  } catch {
    // Unreadable here, or a syntax error: the full parse says what is wrong.
    return undefined;
  }
}

/**
 * The time an operation of a caller without an accepted key holds the event
 * loop, counted in laps: `lap` adds the time since the last mark (the parse,
 * the validation, the synchronous part of the execution, the count of its
 * answer), `skip` marks without adding (the time it waited on the upstream or
 * on a store, when others ran). Answer bytes are added by `answered`.
 */
export class KeylessWork {
  ms = 0;
  bytes = 0;
  #at = performance.now();

  lap(): void {
    const now = performance.now();
    this.ms += now - this.#at;
    this.#at = now;
  }

  skip(): void {
    this.#at = performance.now();
  }

  answered(bytes: number): void {
    this.bytes += bytes;
  }
}
