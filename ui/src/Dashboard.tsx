/** The home dashboard's widget: how many checkpoints are in each state, each linking to the overview filtered by it. */
import { Box, Heading, HStack, Link, Stat, Text } from "@chakra-ui/react";
import { useNavigate } from "react-router-dom";

import { apiUrl, useJson } from "./api";
import { palette, WithData } from "./common";
import type { Overview } from "./types";

const ORDER = ["error", "regressed", "stalled", "jumped_ahead", "lagging", "watermark_unknown", "advancing", "idle", "not_run"];

export function DashboardView() {
  const loaded = useJson<Overview>(apiUrl("api/checkpoints", { page_size: 1 }), 60);
  const navigate = useNavigate();
  return (
    <Box borderWidth="1px" borderColor="border" borderRadius="md" p={4} data-testid="dashboard-view">
      <HStack justify="space-between" mb={2}>
        <Heading as="h3" size="md">
          Watermarks
        </Heading>
        <Link colorPalette="brand" onClick={() => navigate("/plugin/watermarks")} cursor="pointer" fontSize="sm">
          all checkpoints →
        </Link>
      </HStack>
      <WithData loaded={loaded}>
        {(data) => {
          const states = Object.entries(data.states).sort(
            ([a], [b]) => (ORDER.indexOf(a) + 100) % 100 - (ORDER.indexOf(b) + 100) % 100 || a.localeCompare(b),
          );
          if (!states.length) return <Text color="fg.muted">No checkpoint is watched yet.</Text>;
          return (
            <HStack gap={4} wrap="wrap">
              {states.map(([state, n]) => (
                <Stat.Root key={state} minW="7rem" borderWidth="1px" borderColor="border" borderRadius="md" p={2}
                  cursor="pointer" onClick={() => navigate(`/plugin/watermarks?state=${encodeURIComponent(state)}`)}
                  data-testid="state-count" data-state={state}>
                  <Stat.Label color={`${palette(state)}.fg`}>{state.replaceAll("_", " ")}</Stat.Label>
                  <Stat.ValueText data-count={n}>{n}</Stat.ValueText>
                </Stat.Root>
              ))}
            </HStack>
          );
        }}
      </WithData>
    </Box>
  );
}
