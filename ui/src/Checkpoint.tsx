/** One checkpoint: the chart, the runs' ledger, corrections, state per operator, findings, advice and the audit. */
import { Badge, Box, Code, Heading, HStack, Link, Stack, Table, Text } from "@chakra-ui/react";

import { apiUrl, useJson } from "./api";
import { WatermarkChart } from "./Chart";
import { Facts, Nothing, ProblemLines, Section, StateBadge, TableHead, WithData } from "./common";
import { bytes, count, duration, percent, utc } from "./format";
import type { Detail, Finding, Operator, Run } from "./types";

/**
 * The lag fact, labelled by what it is measured against. Against the run's data interval (a
 * backfill or catch-up of old data is judged by it) it is the lag; against the wall clock it is only
 * the watermark's age, which for historical data says nothing about freshness.
 */
export function lagFact(lagMs: number | null, basis: string | null): [string, string] {
  if (basis === "data_interval") return ["Lag (against the run's data interval)", duration(lagMs)];
  return ["Watermark age (wall clock)", duration(lagMs)];
}

function batchRange(ids: number[]): string {
  if (ids.length === 0) return "none";
  return ids.length === 1 ? String(ids[0]) : `${ids[0]}–${ids[ids.length - 1]}`;
}

export function FindingsTable({ findings, testId }: { findings: Finding[]; testId?: string }) {
  if (findings.length === 0) return <Nothing>No findings.</Nothing>;
  return (
    <Table.Root size="sm" data-testid={testId}>
      <TableHead columns={["Severity", "Rule", "Batch", "File", "What"]} />
      <Table.Body>
        {findings.map((f, i) => (
          <Table.Row key={`${f.rule}-${i}`}>
            <Table.Cell>
              <StateBadge state={f.severity === "error" ? "error" : f.severity} label={f.severity} />
            </Table.Cell>
            <Table.Cell>
              <Code>{f.rule}</Code>
            </Table.Cell>
            <Table.Cell>{f.batch_id ?? "—"}</Table.Cell>
            <Table.Cell wordBreak="break-all">{f.file ?? "—"}</Table.Cell>
            <Table.Cell>{f.message}</Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

export function RunsTable({ runs }: { runs: Run[] }) {
  if (runs.length === 0) return <Nothing>No run in the progress log.</Nothing>;
  return (
    <Table.Root size="sm" data-testid="runs-table">
      <TableHead columns={["Run", "Airflow run", "Started", "Batches", "Input rows>", "Late rows>", "Recovered>", "Dropped for good>", "Drop rate>"]} />
      <Table.Body>
        {runs.map((run, i) => (
          <Table.Row key={run.run_id} data-run-tag={run.run_tag ?? ""}>
            <Table.Cell>{run.number ?? i + 1}</Table.Cell>
            <Table.Cell wordBreak="break-all">{run.run_tag ?? "—"}</Table.Cell>
            <Table.Cell>{utc(run.started_ms)}</Table.Cell>
            <Table.Cell>{batchRange(run.batch_ids)}</Table.Cell>
            <Table.Cell textAlign="end">{count(run.input_rows)}</Table.Cell>
            <Table.Cell textAlign="end" title={run.late_rows_known ? undefined : run.late_rows_unknown_reason ?? undefined}>
              {run.late_rows_known ? count(run.rows_late) : <Badge colorPalette="orange">unknown</Badge>}
            </Table.Cell>
            <Table.Cell textAlign="end">{run.rows_late_recovered === undefined ? "—" : count(run.rows_late_recovered)}</Table.Cell>
            <Table.Cell textAlign="end">{run.rows_late_dropped === undefined ? "—" : count(run.rows_late_dropped)}</Table.Cell>
            <Table.Cell textAlign="end">{percent(run.drop_rate)}</Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

export function CorrectionsList({ corrections }: { corrections: Array<Record<string, unknown>> }) {
  if (corrections.length === 0) return <Nothing>No correction: no late row fell within the allowed lateness.</Nothing>;
  const keys = Array.from(new Set(corrections.flatMap((c) => Object.keys(c)))).slice(0, 9); // a session window's correction also has its retracts
  return (
    <Table.Root size="sm" data-testid="corrections-table">
      <Table.Header>
        <Table.Row>
          {keys.map((k) => (
            <Table.ColumnHeader key={k}>{k.replaceAll("_", " ")}</Table.ColumnHeader>
          ))}
        </Table.Row>
      </Table.Header>
      <Table.Body>
        {corrections.map((c, i) => (
          <Table.Row key={i}>
            {keys.map((k) => {
              const v = c[k];
              const text = typeof v === "number" && /_ms$/.test(k) ? utc(v) : typeof v === "object" ? JSON.stringify(v) : String(v ?? "—");
              return <Table.Cell key={k}>{text}</Table.Cell>;
            })}
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

function OperatorsTable({ operators }: { operators: Operator[] }) {
  if (operators.length === 0) return <Nothing>No stateful operator.</Nothing>;
  return (
    <Table.Root size="sm" data-testid="state-table">
      <TableHead columns={["Operator", "Store", "Partitions>", "State rows>", "Bounded by the watermark", "On disk>"]} />
      <Table.Body>
        {operators.map((op) => (
          <Table.Row key={op.operator_id}>
            <Table.Cell>
              {op.operator_id} · {op.name}
            </Table.Cell>
            <Table.Cell>{op.provider}</Table.Cell>
            <Table.Cell textAlign="end">{op.partitions}</Table.Cell>
            <Table.Cell textAlign="end">{count(op.rows)}</Table.Cell>
            <Table.Cell title={op.bound_reason ?? undefined}>
              {op.bounded_by_watermark === null ? "unknown" : op.bounded_by_watermark ? "yes" : (
                <Badge colorPalette="red">no: grows forever</Badge>
              )}
            </Table.Cell>
            <Table.Cell textAlign="end">{bytes(op.bytes_on_disk)}</Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

function CheckpointBody({ detail, address }: { detail: Detail; address: string }) {
  const row = detail.row;
  const c = detail.classification;
  const findings = [...detail.audit.findings, ...(detail.state_store?.findings ?? [])];
  return (
    <Stack gap={4} data-testid="checkpoint-view" data-checkpoint={address}>
      <Stack gap={2}>
        <HStack gap={3} wrap="wrap">
          <Heading as="h2" size="lg" data-testid="checkpoint-name">
            {detail.name}
          </Heading>
          <StateBadge state={detail.state} />
          <StateBadge state={detail.audit.status} label={`audit ${detail.audit.status}`} />
          {detail.preflight ? <StateBadge state={detail.preflight.verdict} label={`restart ${detail.preflight.verdict}`} /> : null}
        </HStack>
        <Text color="fg.muted" fontSize="sm" wordBreak="break-all">
          {detail.location}
        </Text>
        <Facts
          items={[
            ["Watermark", row.watermark_ms ? utc(row.watermark_ms) : "none yet"],
            ["Latest batch", row.latest_batch_ms ? `${utc(row.latest_batch_ms)} (${duration(detail.evaluated_at_ms - row.latest_batch_ms)} ago)` : "—"],
            ["Head batch", row.head_batch_id ?? "—"],
            lagFact(c?.lag_ms ?? row.lag_ms, c?.lag_basis ?? row.lag_basis),
            ["Evaluated", utc(detail.evaluated_at_ms)],
          ]}
        />
        {c?.reasons.length ? (
          <Text fontSize="sm" data-testid="reason">
            {c.reasons[0]}
          </Text>
        ) : null}
        {row.error ? (
          <Text fontSize="sm" color="fg.error">
            {row.error}
          </Text>
        ) : null}
      </Stack>
      <Section title="Watermark and batch time" testId="chart-section">
        {detail.chart.points.length ? (
          <WatermarkChart points={detail.chart.points} restarts={detail.chart.restarts} total={detail.chart.total} />
        ) : (
          <Nothing>No batch with an offsets file.</Nothing>
        )}
      </Section>
      <Section title="Runs: input, late rows and corrections" testId="runs-section">
        <RunsTable runs={detail.runs} />
        {detail.runs.some((r) => !r.late_rows_known) ? (
          <Text fontSize="xs" color="fg.muted" mt={2}>
            Unknown: {detail.runs.find((r) => !r.late_rows_known)?.late_rows_unknown_reason}
          </Text>
        ) : null}
      </Section>
      {detail.corrections.length ? (
        <Section title="Corrections" testId="corrections-section">
          <CorrectionsList corrections={detail.corrections} />
        </Section>
      ) : null}
      <Section title="State per operator" testId="state-section">
        {detail.state_store ? <OperatorsTable operators={detail.state_store.operators} /> : <Nothing>No state folder.</Nothing>}
      </Section>
      <Section title="Findings" testId="findings-section">
        <FindingsTable findings={findings} testId="findings-table" />
      </Section>
      <Section title="Delay threshold advice" testId="advice-section">
        {detail.advice.length ? (
          <Stack gap={2}>
            {detail.advice.map((a) => (
              <Box key={a.landing} fontSize="sm">
                <Text>
                  {a.landing} ({a.event_time_field}): {count(a.events)} events, {count(a.late_events)} behind the newest seen, p99{" "}
                  {duration(a.p99_ms)}, worst {duration(a.max_lateness_ms)}
                </Text>
                {a.advice.map((x) => (
                  <Text key={x.target_drop_rate} color="fg.muted">
                    to drop at most {percent(x.target_drop_rate)}: <Code>withWatermark(…, "{x.spark_interval}")</Code>
                  </Text>
                ))}
              </Box>
            ))}
          </Stack>
        ) : (
          <Nothing>{detail.advice_why[0] ?? "No landing folder is known for this checkpoint."}</Nothing>
        )}
      </Section>
      {detail.problems.length ? (
        <Section title="Problems reading it" testId="problems-section">
          <ProblemLines problems={detail.problems} />
        </Section>
      ) : null}
      <Text fontSize="xs" color="fg.muted">
        The same data as JSON:{" "}
        <Link href={apiUrl(`api/checkpoints/${address}`)} colorPalette="brand">
          {`/watermark-ops/api/checkpoints/${address}`}
        </Link>
      </Text>
    </Stack>
  );
}

/** The checkpoint at `address` ("root/path", as the overview's links give it). */
export function CheckpointView({ address }: { address: string }) {
  const loaded = useJson<Detail>(apiUrl(`api/checkpoints/${address}`));
  return <WithData loaded={loaded}>{(detail) => <CheckpointBody detail={detail} address={address} />}</WithData>;
}
