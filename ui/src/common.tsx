/** Small pieces every view shares: state badges, loading and error boxes, sections, key-value lists. */
import { Alert, Badge, Box, Heading, HStack, Spinner, Stack, Table, Text } from "@chakra-ui/react";
import type { ReactNode } from "react";

import type { Loaded } from "./api";

/** The Chakra colour palette of a watermark state or audit status (tokens only: the theme decides the colours). */
export function palette(state: string | null | undefined): string {
  switch (state) {
    case "advancing":
    case "ok":
    case "go":
      return "green";
    case "idle":
    case "not_run":
      return "gray";
    case "lagging":
    case "warning":
    case "watermark_unknown":
    case "caution":
      return "orange";
    case "stalled":
    case "regressed":
    case "jumped_ahead":
    case "violation":
    case "unreadable":
    case "error":
    case "refused":
    case "no_go":
    case "stop":
      return "red";
    default:
      return "gray";
  }
}

/** A state as a badge: "stalled" in red, "advancing" in green; "unknown" when null. */
export function StateBadge({ state, label }: { state: string | null | undefined; label?: string }) {
  return (
    <Badge colorPalette={palette(state)} variant="subtle" data-state={state ?? "unknown"}>
      {label ?? (state ? state.replaceAll("_", " ") : "unknown")}
    </Badge>
  );
}

/** The loading spinner, the error box, or the children with the data. */
export function WithData<T>({ loaded, children }: { loaded: Loaded<T>; children: (data: T) => ReactNode }) {
  if (loaded.status === "loading") {
    return (
      <HStack p={4} gap={2} data-testid="loading">
        <Spinner size="sm" />
        <Text color="fg.muted">Reading the checkpoints…</Text>
      </HStack>
    );
  }
  if (loaded.status === "error") {
    const title = loaded.code === 403 ? "Not yours to see" : loaded.code === 404 ? "Not found" : "Could not load";
    return (
      <Alert.Root status="error" m={2} data-testid="load-error">
        <Alert.Indicator />
        <Alert.Content>
          <Alert.Title>{title}</Alert.Title>
          <Alert.Description>{loaded.message}</Alert.Description>
        </Alert.Content>
      </Alert.Root>
    );
  }
  return <>{children(loaded.data)}</>;
}

/** A titled block of a page. */
export function Section({ title, children, testId }: { title: string; children: ReactNode; testId?: string }) {
  return (
    <Box as="section" borderWidth="1px" borderColor="border" borderRadius="md" p={4} data-testid={testId}>
      <Heading as="h3" size="md" mb={3}>
        {title}
      </Heading>
      {children}
    </Box>
  );
}

/** Label: value pairs in a wrapping row. */
export function Facts({ items }: { items: Array<[string, ReactNode]> }) {
  return (
    <HStack wrap="wrap" gap={6} align="flex-start">
      {items.map(([label, value]) => (
        <Stack key={label} gap={0}>
          <Text fontSize="xs" color="fg.muted">
            {label}
          </Text>
          <Box fontWeight="medium">{value}</Box>
        </Stack>
      ))}
    </HStack>
  );
}

/** A muted line saying there is nothing. */
export function Nothing({ children }: { children: ReactNode }) {
  return (
    <Text color="fg.muted" fontSize="sm">
      {children}
    </Text>
  );
}

/** A table's header row: each column a label; a label ending in ">" is right-aligned (a number). */
export function TableHead({ columns }: { columns: string[] }) {
  return (
    <Table.Header>
      <Table.Row>
        {columns.map((c) => (
          <Table.ColumnHeader key={c} textAlign={c.endsWith(">") ? "end" : undefined}>
            {c.replace(/>$/, "")}
          </Table.ColumnHeader>
        ))}
      </Table.Row>
    </Table.Header>
  );
}

/** Problems reading something, one line each, in the theme's error colour. */
export function ProblemLines({ problems }: { problems: string[] }) {
  return (
    <Stack gap={1}>
      {problems.map((p) => (
        <Text key={p} fontSize="sm" color="fg.error">
          {p}
        </Text>
      ))}
    </Stack>
  );
}
