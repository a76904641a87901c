/** A DAG run's tab: for each checkpoint the DAG touches, that run's batches, late rows, corrections and restart preflight. */
import { Box, Heading, HStack, Link, Stack, Table, Text } from "@chakra-ui/react";
import { useNavigate } from "react-router-dom";

import { apiUrl, useJson } from "./api";
import { CorrectionsList, FindingsTable, RunsTable } from "./Checkpoint";
import { Nothing, ProblemLines, Section, StateBadge, TableHead, WithData } from "./common";
import { count, utc } from "./format";
import type { DagRunDetail, RunCheckpoint } from "./types";

function Batches({ checkpoint }: { checkpoint: RunCheckpoint }) {
  if (checkpoint.points.length === 0) return <Nothing>This run executed no batch of it.</Nothing>;
  return (
    <Table.Root size="sm" data-testid="run-batches">
      <TableHead columns={["Batch", "Watermark", "Batch time", "Input rows>", "Late rows>", "Committed"]} />
      <Table.Body>
        {checkpoint.points.map((p) => (
          <Table.Row key={p.batch_id} data-batch-id={p.batch_id}>
            <Table.Cell>{p.batch_id}</Table.Cell>
            <Table.Cell>{p.watermark_ms ? utc(p.watermark_ms) : "none yet"}</Table.Cell>
            <Table.Cell>{utc(p.timestamp_ms)}</Table.Cell>
            <Table.Cell textAlign="end">{count(p.input_rows)}</Table.Cell>
            <Table.Cell textAlign="end">{count(p.rows_late)}</Table.Cell>
            <Table.Cell>{p.committed ? "yes" : <StateBadge state="warning" label="in flight" />}</Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

function OneCheckpoint({ checkpoint }: { checkpoint: RunCheckpoint }) {
  const navigate = useNavigate();
  return (
    <Section title={checkpoint.name} testId="run-checkpoint">
      <Stack gap={3}>
        {checkpoint.address ? (
          <Link colorPalette="brand" fontSize="sm" cursor="pointer"
            onClick={() => navigate(`/plugin/watermarks?checkpoint=${encodeURIComponent(checkpoint.address as string)}`)}>
            the whole checkpoint →
          </Link>
        ) : null}
        {checkpoint.error ? <Text color="fg.error">{checkpoint.error}</Text> : null}
        <RunsTable runs={checkpoint.runs} />
        <Batches checkpoint={checkpoint} />
        {checkpoint.corrections.length ? <CorrectionsList corrections={checkpoint.corrections} /> : null}
        {checkpoint.preflight ? (
          <Box data-testid="preflight">
            <HStack gap={2} mb={1}>
              <Text fontWeight="medium">Restart preflight</Text>
              <StateBadge state={checkpoint.preflight.verdict} label={checkpoint.preflight.verdict} />
            </HStack>
            {checkpoint.preflight.findings.length ? <FindingsTable findings={checkpoint.preflight.findings} /> : null}
          </Box>
        ) : null}
        <ProblemLines problems={checkpoint.problems} />
      </Stack>
    </Section>
  );
}

export function DagRunView({ dagId, runId }: { dagId?: string; runId?: string }) {
  const url = dagId && runId ? apiUrl(`api/dags/${encodeURIComponent(dagId)}/runs/${encodeURIComponent(runId)}`) : null;
  const loaded = useJson<DagRunDetail>(url);
  return (
    <Box p={4} data-testid="dag-run-view">
      <WithData loaded={loaded}>
        {(data) => (
          <Stack gap={4}>
            <Heading as="h2" size="lg">
              Watermarks of this run
            </Heading>
            {data.checkpoints.length ? (
              data.checkpoints.map((c) => <OneCheckpoint key={c.name} checkpoint={c} />)
            ) : (
              <Nothing>This DAG touches no checkpoint you may see.</Nothing>
            )}
          </Stack>
        )}
      </WithData>
    </Box>
  );
}
