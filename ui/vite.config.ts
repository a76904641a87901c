/**
 * The watermark views as one UMD bundle, the shape Airflow's UI loads for a plugin's react_apps
 * (AIP-68; Airflow's react_plugin_template and the Edge3 provider build theirs the same way).
 *
 * React, ReactDOM, the JSX runtime, React Router, Chakra UI and Emotion are the host page's own
 * copies (the globals Airflow's UI sets before it loads a plugin): the views render inside the UI's
 * ChakraProvider, so its theme and colour mode apply, and its router owns the URL (deep links, back).
 * Only recharts (and what it needs) is bundled.
 *
 * The bundle is written into the Python package (watermark_ops/airflow/static/), which the wheel
 * carries: installing the wheel needs no node. `make ui` builds it when it is missing or stale.
 */
import { createHash } from "node:crypto";
import { resolve } from "node:path";
import { defineConfig, type Plugin } from "vite";

import { VIEW_NAMES } from "./src/names";

const hostGlobals: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "react-router-dom": "ReactRouterDOM",
  "@chakra-ui/react": "ChakraUI",
  "@emotion/react": "EmotionReact",
};

const BUNDLE = "watermark-views.umd.js";

/** watermark-views.json beside the bundle: the view names (the Python plugin's react_apps) and the bundle's SHA-256. */
function manifest(): Plugin {
  return {
    name: "watermark-views-manifest",
    generateBundle(_options, bundle) {
      const chunk = bundle[BUNDLE];
      const code = chunk && chunk.type === "chunk" ? chunk.code : "";
      this.emitFile({
        type: "asset",
        fileName: "watermark-views.json",
        source: JSON.stringify({ bundle: BUNDLE, sha256: createHash("sha256").update(code).digest("hex"), views: VIEW_NAMES }, null, 2) + "\n",
      });
    },
  };
}

export default defineConfig({
  plugins: [manifest()],
  esbuild: { jsx: "automatic", legalComments: "none" },
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  build: {
    outDir: resolve(__dirname, "../plugins/watermark_ops/airflow/static"),
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 1200,
    lib: {
      entry: resolve(__dirname, "src/main.tsx"),
      formats: ["umd"],
      name: "AirflowPlugin",
      fileName: () => BUNDLE,
    },
    rollupOptions: {
      external: Object.keys(hostGlobals),
      output: { globals: hostGlobals, exports: "default" },
    },
  },
});
