import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { defineConfig, type Plugin } from "vite";

// What the build was made from: tests/unit/test_console_build.py recomputes it from the sources
// and fails when the committed build is older than them (rebuild: npm ci && npm run build).
const SOURCES = ["index.html", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"];

function sourceDigest(): string {
  const files = [...SOURCES, ...readdirSync("src").sort().map((name) => join("src", name))];
  const hash = createHash("sha256");
  for (const file of files) hash.update(file + "\n").update(readFileSync(file)).update("\n");
  return hash.digest("hex");
}

function buildInfo(): Plugin {
  return {
    name: "memtool-build-info",
    apply: "build",
    closeBundle() {
      writeFileSync(join(OUT, "build-info.json"), JSON.stringify({ sources_sha256: sourceDigest() }, null, 2) + "\n");
    },
  };
}

const OUT = "../layers/core/memtool/runtime/console_files";

// Served by the local runtime at /console/ (memtool.runtime.console); the build is committed so
// `pip install` needs no Node.js.
export default defineConfig({
  base: "/console/",
  plugins: [buildInfo()],
  build: {
    outDir: OUT,
    emptyOutDir: true,
    chunkSizeWarningLimit: 1500,
  },
});
