import { defineConfig } from "vitest/config";

// The conformance suite (@langchain/langgraph-checkpoint-validation) registers its tests with
// the global describe/it/expect, so globals must be on.
export default defineConfig({
  test: {
    globals: true,
    // STRATA_VITEST_FILES picks the files (internal/langgraphtest runs each suite on its own).
    include: process.env.STRATA_VITEST_FILES ? process.env.STRATA_VITEST_FILES.split(",") : ["test/**/*.test.ts"],
    testTimeout: 30000,
    hookTimeout: 30000,
  },
});
