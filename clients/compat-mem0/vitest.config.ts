import { defineConfig } from "vitest/config";

// The suite drives a live Strata server with the real mem0ai MemoryClient: STRATA_URL,
// STRATA_API_KEY (an agent key of org A), STRATA_OTHER_KEY (org B), STRATA_EXTRACTION
// (set when the server has the fake model). go test ./internal/mem0 starts one and sets them.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30000,
    fileParallelism: false,
  },
});
