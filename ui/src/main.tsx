/**
 * The bundle's entry: one component per view, each set on globalThis under its view name (Airflow
 * renders `globalThis[name]` for a react_app of that name; the default export, AirflowPlugin, is the
 * overview). Every view renders inside Airflow's own ChakraProvider and router.
 */
import type { ComponentType } from "react";

import { DagRunView } from "./DagRun";
import { DashboardView } from "./Dashboard";
import { VIEW_NAMES } from "./names";
import { OverviewView } from "./Overview";

interface PluginProps {
  dagId?: string;
  runId?: string;
  taskId?: string;
  mapIndex?: string;
}

/** Airflow UIs older than the one that shares Chakra UI with plugins (globalThis.ChakraUI) get a link to the page. */
function guarded(View: ComponentType<PluginProps>, page: (props: PluginProps) => string): ComponentType<PluginProps> {
  const Guarded = (props: PluginProps) => {
    if ((globalThis as Record<string, unknown>).ChakraUI === undefined) {
      return (
        <p>
          This Airflow UI does not share Chakra UI with plugins: <a href={page(props)}>open the watermark page</a>.
        </p>
      );
    }
    return <View {...props} />;
  };
  Guarded.displayName = `Watermark(${View.displayName ?? View.name})`;
  return Guarded;
}

const Nav = guarded(() => <OverviewView title="Watermarks" />, () => "watermark-ops/");
const Dag = guarded(({ dagId }) => <OverviewView dagId={dagId} title={`Checkpoints of ${dagId}`} />,
  ({ dagId }) => `watermark-ops/dags/${encodeURIComponent(dagId ?? "")}`);
const DagRun = guarded(DagRunView, ({ dagId }) => `watermark-ops/dags/${encodeURIComponent(dagId ?? "")}`);
const Dashboard = guarded(DashboardView, () => "watermark-ops/");

const views: Record<keyof typeof VIEW_NAMES, ComponentType<PluginProps>> = {
  nav: Nav,
  dag: Dag,
  dag_run: DagRun,
  dashboard: Dashboard,
};

for (const [destination, name] of Object.entries(VIEW_NAMES)) {
  Reflect.set(globalThis, name, views[destination as keyof typeof VIEW_NAMES]);
}

export default Nav;
