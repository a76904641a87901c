/**
 * The watermark and the batch time over batch ids: hover a batch for its values, zoom to a run
 * (the run picker, kept in the URL) or to any span (the brush), restarts marked. Colours are the
 * theme's CSS variables (Chakra tokens), so light, dark and a deployment's theme apply.
 */
import { Box, HStack, NativeSelect, Stack, Text } from "@chakra-ui/react";
import { useMemo } from "react";
import { useSearchParams } from "react-router-dom";
import {
  Brush,
  CartesianGrid,
  ComposedChart,
  Line,
  ReferenceLine,
  ResponsiveContainer,
  Tooltip,
  XAxis,
  YAxis,
} from "recharts";

import { count, shortUtc, utc } from "./format";
import type { ChartPoint } from "./types";

const TOKEN = {
  watermark: "var(--chakra-colors-brand-solid, var(--chakra-colors-blue-solid))",
  batchTime: "var(--chakra-colors-fg-muted)",
  restart: "var(--chakra-colors-orange-solid)",
  regressed: "var(--chakra-colors-red-solid)",
  grid: "var(--chakra-colors-border)",
  axis: "var(--chakra-colors-fg-muted)",
  panel: "var(--chakra-colors-bg-panel)",
};

interface Row extends ChartPoint {
  wm: number | null;
  run: number | null;
}

export interface Restart {
  batch_id: number;
  run: number;
  run_tag: string | null;
}

function BatchTooltip({ active, payload, raw }: { active?: boolean; payload?: Array<{ payload: Row }>; raw: boolean }) {
  if (!active || !payload || payload.length === 0) return null;
  const p = payload[0].payload;
  const lines: Array<[string, string]> = [
    ["Watermark", p.watermark_ms ? utc(p.watermark_ms) : "none yet"],
    ["Batch time", utc(p.timestamp_ms)],
    ["Input rows", count(p.input_rows)],
    ["Late rows", count(p.rows_late)],
  ];
  if (p.next_watermark_ms !== null && p.next_watermark_ms !== p.watermark_ms) {
    lines.push(["Next watermark", utc(p.next_watermark_ms)]);
  }
  if (raw) {
    lines.push(["Watermark (epoch ms)", String(p.watermark_ms)], ["Batch time (epoch ms)", String(p.timestamp_ms)]);
  }
  return (
    <Box bg="bg.panel" borderWidth="1px" borderColor="border" borderRadius="md" p={2} boxShadow="md"
      data-testid="batch-tooltip" data-batch-id={p.batch_id}>
      <Text fontWeight="semibold" mb={1}>
        Batch {p.batch_id}
        {p.run !== null ? ` · run ${p.run}` : ""}
        {!p.committed ? " · in flight" : ""}
        {p.regressed ? " · watermark regressed" : ""}
      </Text>
      {lines.map(([label, value]) => (
        <HStack key={label} justify="space-between" gap={4} fontSize="sm">
          <Text color="fg.muted">{label}</Text>
          <Text data-field={label}>{value}</Text>
        </HStack>
      ))}
    </Box>
  );
}

function RegressedDot(props: { cx?: number; cy?: number; payload?: Row }) {
  const { cx, cy, payload } = props;
  if (cx === undefined || cy === undefined || !payload) return null;
  return (
    <circle cx={cx} cy={cy} r={payload.regressed ? 5 : 2.5} fill={payload.regressed ? TOKEN.regressed : TOKEN.watermark}
      stroke="none" data-batch-id={payload.batch_id} className="watermark-dot" />
  );
}

/** The chart of `points` (the newest batches the server sends), restarts marked. */
export function WatermarkChart({ points, restarts, total }: { points: ChartPoint[]; restarts: Restart[]; total: number }) {
  const [params, setParams] = useSearchParams();
  const raw = params.get("ms") === "1";
  const runFilter = params.get("run");

  const rows: Row[] = useMemo(() => {
    let run: number | null = null;
    return points.map((p) => {
      if (p.run_start) run = p.run_start.run;
      return { ...p, wm: p.watermark_ms ? p.watermark_ms : null, run };
    });
  }, [points]);
  const runs = useMemo(() => Array.from(new Set(rows.map((r) => r.run).filter((r): r is number => r !== null))), [rows]);
  const shown = runFilter ? rows.filter((r) => String(r.run) === runFilter) : rows;

  const times = (key: "wm" | "timestamp_ms") => shown.map((r) => r[key]).filter((v): v is number => v !== null);
  const span = (values: number[]) => (values.length ? Math.max(...values) - Math.min(...values) : 0);
  const wmSpan = span(times("wm"));
  const btSpan = span(times("timestamp_ms"));

  const setParam = (key: string, value: string | null) => {
    const next = new URLSearchParams(params);
    if (value === null) next.delete(key);
    else next.set(key, value);
    setParams(next);
  };

  return (
    <Stack gap={2} data-testid="watermark-chart">
      <HStack gap={4} wrap="wrap">
        <HStack gap={2}>
          <Text fontSize="sm" color="fg.muted">
            Zoom to
          </Text>
          <NativeSelect.Root size="sm" width="12rem">
            <NativeSelect.Field aria-label="Zoom to a run" value={runFilter ?? ""}
              onChange={(e) => setParam("run", e.currentTarget.value || null)} data-testid="run-picker">
              <option value="">every run shown</option>
              {runs.map((r) => (
                <option key={r} value={String(r)}>
                  run {r}
                </option>
              ))}
            </NativeSelect.Field>
            <NativeSelect.Indicator />
          </NativeSelect.Root>
        </HStack>
        <Text fontSize="sm" color="fg.muted">
          {shown.length} of {total} batches{total > points.length ? ` (the newest ${points.length} drawn)` : ""}
        </Text>
        <Box as="label" fontSize="sm" color="fg.muted">
          <input type="checkbox" checked={raw} onChange={(e) => setParam("ms", e.currentTarget.checked ? "1" : null)} />{" "}
          epoch ms in the tooltip
        </Box>
      </HStack>
      <Box height="320px" width="100%">
        <ResponsiveContainer width="100%" height="100%">
          <ComposedChart data={shown} margin={{ top: 16, right: 16, bottom: 8, left: 16 }}>
            <CartesianGrid stroke={TOKEN.grid} strokeDasharray="3 3" />
            <XAxis dataKey="batch_id" type="number" domain={["dataMin", "dataMax"]} allowDecimals={false}
              stroke={TOKEN.axis} tick={{ fill: TOKEN.axis, fontSize: 12 }}
              label={{ value: "batch id", position: "insideBottomRight", offset: -4, fill: TOKEN.axis, fontSize: 12 }} />
            <YAxis yAxisId="wm" type="number" domain={["dataMin", "dataMax"]} width={96} stroke={TOKEN.watermark}
              tick={{ fill: TOKEN.axis, fontSize: 12 }} tickFormatter={(v: number) => shortUtc(v, wmSpan)} />
            <YAxis yAxisId="bt" orientation="right" type="number" domain={["dataMin", "dataMax"]} width={96}
              stroke={TOKEN.batchTime} tick={{ fill: TOKEN.axis, fontSize: 12 }}
              tickFormatter={(v: number) => shortUtc(v, btSpan)} />
            <Tooltip content={<BatchTooltip raw={raw} />} cursor={{ stroke: TOKEN.axis }} isAnimationActive={false} />
            {restarts
              .filter((r) => shown.some((p) => p.batch_id === r.batch_id))
              .map((r) => (
                <ReferenceLine key={r.batch_id} yAxisId="wm" x={r.batch_id} stroke={TOKEN.restart} strokeDasharray="4 4"
                  label={{ value: `run ${r.run}`, position: "top", fill: TOKEN.axis, fontSize: 11 }} />
              ))}
            <Line yAxisId="bt" dataKey="timestamp_ms" name="batch time" type="stepAfter" stroke={TOKEN.batchTime}
              strokeDasharray="5 3" dot={false} isAnimationActive={false} />
            <Line yAxisId="wm" dataKey="wm" name="watermark" type="stepAfter" stroke={TOKEN.watermark} strokeWidth={2}
              dot={<RegressedDot />} activeDot={{ r: 5, stroke: TOKEN.panel, fill: TOKEN.watermark }} connectNulls={false}
              isAnimationActive={false} />
            {shown.length > 30 ? (
              <Brush dataKey="batch_id" height={22} stroke={TOKEN.axis} fill={TOKEN.panel} travellerWidth={8} />
            ) : null}
          </ComposedChart>
        </ResponsiveContainer>
      </Box>
      <HStack gap={6} fontSize="sm" color="fg.muted">
        <Text>
          <Box as="span" color={TOKEN.watermark} fontWeight="bold">
            ━
          </Box>{" "}
          watermark (left axis, UTC)
        </Text>
        <Text>
          <Box as="span" color={TOKEN.batchTime}>
            ╌
          </Box>{" "}
          batch time (right axis, UTC)
        </Text>
        <Text>
          <Box as="span" color={TOKEN.restart}>
            ┆
          </Box>{" "}
          restart
        </Text>
      </HStack>
    </Stack>
  );
}
