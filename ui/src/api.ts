/** The plugin's JSON endpoints (the same JSON the server-rendered pages render), read with the UI's session. */
import { useEffect, useState } from "react";

import { API_PREFIX } from "./names";

/** An absolute URL under the plugin's mount, from the UI's base (Airflow sets <base href>). */
export function apiUrl(path: string, params: Record<string, string | number | undefined> = {}): string {
  const url = new URL(`${API_PREFIX}/${path.replace(/^\//, "")}`, document.baseURI);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== "") url.searchParams.set(key, String(value));
  }
  return url.toString();
}

export type Loaded<T> =
  | { status: "loading" }
  | { status: "error"; code: number | null; message: string }
  | { status: "ok"; data: T };

/** GET one JSON endpoint, again whenever `url` changes (and every `refreshSeconds`, when given). */
export function useJson<T>(url: string | null, refreshSeconds?: number): Loaded<T> {
  const [state, setState] = useState<Loaded<T>>({ status: "loading" });
  const [tick, setTick] = useState(0);

  useEffect(() => {
    if (!refreshSeconds) return undefined;
    const timer = window.setInterval(() => setTick((n) => n + 1), refreshSeconds * 1000);
    return () => window.clearInterval(timer);
  }, [refreshSeconds]);

  useEffect(() => {
    if (url === null) return undefined;
    const controller = new AbortController();
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" }, signal: controller.signal })
      .then(async (response) => {
        if (!response.ok) {
          let message = `${response.status} ${response.statusText}`;
          try {
            const body = await response.json();
            if (body && typeof body.detail === "string") message = body.detail;
          } catch {
            // not JSON: the status says it
          }
          setState({ status: "error", code: response.status, message });
          return;
        }
        setState({ status: "ok", data: (await response.json()) as T });
      })
      .catch((error: unknown) => {
        if (controller.signal.aborted) return;
        setState({ status: "error", code: null, message: String(error) });
      });
    return () => controller.abort();
  }, [url, tick]);

  return state;
}
