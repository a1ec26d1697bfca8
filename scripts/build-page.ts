// npm run build: bundles the tracking page into dist/web/tracking, so a built
// server serves static files and needs neither esbuild nor src/ at run time.
import { BUNDLE_DIR, bundleClient, writeBundle } from '../src/web/bundle.js';

const bundle = await bundleClient();
writeBundle(bundle);
console.log(`tracking page: ${bundle.js.length} B of script, ${bundle.css.length} B of style in ${BUNDLE_DIR}`);
