// The tracking page's browser code (src/web/client), bundled by esbuild into
// static files: at `npm run build` (scripts/build-page.ts), or on the first
// request of a run from the sources when the files are missing or older than the
// sources. A built deployment serves the files and never loads esbuild.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Where the files go and are read from: dist/web/tracking, from src/web or dist/web alike. */
export const BUNDLE_DIR = fileURLToPath(new URL('../../dist/web/tracking/', import.meta.url));
/** The sources, when this is a checkout (a deployment of dist/ alone has none). */
const CLIENT_DIR = fileURLToPath(new URL('../../src/web/client/', import.meta.url));

export interface TrackingBundle {
  js: Buffer;
  css: Buffer;
  /** Hash of the sources it was built from. */
  sources: string | null;
}

interface Manifest {
  js: string;
  css: string;
  sources: string | null;
}

/** A hash of every client source file, to tell whether a bundle on disk is still theirs; null without sources. */
export function sourcesHash(): string | null {
  if (!existsSync(CLIENT_DIR)) return null;
  const hash = createHash('sha256');
  for (const name of readdirSync(CLIENT_DIR).sort())
    hash.update(name).update(readFileSync(path.join(CLIENT_DIR, name)));
  return hash.digest('base64url').slice(0, 16);
}

/** Bundles the client with esbuild (a build-time tool, loaded only here). */
export async function bundleClient(): Promise<TrackingBundle> {
  const { build } = await import('esbuild');
  const result = await build({
    entryPoints: [path.join(CLIENT_DIR, 'main.ts')],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: ['es2022'],
    minify: true,
    legalComments: 'none',
    outdir: 'tracking',
    entryNames: 'app',
    logLevel: 'silent',
  });
  const js = result.outputFiles.find((file) => file.path.endsWith('.js'));
  const css = result.outputFiles.find((file) => file.path.endsWith('.css'));
  if (!js || !css) throw new Error('the tracking page bundle is missing its script or stylesheet');
  return { js: Buffer.from(js.contents), css: Buffer.from(css.contents), sources: sourcesHash() };
}

/**
 * Writes the files and their manifest (the manifest last, and each by rename, so a reader never sees half a bundle).
 */
export function writeBundle(bundle: TrackingBundle, dir = BUNDLE_DIR): void {
  mkdirSync(dir, { recursive: true });
  const put = (name: string, body: Buffer | string) => {
    writeFileSync(path.join(dir, `${name}.tmp`), body);
    renameSync(path.join(dir, `${name}.tmp`), path.join(dir, name));
  };
  const named = (body: Buffer, ext: string) =>
    `app.${createHash('sha256').update(body).digest('hex').slice(0, 12)}.${ext}`;
  const manifest: Manifest = { js: named(bundle.js, 'js'), css: named(bundle.css, 'css'), sources: bundle.sources };
  put(manifest.js, bundle.js);
  put(manifest.css, bundle.css);
  put('manifest.json', JSON.stringify(manifest));
}

/** The bundle on disk, or undefined when there is none or (with sources beside it) it is older than they are. */
export function readBundle(dir = BUNDLE_DIR): TrackingBundle | undefined {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as Manifest;
  } catch {
    return undefined;
  }
  const current = sourcesHash();
  if (current !== null && manifest.sources !== current) return undefined;
  try {
    return {
      js: readFileSync(path.join(dir, manifest.js)),
      css: readFileSync(path.join(dir, manifest.css)),
      sources: manifest.sources,
    };
  } catch {
    return undefined;
  }
}

/**
 * The bundle on disk, or a fresh one (written for the next start) when this is a checkout whose bundle is missing or
 * stale.
 */
export async function loadBundle(): Promise<TrackingBundle> {
  const onDisk = readBundle();
  if (onDisk) return onDisk;
  if (sourcesHash() === null) throw new Error(`no tracking page bundle in ${BUNDLE_DIR}: run npm run build`);
  const fresh = await bundleClient();
  try {
    writeBundle(fresh);
  } catch {
    // A read-only checkout still serves the page, from memory.
  }
  return fresh;
}
