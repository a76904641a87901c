/**
 * The name of each view: the label Airflow's UI shows (menu entry, tab, dashboard section) and the
 * global the bundle sets for it (Airflow renders `globalThis[name]` when it is a component). The
 * build writes them into watermark-views.json, which the Python plugin reads: one source of truth.
 */
export const VIEW_NAMES = {
  nav: "Watermarks",
  dag: "Watermark",
  dag_run: "Watermark run",
  dashboard: "Watermark states",
} as const;

export type Destination = keyof typeof VIEW_NAMES;

/** The mount prefix of the plugin's FastAPI app (watermark_ops.airflow.plugin.URL_PREFIX). */
export const API_PREFIX = "watermark-ops";
