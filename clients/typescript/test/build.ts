import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

// Builds dist/ (what the package ships) so the crash test's plain-.mjs worker can import it,
// and type-checks the tests (vitest itself only strips types).
export default function setup() {
  const dir = join(dirname(fileURLToPath(import.meta.url)), "..");
  const tsc = join(dir, "node_modules", "typescript", "bin", "tsc");
  for (const project of ["tsconfig.json", "tsconfig.test.json"]) {
    execFileSync(process.execPath, [tsc, "-p", project], { cwd: dir, stdio: "inherit" });
  }
}
