/** Readable times: UTC marked, durations in words, epoch milliseconds only when asked. */

const UNITS: Array<[number, string]> = [
  [365.25 * 86_400_000, "years"],
  [86_400_000, "d"],
  [3_600_000, "h"],
  [60_000, "min"],
  [1000, "s"],
];

/** A duration in milliseconds as words: "4 h 35 min", "13.9 years", "850 ms"; "—" for null. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  const sign = ms < 0 ? "−" : "";
  let rest = Math.abs(ms);
  if (rest >= UNITS[0][0]) return `${sign}${(rest / UNITS[0][0]).toFixed(1)} years`;
  if (rest < 1000) return `${sign}${Math.round(rest)} ms`;
  const parts: string[] = [];
  for (const [size, unit] of UNITS.slice(1)) {
    if (rest >= size && parts.length < 2) {
      const n = Math.floor(rest / size);
      parts.push(`${n} ${unit}`);
      rest -= n * size;
    } else if (parts.length) break;
  }
  return sign + parts.join(" ");
}

/** An instant (epoch ms UTC) as "2013-01-01 13:33:00 UTC"; "—" for null. */
export function utc(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  const iso = new Date(ms).toISOString();
  const text = iso.endsWith(".000Z") ? iso.slice(0, 19) : iso.slice(0, 23);
  return `${text.replace("T", " ")} UTC`;
}

/** A short instant for chart axes (UTC), as precise as the span needs: "2013-01-01", "01-01 13:33", "13:33:05". */
export function shortUtc(ms: number, spanMs: number): string {
  const iso = new Date(ms).toISOString();
  if (spanMs > 180 * 86_400_000) return iso.slice(0, 10);
  if (spanMs > 86_400_000) return `${iso.slice(5, 10)} ${iso.slice(11, 16)}`;
  return spanMs > 3_600_000 ? iso.slice(11, 16) : iso.slice(11, 19);
}

/** A count with thousands separators; "unknown" for null (never 0 for an unknown figure). */
export function count(n: number | null | undefined): string {
  return n === null || n === undefined ? "unknown" : n.toLocaleString("en-US");
}

/** A rate 0..1 as a percentage. */
export function percent(rate: number | null | undefined): string {
  if (rate === null || rate === undefined) return "—";
  return `${(rate * 100).toFixed(rate < 0.001 && rate > 0 ? 3 : 1)} %`;
}

/** A byte size: "2.0 KiB". */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}
