// What the caches' entries hold in the heap, counted from what each is made of:
// a string by its characters, a syntax tree by its tokens and nodes, a compiled
// executor by the length of the source graphql-jit generated for it, a
// remembered persisted query by its hash and text. The constants are measured
// (Node 20, x64, no pointer compression): test/integration/document-weights.test.ts
// sends distinct documents of several shapes to a whole stack in a child
// process, compiled and not, and fills an APQ store, and compares what the heap
// grew by with what was counted.
import { TokenKind, visit, type DocumentNode, type Token } from 'graphql';

/** A heap object's size, rounded up to V8's 8-byte alignment. */
const aligned = (bytes: number): number => Math.ceil(bytes / 8) * 8;

/** Whether every character of a text fits one byte (V8 then stores it one byte a character). */
// eslint-disable-next-line no-control-regex -- the range starts at U+0000 on purpose: every one-byte character
const oneByte = (text: string): boolean => !/[^\u0000-\u00ff]/.test(text);

/** A flat string's heap: a 16-byte header, then one or two bytes a character. */
export function stringBytes(text: string): number {
  return aligned(16 + text.length * (oneByte(text) ? 1 : 2));
}

/** A parsed document without its tokens and nodes: the Document, its Source, its Location. */
const TREE_BYTES = 3_300;
/** A token of the linked list graphql-js keeps (punctuation, names, values and comments alike). */
const TOKEN_BYTES = 56;
/** What a token with a value (a name, a number, a string, a comment) adds: its value, copied. */
const TOKEN_VALUE_BYTES = 40;
/** What a value of 13 characters or more adds on top: V8 slices it out of the text instead of copying it. */
const LONG_VALUE_BYTES = 48;
/** A node of the tree (a field, a name, an argument, a selection set …) with its Location. */
const NODE_BYTES = 220;

/**
 * The heap a parsed document holds (the text itself not included): graphql-js
 * keeps every token (comments too) in a list hanging off the tree's Location,
 * and every node with a Location of its own. Counted by walking both, once.
 */
export function syntaxTreeBytes(document: DocumentNode): number {
  let bytes = TREE_BYTES;
  for (let token: Token | null | undefined = document.loc?.startToken; token; token = token.next) {
    bytes += TOKEN_BYTES;
    const value = token.value as string | undefined;
    if (value === undefined) continue;
    bytes += TOKEN_VALUE_BYTES;
    // A block string of several lines is a new string (its lines joined); any other long value is a slice of the text.
    if (value.length >= 13)
      bytes +=
        LONG_VALUE_BYTES + (token.kind === TokenKind.BLOCK_STRING && value.includes('\n') ? stringBytes(value) : 0);
  }
  let nodes = 0;
  visit(document, {
    enter() {
      nodes += 1;
    },
  });
  return bytes + nodes * NODE_BYTES;
}

/** An operation plan before it compiles: its facts, its runnable document, its cost plan. */
export const PLAN_BYTES = 2_048;

/** A compiled executor however small: the closures, the resolver and serializer tables, the null trimmer. */
const COMPILED_BYTES = 8_192;
/**
 * Each character of the source graphql-jit generated (about 1.6 KB for each
 * field resolved, fragments spread and aliases apart): the source itself, which
 * V8 keeps, the bytecode made from it as it runs, and the resolve info of each
 * field. Measured at 2.3 to 3.1 bytes a character from 60 KB to 2.4 MB of source.
 */
const COMPILED_BYTES_PER_SOURCE_CHAR = 3.2;

/**
 * Source graphql-jit 0.8 generates for each field resolved: 1,570 to 1,650 characters measured (plain, wide,
 * fragment-heavy).
 */
export const GENERATED_CHARS_PER_FIELD = 1_700;

/** The heap a compiled executor holds, from the length of the source generated for it. */
export function compiledBytes(sourceLength: number): number {
  return COMPILED_BYTES + Math.ceil(sourceLength * COMPILED_BYTES_PER_SOURCE_CHAR);
}

/**
 * A validation error kept with its document: the GraphQLError, its locations and message (its captured stack is
 * dropped: documents.ts).
 */
export const VALIDATION_ERROR_BYTES = 2_048;

/** A document cache entry without its text, tree and plans: the entry, its maps, its slot in the LRU. */
export const DOCUMENT_ENTRY_BYTES = 512;

/** An automatic persisted query's slot in the LRU beside its two strings (hash and text). */
export const PERSISTED_QUERY_ENTRY_BYTES = 96;
