// Builds this checkout with one of its home-grown mechanisms swapped for the library's way (a patch in this folder),
// so the bench can run the two side by side: docs/architecture.md's "Mechanisms beside a library's own".
// The source is copied to a temporary folder, patched and compiled there (dist/ beside a link to this checkout's
// node_modules, which reach the sandbox package's build): `npm run build` first. Prints each variant's folder, to hand
// to --baseline=. A patch that no longer applies fails loudly: the code it names has changed.
// Usage: node bench/variants/build.mjs <name>... (names: the .patch files here)
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const ROOT = path.resolve(HERE, '../..');

/** Builds the named variant; resolves to its folder (a checkout with dist/ built). */
export function buildVariant(name) {
  const patch = path.join(HERE, `${name}.patch`);
  if (!existsSync(patch)) {
    const known = readdirSync(HERE).filter((file) => file.endsWith('.patch'));
    throw new Error(`no variant ${name}; known: ${known.map((file) => file.slice(0, -6)).join(', ')}`);
  }
  if (!existsSync(path.join(ROOT, 'dist/main.js'))) throw new Error('npm run build first: the variant reuses its page');
  const dir = mkdtempSync(path.join(tmpdir(), `dg-variant-${name}-`));
  for (const part of ['src', 'package.json', 'tsconfig.json', 'tsconfig.build.json'])
    cpSync(path.join(ROOT, part), path.join(dir, part), { recursive: true });
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  symlinkSync(path.join(ROOT, 'packages'), path.join(dir, 'packages'));
  execFileSync('patch', ['-p1', '--forward', '--batch', '-i', patch], { cwd: dir, stdio: 'inherit' });
  execFileSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], {
    cwd: dir,
    stdio: 'inherit',
  });
  // The tracking page's bundle is not compiled by tsc: the checkout's own.
  cpSync(path.join(ROOT, 'dist/web/tracking'), path.join(dir, 'dist/web/tracking'), { recursive: true });
  return dir;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const names = process.argv.slice(2);
  if (names.length === 0) {
    console.error(
      `usage: node bench/variants/build.mjs <name>...; ${readFileSync(path.join(HERE, 'README.md'), 'utf8')}`,
    );
    process.exit(2);
  }
  for (const name of names) console.log(`${name}: ${buildVariant(name)}`);
}
