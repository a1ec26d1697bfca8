// GraphQL documents for the anonymous flood (bench/attacks/anonymous-flood.mjs)
// and the keyless floods (bench/attacks/keyless-flood.mjs, KEYLESS_DOCUMENTS below):
// every one distinct and valid, each within the facade's operation limits
// (src/graphql/protection.ts OPERATION_LIMITS: 2,000 tokens, depth 12, 30 aliases,
// a response key at most 10 times per selection set, cost 50,000).
//   - `wide`: ~10 KB, several aliased delivery(uid:) reads selecting most of a
//     Delivery's fields, in an order, subset, page size and group that vary with n;
//   - `padded`: a short query followed by `# …` comment lines up to a body size
//     (GRAPHQL_MAX_BODY_BYTES, 1 MiB by default): the comments are no tokens.

/** Deliveries read in one wide document: under 30 aliases and 2,000 tokens, about 10 KB. */
export const WIDE_READS = 8;

const address = 'address { street number secondaryNumber city county state postalCode country latitude longitude }';
const stop = (phoneFirst) =>
  phoneFirst
    ? `phone name email instructions windowStart ${address}`
    : `name email phone ${address} instructions windowStart`;

/** Top-level selections of a Delivery; each document takes them rotated and with one left out. */
function deliveryFields(n, k) {
  return [
    'uid',
    'id',
    'status',
    'rawStatus',
    'group',
    'mode',
    'style',
    'rawStyle',
    'trackingUrl',
    'partnerReference',
    'cancellationReason',
    'deliveryDate',
    'deliveryStartTime',
    'deliveryEndTime',
    'estimatedDropoffAt',
    'tip',
    'payload',
    'price { amount currency }',
    'expectedCancellationFee { currency amount }',
    'distance { value unit }',
    `pickup { ${stop((n + k) % 2 === 0)} }`,
    `dropoff { ${stop((n + k) % 2 === 1)} }`,
    'package { description itemsCount weight declaredValue minimumVehicleSize requirements dimensions { height length width } items { name quantity price barcode description externalId externalInstanceId } }',
    'courier { name pickupPhone dropoffPhone location { lat lng } vehicle { make model year } }',
    'proofOfDelivery { photoUrl signatureUrl }',
    `events(first: ${1 + ((n + k) % 20)}) { pageInfo { hasNextPage hasPreviousPage startCursor endCursor } edges { cursor node { uid name status statusText stale receivedAt cursor courierLocation { lat lng } } } }`,
  ];
}

/** A uid that differs for every document and read (the facade takes any text as a uid). */
const uid = (n, k) => `00000000-f100-4d00-8000-${n.toString(16).padStart(10, '0')}${k.toString(16).padStart(2, '0')}`;

/** The n-th wide document: ~10 KB, distinct from every other n. */
export function wideDocument(n) {
  const tag = n.toString(36);
  const reads = [];
  for (let k = 0; k < WIDE_READS; k += 1) {
    const fields = deliveryFields(n, k);
    const shift = (n * 7 + k * 3) % fields.length;
    const rotated = [...fields.slice(shift), ...fields.slice(0, shift)];
    // One field left out, another each time: the shape, not only the text, differs.
    rotated.splice((n + k * 5) % rotated.length, 1);
    const group = (n + k) % 3 === 0 ? ', group: PARTNER' : '';
    reads.push(
      `  flood${tag}Delivery${k}: delivery(uid: "${uid(n, k)}"${group}) {\n    ${rotated.join('\n    ')}\n  }`,
    );
  }
  return `query AnonymousFlood${tag} {\n${reads.join('\n')}\n}\n`;
}

/** One line of comment padding: 80 characters with its newline, none that JSON escapes beyond the newline. */
const PAD_LINE = `# ${'padding the document with comment lines, which cost the lexer but no tokens. '.repeat(2).slice(0, 77)}\n`;

/** The padded document's short query, distinct for every n. */
function paddedHead(n) {
  const tag = n.toString(36);
  return `query PaddedFlood${tag} { flood${tag}: delivery(uid: "${uid(n, 0)}") { uid status trackingUrl } }\n# request ${n}\n`;
}

const paddingCache = new Map();
/** `count` padding lines, as text and as JSON string content (built once per count). */
function padding(count) {
  let cached = paddingCache.get(count);
  if (!cached) {
    const text = PAD_LINE.repeat(count);
    cached = { text, json: JSON.stringify(text).slice(1, -1) };
    paddingCache.set(count, cached);
  }
  return cached;
}

/**
 * How many padding lines keep the JSON body {"query":"<head><padding>"} within `bodyBytes` (ASCII: a character is a
 * byte).
 */
function padLines(n, bodyBytes) {
  const fixed = '{"query":""}'.length + JSON.stringify(paddedHead(n)).length - 2;
  const perLine = JSON.stringify(PAD_LINE).length - 2;
  return Math.max(0, Math.floor((bodyBytes - fixed) / perLine));
}

/** The n-th padded document's text (for a keyed check); the flood sends paddedBody. */
export function paddedDocument(n, bodyBytes) {
  return paddedHead(n) + padding(padLines(n, bodyBytes)).text;
}

/** The JSON body of the n-th padded request, at most `bodyBytes` bytes, without stringifying a megabyte each time. */
export function paddedBody(n, bodyBytes) {
  return `{"query":${JSON.stringify(paddedHead(n)).slice(0, -1)}${padding(padLines(n, bodyBytes)).json}"}`;
}

/** The JSON body of the n-th wide request. */
export function wideBody(n) {
  return JSON.stringify({ query: wideDocument(n) });
}

/** The two kinds of document, by the name the scenario's --documents flag uses. */
export const DOCUMENTS = {
  '10kb': { label: '~10 KB distinct documents', body: (n) => wideBody(n), text: (n) => wideDocument(n) },
  '1mb': {
    label: '~1 MB comment-padded documents',
    body: (n, bodyBytes) => paddedBody(n, bodyBytes),
    text: (n, bodyBytes) => paddedDocument(n, bodyBytes),
  },
};

/** The fields of a delivery a tracking page or a dashboard reads (about 50, its page of one event included). */
export const FULL_DELIVERY_FIELDS =
  'uid status rawStatus group mode trackingUrl partnerReference deliveryDate tip price { amount currency } distance { value unit } ' +
  'pickup { name phone address { street city postalCode country latitude longitude } } dropoff { name phone address { street city postalCode country latitude longitude } } ' +
  'courier { name location { lat lng } vehicle { make model } } events(first: 1) { edges { cursor node { uid name status receivedAt } } }';

/**
 * Issue 29's token flood: 28 aliased `delivery(uid:)` reads spreading one
 * fragment of FULL_DELIVERY_FIELDS, about 2 KB of text that resolves 1,456
 * fields (2.4 MB of generated source when graphql-jit compiles it). The aliases
 * and the fragment's name vary with n, so every document, and the code a
 * compile would generate for it, is distinct.
 */
export function fragmentHeavyDocument(n, uid) {
  const tag = n.toString(36);
  const reads = Array.from({ length: 28 }, (_, k) => `t${tag}_${k}: delivery(uid: "${uid}") { ...Track${tag} }`).join(
    ' ',
  );
  return `query TokenFlood${tag} { ${reads} } fragment Track${tag} on Delivery { ${FULL_DELIVERY_FIELDS} }`;
}
/**
 * One listing of every type with its fields, their arguments and types, enum values and input fields: about 3,400
 * values here.
 */
const TYPE_LISTING =
  'types { name kind description fields(includeDeprecated: true) { name description isDeprecated args { name description defaultValue type { name kind ofType { name kind } } } ' +
  'type { name kind ofType { name kind ofType { name kind } } } } enumValues(includeDeprecated: true) { name description } inputFields { name description type { name kind ofType { name kind } } } }';

/**
 * Aliased type listings in one introspection: as many as a caller without an
 * accepted key may still run here (a cost of about 6,900 against its 10,000;
 * about 150 KB answered). 73fe34c ran any number (30: 2.3 MB, 450 ms).
 */
export const INTROSPECTION_LISTINGS = 2;

/** The n-th costly introspection: the schema listed INTROSPECTION_LISTINGS times over, named after n. */
export function introspectionDocument(n) {
  return `query Introspect${n.toString(36)} { __schema { ${Array.from({ length: INTROSPECTION_LISTINGS }, (_, i) => `t${i}: ${TYPE_LISTING}`).join(' ')} } }`;
}

/** Fragments in one fragment-heavy document: within 2,000 tokens (8 a fragment with its spread). */
export const FRAGMENTS = 220;

/**
 * The n-th fragment-heavy document: FRAGMENTS fragments on Query each selecting __typename, all spread at the root;
 * valid, cheap to answer, slow to validate.
 */
export function fragmentDocument(n) {
  const tag = n.toString(36);
  const spreads = Array.from({ length: FRAGMENTS }, (_, i) => `...F${tag}_${i}`).join(' ');
  const fragments = Array.from({ length: FRAGMENTS }, (_, i) => `fragment F${tag}_${i} on Query { __typename }`).join(
    '\n',
  );
  return `query Fragments${tag} { ${spreads} }\n${fragments}`;
}

/**
 * A merchant key nobody issued (the bench's fixed upstream would accept any key it is asked about; these documents
 * never ask it).
 */
export const MADE_UP_KEY = 'sk_made_up_by_the_keyless_flood';

/**
 * The keyless floods' documents by the name keyless-flood's --floods flag uses; `headers` go with every request, `env`
 * to the facade.
 */
export const KEYLESS_DOCUMENTS = {
  introspection: {
    label: `introspection without a key, ${INTROSPECTION_LISTINGS} aliased listings of every type with its fields, arguments and values, the most such a caller may run (development: introspection on)`,
    body: (n) => JSON.stringify({ query: introspectionDocument(n) }),
    env: { NODE_ENV: 'development' },
  },
  fragments: {
    label: `${FRAGMENTS}-fragment __typename documents without a key (production)`,
    body: (n) => JSON.stringify({ query: fragmentDocument(n) }),
    env: { NODE_ENV: 'production' },
  },
  'made-up-key': {
    label: `the same ${FRAGMENTS}-fragment documents with a made-up Bearer key (production)`,
    body: (n) => JSON.stringify({ query: fragmentDocument(n) }),
    headers: { authorization: `Bearer ${MADE_UP_KEY}` },
    env: { NODE_ENV: 'production' },
  },
};
