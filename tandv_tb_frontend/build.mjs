// Bundle the Numerics tab into one ES module: `node build.mjs [outdir]`.
// Deterministic: same sources and lockfile give the same bytes (no timestamps, no paths).
// `node build.mjs --bench FILE` instead bundles the heatmap benchmark (src/bench.ts) into one
// classic script that defines `tandvBench.benchHeatmap`; it is never shipped: the browser
// test evaluates it inside the open tab (tests/browser_helpers.py, heatmap_bench_script).
import { build } from "esbuild";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

if (process.argv[2] === "--bench") {
  await build({
    absWorkingDir: here,
    entryPoints: ["src/bench.ts"],
    outfile: resolve(process.argv[3]),
    bundle: true,
    format: "iife",
    globalName: "tandvBench",
    platform: "browser",
    target: ["es2020"],
    minify: true,
    loader: { ".css": "text" },
    logLevel: "warning",
  });
  process.exit(0);
}

const outdir = resolve(process.argv[2] ?? resolve(here, "../tandv_tb/static"));
mkdirSync(outdir, { recursive: true });

const result = await build({
  absWorkingDir: here,
  entryPoints: ["src/index.ts"],
  outfile: resolve(outdir, "index.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  minify: true,
  sourcemap: false,
  legalComments: "eof",
  charset: "utf8",
  loader: { ".css": "text" },
  logLevel: "warning",
  metafile: true,
});

// The licences of every package inside the bundle, beside it.
const packages = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
  const match = input.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\//);
  if (match) packages.add(match[1]);
}
const notices = [...packages].sort().map((name) => {
  const folder = resolve(here, "node_modules", name);
  const meta = JSON.parse(readFileSync(resolve(folder, "package.json"), "utf8"));
  const file = ["LICENSE", "LICENSE.md", "LICENSE.txt", "license"].find((f) =>
    existsSync(resolve(folder, f)),
  );
  const text = file
    ? readFileSync(resolve(folder, file), "utf8").trim()
    : `License: ${meta.license}`;
  return `${name} ${meta.version} (${meta.license})\n\n${text}\n`;
});
writeFileSync(
  resolve(outdir, "THIRD_PARTY_LICENSES.txt"),
  `Third-party code bundled into index.js\n\n${notices.join("\n" + "-".repeat(72) + "\n\n")}`,
);
