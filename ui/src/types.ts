/** The JSON shapes the views read (watermark_ops.core.overview and watermark_ops.airflow.ui). */

export interface StateStoreColumn {
  has_state_folder: boolean;
  rows: number | null;
  chain_length: number | null;
  bounded: boolean | null;
  codes: string[];
  operators: number;
}

export interface OverviewRow {
  name: string;
  location: string;
  query_id: string | null;
  head_batch_id: number | null;
  in_flight_batch: number | null;
  watermark_ms: number | null;
  lag_ms: number | null;
  lag_basis: string | null;
  state: string | null;
  /** The state the row counts under (core.overview.state_key): "not_run", "error", or its state. */
  state_key: string;
  alarm: boolean;
  reason: string | null;
  audit_status: string | null;
  findings: number;
  errors: number;
  warnings: number;
  rules: string[];
  latest_batch_ms: number | null;
  error: string | null;
  rank: number;
  /** How the header counts the row (core.overview.severity): "problem", "warning", or null. */
  severity: "problem" | "warning" | null;
  state_store: StateStoreColumn | null;
  refused_restart: { at_ms?: number; message?: string; [key: string]: unknown } | null;
  url: string | null;
  address?: string | null;
  dag_ids: string[];
  problem?: string | null;
  late_rows_uncorrected?: number | null;
}

export interface Overview {
  evaluated_at: string;
  total: number;
  page: number;
  page_size: number;
  pages: number;
  problems: number;
  warnings: number;
  states: Record<string, number>;
  checkpoints: OverviewRow[];
}

export interface ChartPoint {
  batch_id: number;
  watermark_ms: number | null;
  timestamp_ms: number | null;
  next_watermark_ms: number | null;
  committed: boolean;
  regressed: boolean;
  input_rows: number | null;
  rows_late: number | null;
  run_start: { run: number; run_tag: string | null; run_id: string } | null;
}

export interface Finding {
  rule: string;
  severity: string;
  batch_id: number | null;
  file: string | null;
  message: string;
}

export interface Run {
  run_id: string;
  /** 1-based position among the checkpoint's runs (the dag-run endpoint sets it). */
  number?: number;
  run_tag: string | null;
  batch_ids: number[];
  started_ms: number | null;
  input_rows: number;
  rows_late: number | null;
  rows_late_recovered?: number | null;
  rows_late_dropped?: number | null;
  drop_rate: number | null;
  late_rows_known: boolean;
  late_rows_unknown_reason: string | null;
  late_partial_aggregates_spark: number;
  corrections?: number | null;
}

export interface Operator {
  operator_id: number;
  name: string;
  provider: string;
  partitions: number;
  rows: number | null;
  bounded_by_watermark: boolean | null;
  bound_reason: string | null;
  chain_length: number | null;
  bytes_on_disk: number | null;
  series?: { batch_ids: number[]; rows: Array<number | null>; removed: Array<number | null> };
}

export interface Preflight {
  verdict: string;
  head_batch_id: number | null;
  spark_version: string | null;
  findings: Finding[];
}

export interface Detail {
  name: string;
  location: string;
  evaluated_at_ms: number;
  row: OverviewRow;
  state: string | null;
  classification: { reasons: string[]; hints: string[]; lag_ms: number | null; lag_basis: string | null;
    data_interval: { start_ms: number; end_ms: number } | null } | null;
  audit: { status: string; findings: Finding[] };
  chart: { total: number; shown: number; limit: number; first_shown_batch_id: number | null; points: ChartPoint[];
    restarts: Array<{ batch_id: number; run: number; run_tag: string | null; run_id: string }> };
  runs: Run[];
  late_sink: string | null;
  corrections: Array<Record<string, unknown>>;
  advice: Array<{ landing: string; event_time_field: string; events: number; late_events: number;
    p99_ms: number | null; max_lateness_ms: number | null;
    advice: Array<{ target_drop_rate: number; spark_interval: string; drop_rate: number }>; problems: string[] }>;
  advice_why: string[];
  problems: string[];
  state_store: { operators: Operator[]; rows: number | null; bounded: boolean | null;
    findings: Finding[] } | null;
  preflight: Preflight | null;
  diagnosis: Record<string, unknown> | null;
}

export interface RunCheckpoint {
  name: string;
  address: string | null;
  error: string | null;
  runs: Run[];
  points: ChartPoint[];
  corrections: Array<Record<string, unknown>>;
  preflight: Preflight | null;
  problems: string[];
}

export interface DagRunDetail {
  dag_id: string;
  run_id: string;
  checkpoints: RunCheckpoint[];
}
