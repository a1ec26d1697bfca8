// Every relative link in the docs leads somewhere: the file exists, and an
// `#anchor` names a heading of the page it points to, slugged as GitHub slugs
// headings. A file named in backticks (`docs/limits.md`) must exist too, since a
// reader goes looking for it.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = new URL('../..', import.meta.url).pathname;

/** The pages checked: the README, docs/, the sandbox's README and every example's README. */
function pages(): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`);
  const examples = readdirSync(join(root, 'examples'))
    .map((name) => `examples/${name}/README.md`)
    .filter((path) => existsSync(join(root, path)));
  const reliability = readdirSync(join(root, 'docs/reliability'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/reliability/${name}`);
  return ['README.md', 'RELIABILITY.md', ...docs, ...reliability, 'packages/sandbox/README.md', ...examples];
}

/** The text outside fenced code blocks, with inline code spans kept (they may name files). */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[ \t]*$/gm, '');
}

/** A heading's anchor as GitHub makes it: its visible text, lowercased, punctuation removed, spaces to hyphens. */
export function githubSlug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link shows its text
    .replace(/`/g, '')
    .replace(/<[^>]+>/g, '');
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a page offers, duplicates numbered -1, -2 as GitHub numbers them. */
export function anchorsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const match of prose(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const slug = githubSlug(match[1]!);
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** Link targets of a page: inline links and images, and reference definitions. */
function linkTargets(markdown: string): string[] {
  const text = prose(markdown).replace(/`[^`\n]*`/g, '');
  const inline = [...text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]!);
  const definitions = [...text.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/gm)].map((m) => m[1]!);
  return [...inline, ...definitions];
}

/** Files a page names in backticks as `something.md`. */
function namedFiles(markdown: string): string[] {
  return [...prose(markdown).matchAll(/`([\w./-]+\.md)(?:#[\w-]*)?`/g)].map((m) => m[1]!);
}

/** Every broken link or file name in `page` (its text, unless given), as `page: target (why)`. */
function problems(page: string, markdown = readFileSync(join(root, page), 'utf8')): string[] {
  const here = dirname(join(root, page));
  const found: string[] = [];
  for (const target of linkTargets(markdown)) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) continue; // http:, mailto:: not ours to check
    const [path, anchor] = target.split('#', 2) as [string, string | undefined];
    const file = path === '' ? join(root, page) : join(here, decodeURIComponent(path));
    if (!existsSync(file)) {
      found.push(`${page}: ${target} (no such file: ${relative(root, file)})`);
      continue;
    }
    if (anchor === undefined || !file.endsWith('.md')) continue;
    if (!anchorsOf(readFileSync(file, 'utf8')).has(anchor))
      found.push(`${page}: ${target} (no heading with anchor #${anchor} in ${relative(root, file)})`);
  }
  for (const name of namedFiles(markdown)) {
    if (![join(here, name), join(root, name)].some((candidate) => existsSync(candidate)))
      found.push(`${page}: \`${name}\` (no such file in the repository)`);
  }
  return found;
}

describe('relative links in the docs', () => {
  it('slugs headings as GitHub does', () => {
    expect(githubSlug('`deliveryEvents(uids:, names:, after:)`')).toBe('deliveryeventsuids-names-after');
    expect(githubSlug('Redis through Sentinel')).toBe('redis-through-sentinel');
    expect(githubSlug('Acknowledged means: on a replica')).toBe('acknowledged-means-on-a-replica');
    expect(githubSlug('A [link](x.md) and snake_case, 4403!')).toBe('a-link-and-snake_case-4403');
    expect([...anchorsOf('# Limits\n## Notes\n```\n## not a heading\n```\n## Notes\n')]).toEqual([
      'limits',
      'notes',
      'notes-1',
    ]);
  });

  it('finds broken links, anchors and file names', () => {
    // The checker itself, on a page written to fail it.
    const markdown =
      '[a](nope.md) [b](limits.md#no-such-heading) [c](#no-such) [d](https://example.com/x) [e](limits.md) `gone.md`';
    expect(problems('docs/configuration.md', markdown)).toEqual([
      'docs/configuration.md: nope.md (no such file: docs/nope.md)',
      'docs/configuration.md: limits.md#no-such-heading (no heading with anchor #no-such-heading in docs/limits.md)',
      'docs/configuration.md: #no-such (no heading with anchor #no-such in docs/configuration.md)',
      'docs/configuration.md: `gone.md` (no such file in the repository)',
    ]);
  });

  it.each(pages())('%s: every relative link, anchor and named .md file exists', (page) => {
    expect(problems(page)).toEqual([]);
  });
});
