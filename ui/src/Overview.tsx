/** The overview of watched checkpoints, problems first; a row opens its checkpoint (deep-linkable). */
import { Box, Button, Code, Heading, HStack, Link, Stack, Table, Text } from "@chakra-ui/react";
import { useSearchParams } from "react-router-dom";

import { apiUrl, useJson } from "./api";
import { CheckpointView } from "./Checkpoint";
import { Nothing, StateBadge, TableHead, WithData } from "./common";
import { count, duration, utc } from "./format";
import type { Overview, OverviewRow } from "./types";

/** What is wrong with a row, in a few words, or null when nothing is. */
export function problemOf(row: OverviewRow): string | null {
  if (row.error) return row.state_key === "not_run" ? null : row.error;
  if (row.refused_restart) return "restart refused";
  if (row.rules.includes("watermark_regressed")) return "watermark regressed";
  if (row.alarm) return row.state ? row.state.replaceAll("_", " ") : "alarm";
  if (row.state_store?.codes.length) return row.state_store.codes.join(", ").replaceAll("_", " ");
  if (row.late_rows_uncorrected) return `${count(row.late_rows_uncorrected)} late rows not corrected`;
  if (row.errors || row.warnings) return row.rules.join(", ").replaceAll("_", " ");
  return null;
}

/** The colour of a row's Problem cell: the row's severity (core.overview.severity), the one the header counts it under. */
export function severityColor(row: OverviewRow): string {
  return row.severity === "problem" ? "fg.error" : row.severity === "warning" ? "fg.warning" : "fg.muted";
}

function OverviewTable({ rows, open }: { rows: OverviewRow[]; open: (address: string) => void }) {
  return (
    <Table.Root size="sm" interactive data-testid="overview-table">
      <TableHead columns={["State", "Checkpoint", "Problem", "Watermark", "Latest batch", "State rows>", "DAGs"]} />
      <Table.Body>
        {rows.map((row) => {
          const problem = problemOf(row);
          return (
            <Table.Row key={`${row.name}|${row.location}`} data-checkpoint={row.address ?? ""} data-rank={row.rank}>
              <Table.Cell>
                <StateBadge state={row.state_key} />
              </Table.Cell>
              <Table.Cell>
                {row.address ? (
                  <Link as="button" colorPalette="brand" onClick={() => open(row.address as string)} fontWeight="medium">
                    {row.name}
                  </Link>
                ) : (
                  <Text>{row.name}</Text>
                )}
              </Table.Cell>
              <Table.Cell color={severityColor(row)} maxW="28rem" data-severity={row.severity ?? "none"}>
                {problem ? (row.severity === "warning" ? `warning: ${problem}` : problem) : (row.error ?? "none")}
              </Table.Cell>
              <Table.Cell whiteSpace="nowrap">{row.watermark_ms ? utc(row.watermark_ms) : "—"}</Table.Cell>
              <Table.Cell whiteSpace="nowrap">{row.latest_batch_ms ? `${duration(Date.now() - row.latest_batch_ms)} ago` : "—"}</Table.Cell>
              <Table.Cell textAlign="end">{row.state_store ? count(row.state_store.rows) : "—"}</Table.Cell>
              <Table.Cell>
                {row.dag_ids.map((d) => (
                  <Code key={d} mr={1}>
                    {d}
                  </Code>
                ))}
              </Table.Cell>
            </Table.Row>
          );
        })}
      </Table.Body>
    </Table.Root>
  );
}

/** The overview (every checkpoint the user may see, or one DAG's), or the checkpoint `?checkpoint=` names. */
export function OverviewView({ dagId, title }: { dagId?: string; title: string }) {
  const [params, setParams] = useSearchParams();
  const address = params.get("checkpoint");
  const page = Number(params.get("page") ?? "1") || 1;
  const state = params.get("state") ?? undefined;
  const loaded = useJson<Overview>(address ? null : apiUrl("api/checkpoints", { page, dag_id: dagId, state }), 30);

  const go = (changes: Record<string, string | null>) => {
    const next = new URLSearchParams(params);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null) next.delete(k);
      else next.set(k, v);
    }
    setParams(next);
  };

  if (address) {
    return (
      <Box p={4}>
        <Button size="xs" variant="ghost" mb={2} onClick={() => go({ checkpoint: null, run: null, ms: null })}>
          ← {title}
        </Button>
        <CheckpointView address={address} />
      </Box>
    );
  }
  return (
    <Box p={4} data-testid={dagId ? "dag-view" : "overview-view"}>
      <WithData loaded={loaded}>
        {(data) => (
          <Stack gap={3}>
            <HStack justify="space-between" wrap="wrap">
              <Heading as="h2" size="lg">
                {title}
              </Heading>
              {state ? (
                <Button size="xs" variant="outline" onClick={() => go({ state: null, page: null })} data-testid="state-filter">
                  only {state.replaceAll("_", " ")} ✕
                </Button>
              ) : null}
              <Text color="fg.muted" fontSize="sm" data-testid="overview-totals">
                {data.total} checkpoints · {data.problems} with problems · {data.warnings} with warnings · evaluated{" "}
                {utc(Date.parse(data.evaluated_at))}
              </Text>
            </HStack>
            {data.checkpoints.length ? (
              <OverviewTable rows={data.checkpoints} open={(a) => go({ checkpoint: a })} />
            ) : (
              <Nothing>{dagId ? "This DAG touches no checkpoint you may see." : "No checkpoint is watched yet."}</Nothing>
            )}
            {data.pages > 1 ? (
              <HStack gap={2}>
                <Button size="xs" disabled={data.page <= 1} onClick={() => go({ page: String(data.page - 1) })}>
                  previous
                </Button>
                <Text fontSize="sm">
                  page {data.page} of {data.pages}
                </Text>
                <Button size="xs" disabled={data.page >= data.pages} onClick={() => go({ page: String(data.page + 1) })}>
                  next
                </Button>
              </HStack>
            ) : null}
          </Stack>
        )}
      </WithData>
    </Box>
  );
}
