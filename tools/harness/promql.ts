/**
 * PromQL as the chart ships it: the alert expressions of the rendered PrometheusRule and the panel
 * queries of the rendered dashboard, read with Prometheus' own grammar (@prometheus-io/lezer-promql,
 * the parser of Prometheus' web UI) rather than by pattern matching:
 * - metricNames: every metric a query selects (tests/chart/alerts.test.ts checks each is exported);
 * - innerExpressions: the query without its threshold comparisons (k8s:local asks a real
 *   Prometheus for each and expects series).
 */
import type { parser as Parser } from '@prometheus-io/lezer-promql' with { 'resolution-mode': 'import' };
import type { KubeObject } from './manifests';

// The package's CommonJS build; its types are declared for the ES module build only.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { parser } = require('@prometheus-io/lezer-promql') as { parser: typeof Parser };

type SyntaxNode = ReturnType<typeof parser.parse>['topNode'];

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface PrometheusRuleObject extends KubeObject {
  spec: { groups: { name: string; rules: AlertRule[] }[] };
}

export interface PanelQuery {
  panel: string;
  refId: string;
  expr: string;
}

interface DashboardPanel {
  type: string;
  title: string;
  targets?: { expr?: string; refId?: string }[];
  panels?: DashboardPanel[];
}

export interface Dashboard {
  uid: string;
  title: string;
  templating: { list: { name: string; type: string; query?: unknown; current?: unknown }[] };
  panels: DashboardPanel[];
}

/** Parses a query; throws with the position of the first syntax error. */
function parse(expr: string): SyntaxNode {
  const tree = parser.parse(expr);
  let error: number | undefined;
  tree.iterate({
    enter(node) {
      if (node.type.isError && error === undefined) error = node.from;
    },
  });
  if (error !== undefined)
    throw new Error(`PromQL syntax error at ${error}: ${expr.slice(error, error + 40)} in ${expr}`);
  return tree.topNode;
}

/** Metric names a query selects (vector selectors, with or without a range). */
export function metricNames(expr: string): string[] {
  const names = new Set<string>();
  const top = parse(expr);
  const cursor = top.cursor();
  do {
    if (cursor.name === 'VectorSelector') {
      const identifier = cursor.node.getChild('Identifier');
      if (identifier) names.add(expr.slice(identifier.from, identifier.to));
      // {__name__="…"} selectors are not used by the chart; refuse them rather than miss a name.
      else if (/__name__/.test(expr.slice(cursor.from, cursor.to)))
        throw new Error(`selector by __name__ in ${expr}`);
    }
  } while (cursor.next());
  return [...names].sort();
}

const COMPARISONS = new Set(['Eql', 'Neq', 'Gtr', 'Lss', 'Gte', 'Lte']);
const SET_OPERATORS = new Set(['And', 'Or', 'Unless']);

function isNumber(node: SyntaxNode): boolean {
  let inner: SyntaxNode | null = node;
  // Punctuation is not in the tree: a ParenExpr's child is the expression; UnaryExpr ends with it.
  while (inner && (inner.name === 'ParenExpr' || inner.name === 'UnaryExpr')) inner = inner.lastChild;
  return inner?.name === 'NumberDurationLiteral';
}

/**
 * The parts of a query that hold its data before any threshold: a comparison with a number gives
 * its other side, a comparison of two vectors both sides, `and`/`or`/`unless` both operands, and
 * absent(x) gives x (empty while x has series, which is the point). Anything else is itself.
 */
export function innerExpressions(expr: string): string[] {
  const text = (node: SyntaxNode) => expr.slice(node.from, node.to).trim();
  const walk = (node: SyntaxNode): string[] => {
    if (node.name === 'PromQL') return node.firstChild ? walk(node.firstChild) : [];
    if (node.name === 'ParenExpr') return node.firstChild ? walk(node.firstChild) : [];
    if (node.name === 'BinaryExpr') {
      const [left, operator, right] = childrenOf(node);
      if (left && operator && right) {
        if (SET_OPERATORS.has(operator.name)) return [...walk(left), ...walk(right)];
        if (COMPARISONS.has(operator.name)) {
          if (isNumber(right)) return walk(left);
          if (isNumber(left)) return walk(right);
          return [...walk(left), ...walk(right)];
        }
      }
      return [text(node)];
    }
    if (node.name === 'FunctionCall') {
      const name = node.getChild('FunctionIdentifier');
      if (name && /^absent(_over_time)?$/.test(expr.slice(name.from, name.to))) {
        const argument = node.getChild('FunctionCallBody')?.firstChild;
        if (argument) return walk(argument);
      }
    }
    return [text(node)];
  };
  return [...new Set(walk(parse(expr)))];
}

/** The operands and the operator of a binary expression (modifiers such as on(…) left out). */
function childrenOf(node: SyntaxNode): SyntaxNode[] {
  const out: SyntaxNode[] = [];
  for (let child = node.firstChild; child; child = child.nextSibling) {
    if (child.name === 'BoolModifier' || child.name === 'MatchingModifierClause') continue;
    out.push(child);
  }
  return out;
}

/** Every alert rule of a rendered PrometheusRule. */
export function alertRules(rule: PrometheusRuleObject): AlertRule[] {
  return rule.spec.groups.flatMap((group) => group.rules).filter((r) => r.alert);
}

/** Every query of every panel (rows descended). */
export function panelQueries(dashboard: Dashboard): PanelQuery[] {
  const walk = (panels: DashboardPanel[]): PanelQuery[] =>
    panels.flatMap((panel) => [
      ...(panel.targets ?? [])
        .filter((target) => target.expr)
        .map((target) => ({ panel: panel.title, refId: target.refId ?? '', expr: target.expr ?? '' })),
      ...walk(panel.panels ?? []),
    ]);
  return walk(dashboard.panels);
}

/**
 * A panel query as Grafana would send it: the dashboard's variables replaced ($namespace, $job)
 * and Grafana's $__rate_interval given a window.
 */
export function grafanaQuery(expr: string, variables: Record<string, string>, rateInterval = '1m'): string {
  return expr
    .replaceAll('$__rate_interval', rateInterval)
    .replace(/\$\{?(\w+)\}?/g, (whole, name: string) => variables[name] ?? whole);
}

/** The dashboard JSON of the rendered ConfigMap that carries the Grafana sidecar label. */
export function dashboardOf(configMap: { data?: Record<string, string> }): Dashboard {
  const [json, ...more] = Object.values(configMap.data ?? {});
  if (json === undefined || more.length > 0) throw new Error('expected one dashboard in the ConfigMap');
  return JSON.parse(json) as Dashboard;
}
