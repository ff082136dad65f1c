import { defineConfig } from "vitest/config";

// The tests talk to a live Strata server: STRATA_URL, STRATA_API_KEY (agent) and
// STRATA_ADMIN_KEY (for clearing a manual-review step). go test ./internal/typescripttest
// starts one and sets them. globalSetup builds dist/ for the crash test's worker process.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/build.ts"],
    testTimeout: 30000,
    hookTimeout: 60000,
  },
});
