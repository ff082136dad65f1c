import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

// Builds dist/ (what the package ships) so the crash test's plain-.mjs worker can import it.
export default function setup() {
  const dir = join(dirname(fileURLToPath(import.meta.url)), "..");
  execFileSync(process.execPath, [join(dir, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], {
    cwd: dir,
    stdio: "inherit",
  });
}
