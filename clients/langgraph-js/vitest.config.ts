import { defineConfig } from "vitest/config";

// The conformance suite (@langchain/langgraph-checkpoint-validation) registers its tests with
// the global describe/it/expect, so globals must be on.
export default defineConfig({
  test: {
    globals: true,
    include: ["test/**/*.test.ts"],
    testTimeout: 30000,
    hookTimeout: 30000,
  },
});
