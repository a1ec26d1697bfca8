// Preloaded into a facade a scenario measures (node --expose-gc --import this):
// SIGUSR2 collects the heap at once, twice over, so that the V8 heap used that
// /metrics reports next is what is still held, not what the last collection
// happened to leave. Bench-only: nothing of it is in the facade.
process.on('SIGUSR2', () => {
  globalThis.gc?.();
  globalThis.gc?.();
});
