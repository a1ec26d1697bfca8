// The layout stays one straight line: no folder of src/ imports (at run time) a
// folder that imports it back, directly or through others. Type-only imports do
// not count (they vanish at run time); a file directly under src/ (errors.ts,
// config.ts, app.ts …) is a node of its own. docs/architecture.md says what each
// folder may import. The domain rules import nothing outside src/domain, types
// included, so no folder (the store above all) is in a circle with them. The
// sandbox is a package of its own (packages/sandbox): src/ reaches it only
// through the package's main entry, and it imports nothing of src/; inside it no
// file imports one that imports it back, types included: its shared types live
// in types.ts, which imports only the wire shapes (wire.ts, which imports
// nothing). The composition roots (app.ts, main.ts) only wire, and stay under
// 260 lines.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { ESLint, Linter } from 'eslint';
import { describe, expect, it } from 'vitest';

const SRC = new URL('../../src/', import.meta.url).pathname;
const SANDBOX = new URL('../../packages/sandbox/', import.meta.url).pathname;
const SANDBOX_SRC = path.join(SANDBOX, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const file = path.join(dir, name);
    // The tracking page's browser code is bundled on its own.
    if (statSync(file).isDirectory()) return file.endsWith(path.join('web', 'client')) ? [] : sourceFiles(file);
    return file.endsWith('.ts') ? [file] : [];
  });
}

/** The folder under src/ a file belongs to, or the file itself when it lies directly in src/. */
function nodeOf(file: string): string {
  const relative = path.relative(SRC, file);
  return relative.includes(path.sep) ? relative.split(path.sep)[0]! : relative;
}

/**
 * Relative modules a file needs at run time (value imports, re-exports and dynamic imports), or with `types`, every
 * module it names.
 */
function runtimeImports(file: string, { types = false } = {}): string[] {
  const text = readFileSync(file, 'utf8');
  const targets: string[] = [];
  for (const match of text.matchAll(/^(import|export)\s+(type\s+)?([^'";]*?)\s*from\s*'(\.[^']+)'/gm)) {
    const [, , typeOnly, clause, target] = match;
    if (types) {
      targets.push(target!);
      continue;
    }
    if (typeOnly) continue;
    const names = /^\{([^}]*)\}$/.exec(clause!.trim())?.[1];
    if (
      names !== undefined &&
      names
        .split(',')
        .map((name) => name.trim())
        .filter(Boolean)
        .every((name) => name.startsWith('type '))
    )
      continue;
    targets.push(target!);
  }
  for (const match of text.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)) targets.push(match[1]!);
  return targets.map((target) => path.resolve(path.dirname(file), target.replace(/\.js$/, '.ts')));
}

/** Folder → folder it imports → the imports that make the edge; with `types`, type-only imports count too. */
function folderGraph({ types = false } = {}): Map<string, Map<string, string[]>> {
  const graph = new Map<string, Map<string, string[]>>();
  for (const file of sourceFiles(SRC)) {
    for (const target of runtimeImports(file, { types })) {
      const from = nodeOf(file);
      const to = nodeOf(target);
      if (from === to) continue;
      const edges = graph.get(from) ?? new Map<string, string[]>();
      graph.set(from, edges);
      edges.set(to, [...(edges.get(to) ?? []), `${path.relative(SRC, file)} → ${path.relative(SRC, target)}`]);
    }
  }
  return graph;
}

/** Every module a file names: static imports and re-exports (type-only ones too), bare imports, dynamic imports. */
function specifiers(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [
    ...text.matchAll(/^(?:import|export)\s[^;]*?\sfrom\s*'([^']+)'/gm),
    ...text.matchAll(/^import\s+'([^']+)'/gm),
    ...text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g),
  ].map((match) => match[1]!);
}

/** The files of the sandbox package's source and the sandbox files each one imports, type-only imports included. */
function sandboxGraph(): Map<string, Map<string, string[]>> {
  const dir = SANDBOX_SRC;
  const graph = new Map<string, Map<string, string[]>>();
  for (const file of sourceFiles(dir)) {
    const from = path.relative(dir, file);
    const edges = new Map<string, string[]>();
    graph.set(from, edges);
    for (const target of runtimeImports(file, { types: true })) {
      if (path.dirname(target) !== dir) continue;
      const to = path.relative(dir, target);
      edges.set(to, [`${from} → ${to}`]);
    }
  }
  return graph;
}

/** Every cycle found by a depth-first walk, as the imports that make it up. */
function cycles(graph: Map<string, Map<string, string[]>>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const trail: string[] = [];
  const walk = (node: string) => {
    state.set(node, 'open');
    trail.push(node);
    for (const next of graph.get(node)?.keys() ?? []) {
      if (state.get(next) === 'open') {
        const loop = [...trail.slice(trail.indexOf(next)), next];
        found.push(loop.slice(1).map((to, i) => graph.get(loop[i]!)!.get(to)![0]!));
      } else if (!state.has(next)) walk(next);
    }
    trail.pop();
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) walk(node);
  return found;
}

describe('src/ layout', () => {
  it('has no import cycle between folders', () => {
    expect(cycles(folderGraph())).toEqual([]);
  });

  it('keeps the domain rules free of everything but themselves', () => {
    expect([...(folderGraph().get('domain')?.keys() ?? [])]).toEqual([]);
  });

  it('keeps the domain rules free of everything but themselves, type-only imports included', () => {
    // Each edge with the imports that make it, so a failure names the line to change.
    expect(Object.fromEntries(folderGraph({ types: true }).get('domain') ?? [])).toEqual({});
  });

  it('has no import circle through domain/ (the store, the mapping, the upstream …), type-only imports included', () => {
    const throughDomain = cycles(folderGraph({ types: true })).filter((loop) =>
      loop.some((edge) => edge.startsWith(`domain${path.sep}`)),
    );
    expect(throughDomain).toEqual([]);
  });

  it('sees the imports it checks (a cycle planted in a copy of the graph is found)', () => {
    const graph = folderGraph();
    expect(graph.get('app.ts')?.has('pipeline')).toBe(true);
    const planted = new Map([...graph].map(([node, edges]) => [node, new Map(edges)]));
    planted.set('domain', new Map([['store', ['domain → store (planted)']]]));
    expect(cycles(planted).length).toBeGreaterThan(0);
  });

  it('sees type-only imports when asked (the store imports domain, and a planted domain → store type import closes a circle)', () => {
    const graph = folderGraph({ types: true });
    expect(graph.get('store')?.has('domain')).toBe(true);
    // A type-only import the run-time graph leaves out.
    expect(graph.get('observability')?.has('realtime')).toBe(true);
    expect(folderGraph().get('observability')?.has('realtime')).toBeFalsy();
    const planted = new Map([...graph].map(([node, edges]) => [node, new Map(edges)]));
    planted.set('domain', new Map([['store', [`domain${path.sep}cursor.ts → store${path.sep}store.ts (planted)`]]]));
    expect(cycles(planted).some((loop) => loop.some((edge) => edge.startsWith(`domain${path.sep}`)))).toBe(true);
  });
});

describe('composition roots', () => {
  // What they build lives in the folder that owns it (docs/architecture.md): they only wire, and a
  // part built here instead of in its room shows up as length before it shows up as a tangle.
  // Counted as Prettier prints them (printWidth 120).
  const MAX_LINES = 260;
  it.each(['app.ts', 'main.ts'])(`%s stays under ${MAX_LINES} lines`, (file) => {
    const lines = readFileSync(path.join(SRC, file), 'utf8').trimEnd().split('\n').length;
    expect(lines).toBeLessThan(MAX_LINES);
  });
});

describe('who owns a delivery', () => {
  // Proven in one place (docs/architecture.md, "Who may see a delivery"): every way in asks proveAccess
  // (src/access/prove.ts), and no other file learns an owner or judges a caller's claim to one uid.
  const PROVER = path.join('access', 'prove.ts');
  const calling = (pattern: RegExp) =>
    sourceFiles(SRC)
      .filter((file) => pattern.test(readFileSync(file, 'utf8')))
      .map((file) => path.relative(SRC, file))
      .sort();

  it('is learned and judged for one uid by the proving path alone', () => {
    expect(calling(/\bowners\.learn\(/)).toEqual([PROVER]);
    expect(calling(/\.judgeOne\(/)).toEqual([PROVER]);
    // The request's DataLoader (its batch function, delivery-reads.ts) judges its whole batch in one lookup, and hands each
    // verdict to proveAccess.
    expect(calling(/\bowners\.judge\(/)).toEqual([path.join('graphql', 'delivery-reads.ts')]);
  });

  it('is asked of proveAccess by the DataLoader, ReadAccess and cancelDelivery', () => {
    expect(calling(/\bproveAccess\(/)).toEqual(
      [
        PROVER,
        path.join('graphql', 'delivery-reads.ts'),
        path.join('graphql', 'cancellation.ts'),
        path.join('realtime', 'access.ts'),
      ].sort(),
    );
  });
});

describe('the sandbox, a package of its own', () => {
  const dependencies = Object.keys(
    (JSON.parse(readFileSync(path.join(SANDBOX, 'package.json'), 'utf8')) as { dependencies: object }).dependencies,
  );

  it('lives outside src/, which holds what ships as the facade', () => {
    expect(existsSync(SANDBOX_SRC)).toBe(true);
    expect(existsSync(path.join(SRC, 'sandbox'))).toBe(false);
  });

  it('is reached from src/ only through its main entry, never by a path into it', () => {
    const reaching = sourceFiles(SRC).flatMap((file) =>
      specifiers(file)
        .filter((target) => {
          if (target.startsWith('.')) return !path.resolve(path.dirname(file), target).startsWith(SRC);
          return target.includes('sandbox') && target !== '@delivery-graph/sandbox';
        })
        .map((target) => `${path.relative(SRC, file)} → ${target}`),
    );
    expect(reaching).toEqual([]);
  });

  it('imports nothing of the facade: only its own files, node: modules and its dependencies', () => {
    const outside = sourceFiles(SANDBOX_SRC).flatMap((file) =>
      specifiers(file)
        .filter((target) => {
          if (target.startsWith('.')) return !path.resolve(path.dirname(file), target).startsWith(SANDBOX_SRC);
          return !target.startsWith('node:') && !dependencies.includes(target);
        })
        .map((target) => `${path.relative(SANDBOX, file)} → ${target}`),
    );
    expect(outside).toEqual([]);
  });

  it('sees the imports it checks (the facade names the package; the package names its dependencies)', () => {
    expect(specifiers(path.join(SRC, 'embedded-sandbox.ts'))).toContain('@delivery-graph/sandbox');
    expect(specifiers(path.join(SANDBOX_SRC, 'world-file.ts'))).toContain('better-sqlite3');
    expect(specifiers(path.join(SANDBOX_SRC, 'index.ts'))).toContain('./server.js');
  });
});

describe('the sandbox package inside', () => {
  it('has no import circle between its files, type-only imports included', () => {
    expect(cycles(sandboxGraph())).toEqual([]);
  });

  it('keeps its shared types in a module that imports nothing of the sandbox but the wire shapes', () => {
    expect([...(sandboxGraph().get('types.ts')?.keys() ?? [])]).toEqual(['wire.ts']);
    expect([...(sandboxGraph().get('wire.ts')?.keys() ?? [])]).toEqual([]);
  });

  it('sees the imports it checks (type-only ones too, and a planted circle is found)', () => {
    const graph = sandboxGraph();
    expect(graph.get('knobs.ts')?.has('types.ts')).toBe(true);
    expect(graph.get('index.ts')?.has('server.ts')).toBe(true);
    const planted = new Map([...graph].map(([node, edges]) => [node, new Map(edges)]));
    planted.set('types.ts', new Map([['index.ts', ['types.ts → index.ts (planted)']]]));
    expect(cycles(planted).length).toBeGreaterThan(0);
  });
});

describe('the size of functions and files', () => {
  // STYLE.md: no function over 100 lines, no file over 600, in src/ and packages/*/src; a longer one is split into
  // named steps or a class with named members. Checked with ESLint's own rules, under a configuration of this test's
  // (eslint.config.js can loosen nothing here), on every file but those named below, each with why.
  const ROOT = new URL('../../', import.meta.url).pathname;
  const EXEMPT = [
    // The Redis store's Lua scripts: data, not code.
    'src/store/redis-scripts.ts',
  ];
  const RULES: Linter.RulesRecord = {
    'max-lines-per-function': ['error', { max: 100, skipBlankLines: false, skipComments: false, IIFEs: true }],
    'max-lines': ['error', { max: 600, skipBlankLines: false, skipComments: false }],
  };
  const linter = async () => {
    const { ESLint } = await import('eslint');
    const { parser } = (await import('typescript-eslint')).default;
    return new ESLint({
      cwd: ROOT,
      overrideConfigFile: true,
      ignorePatterns: EXEMPT,
      overrideConfig: {
        files: ['**/*.ts'],
        languageOptions: { parser },
        linterOptions: { noInlineConfig: true, reportUnusedDisableDirectives: 'off' },
        rules: RULES,
      },
    });
  };
  /** The size rules' findings, and any file that could not be parsed (ESLint's notes on inline disables left out). */
  const problems = (results: ESLint.LintResult[]) =>
    results.flatMap((result) =>
      result.messages
        .filter((message) => message.fatal || (message.ruleId !== null && message.ruleId in RULES))
        .map((message) => `${path.relative(ROOT, result.filePath)}: ${message.message}`),
    );

  it('holds in src/ and packages/*/src, but for the files named exempt', { timeout: 60_000 }, async () => {
    const eslint = await linter();
    const results = await eslint.lintFiles(['src/**/*.ts', 'packages/*/src/**/*.ts']);
    expect(results.length).toBeGreaterThan(100);
    expect(problems(results)).toEqual([]);
  });

  it('exempts in eslint.config.js the same files, and no others', async () => {
    const config = new URL('../../eslint.config.js', import.meta.url).href;
    const { sizeExemptions } = (await import(config)) as { sizeExemptions: Record<string, string> };
    expect(Object.keys(sizeExemptions).sort()).toEqual([...EXEMPT].sort());
  });

  it('sees what it checks (a function of 101 lines and a file of 601 are refused, a disabling comment or not)', async () => {
    const eslint = await linter();
    const body = Array.from({ length: 99 }, (_, index) => `  const v${index} = ${index};`).join('\n');
    const long = `/* eslint-disable max-lines, max-lines-per-function */\nexport function long(): void {\n${body}\n}\n`;
    const padding = '\n'.repeat(600 - long.split('\n').length + 1);
    const [result] = await eslint.lintText(long + padding + 'export {};\n', { filePath: 'src/planted.ts' });
    expect(problems([result!])).toEqual([
      "src/planted.ts: Function 'long' has too many lines (101). Maximum allowed is 100.",
      'src/planted.ts: File has too many lines (601). Maximum allowed is 600.',
    ]);
  });
});
