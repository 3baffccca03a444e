"""The dashboard and alert rules in ``ops/monitoring`` query only what tether exports.

Each PromQL expression is parsed (a recursive-descent parser of the PromQL that dashboards and rules use: vector
selectors with matchers, range selectors, functions, aggregations with ``by``/``without`` before or after their
arguments, binary operators with ``bool``, ``on``/``ignoring`` and ``group_left``/``group_right``, numbers,
strings, Grafana's ``$variables``), and then:

* every metric it selects is one :data:`~tether.adapters.daemon.metrics.METRIC_NAMES` lists (``tests/integration/
  test_metrics.py`` checks that the registry is what a running daemon exports);
* every label it matches on, groups by or joins on is a label of one of its metrics, ``le`` of a histogram's
  buckets, or one the scrape adds (``pod``, ``namespace``…);
* every function is one of PromQL's.

A parse error, an unknown metric or label fails the test with the expression and where.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.adapters.daemon.metrics import METRIC_NAMES, SERIES

MONITORING = Path(__file__).resolve().parents[2] / "ops" / "monitoring"

FUNCTIONS = {"abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max",
             "clamp_min", "count_over_time", "delta", "deriv", "exp", "floor", "histogram_quantile", "idelta",
             "increase", "irate", "label_replace", "label_join", "last_over_time", "ln", "max_over_time",
             "min_over_time", "predict_linear", "quantile_over_time", "rate", "resets", "round", "scalar", "sort",
             "sort_desc", "sqrt", "stddev_over_time", "sum_over_time", "time", "timestamp", "vector"}
AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
                "count_values", "group"}
BINARY = {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"}
#: Labels the scrape (Prometheus, the Operator's ServiceMonitor) adds to every series.
TARGET_LABELS = {"pod", "namespace", "instance", "job", "service", "container", "endpoint"}

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<duration>\[(?:\d+[smhdwy])+\]|\[\$__\w+\])
  | (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(){},])
  | (?P<ident>\$?[A-Za-z_:][A-Za-z0-9_:]*)
""", re.VERBOSE)


class PromQLError(ValueError):
    pass


def tokenize(expr: str) -> list[tuple[str, str, int]]:
    tokens, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise PromQLError(f"unexpected {expr[pos:pos + 10]!r} at {pos}")
        if m.lastgroup != "space":
            tokens.append((m.lastgroup or "", m.group(), pos))
        pos = m.end()
    return tokens


@dataclass
class Query:
    """What an expression refers to."""

    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)  # matched, grouped by, joined on
    functions: set[str] = field(default_factory=set)


class Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0
        self.query = Query()

    def peek(self, offset: int = 0) -> tuple[str, str, int]:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else ("end", "", len(self.expr))

    def take(self, value: str | None = None, kind: str | None = None) -> tuple[str, str, int]:
        token = self.peek()
        if (value is not None and token[1] != value) or (kind is not None and token[0] != kind):
            raise PromQLError(f"expected {value or kind} at {token[2]}, found {token[1] or 'the end'!r}")
        self.i += 1
        return token

    def parse(self) -> Query:
        self.expression()
        if self.peek()[0] != "end":
            raise PromQLError(f"unexpected {self.peek()[1]!r} at {self.peek()[2]}")
        return self.query

    def expression(self) -> None:
        self.unary()
        while self.peek()[1] in BINARY:
            self.take()
            if self.peek()[1] == "bool":
                self.take()
            if self.peek()[1] in ("on", "ignoring"):
                self.take()
                self.label_list()
            if self.peek()[1] in ("group_left", "group_right"):
                self.take()
                if self.peek()[1] == "(":
                    self.label_list()
            self.unary()

    def unary(self) -> None:
        if self.peek()[1] in ("-", "+"):
            self.take()
        self.primary()

    def primary(self) -> None:
        kind, value, pos = self.peek()
        if value == "(":
            self.take()
            self.expression()
            self.take(")")
        elif kind in ("number", "string"):
            self.take()
        elif kind == "ident" and value.startswith("$"):
            self.take()  # a Grafana variable standing for a number (or a duration)
        elif kind == "ident" and value in AGGREGATIONS:
            self.take()
            if self.peek()[1] in ("by", "without"):
                self.take()
                self.label_list()
            self.arguments()
            if self.peek()[1] in ("by", "without"):
                self.take()
                self.label_list()
        elif kind == "ident" and self.peek(1)[1] == "(":
            if value not in FUNCTIONS:
                raise PromQLError(f"unknown function {value!r} at {pos}")
            self.query.functions.add(value)
            self.take()
            self.arguments()
        elif kind == "ident" or value == "{":
            self.selector()
        else:
            raise PromQLError(f"unexpected {value or 'end'!r} at {pos}")
        if self.peek()[0] == "duration":
            self.take()
        if self.peek()[1] == "offset":
            self.take()
            self.take(kind="duration")

    def arguments(self) -> None:
        self.take("(")
        if self.peek()[1] != ")":
            self.expression()
            while self.peek()[1] == ",":
                self.take()
                self.expression()
        self.take(")")

    def label_list(self) -> None:
        self.take("(")
        while self.peek()[1] != ")":
            self.query.labels.add(self.take(kind="ident")[1])
            if self.peek()[1] == ",":
                self.take()
        self.take(")")

    def selector(self) -> None:
        if self.peek()[0] == "ident":
            self.query.metrics.add(self.take()[1])
        if self.peek()[1] == "{":
            self.take()
            while self.peek()[1] != "}":
                label = self.take(kind="ident")[1]
                if label == "__name__":
                    raise PromQLError("select metrics by name, not by __name__")
                self.query.labels.add(label)
                if self.peek()[1] not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"expected a matcher operator at {self.peek()[2]}")
                self.take()
                self.take(kind="string")
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")


def parse(expr: str) -> Query:
    return Parser(expr).parse()


def problems(expr: str) -> list[str]:
    try:
        query = parse(expr)
    except PromQLError as exc:
        return [f"does not parse: {exc}"]
    out = [f"{m}: not a metric tether exports" for m in sorted(query.metrics - set(METRIC_NAMES))]
    if not query.metrics:
        out.append("selects no metric")
    known = set().union(*(SERIES[m][1] for m in query.metrics & set(SERIES))) | TARGET_LABELS
    out += [f"label {label!r}: no metric of this expression has it" for label in sorted(query.labels - known)]
    return out


def test_the_parser_reads_promql_and_refuses_what_is_not() -> None:
    q = parse('histogram_quantile(0.99, sum by (le, webhook) (rate(tether_webhook_seconds_bucket{a="b"}[5m])))')
    assert q.metrics == {"tether_webhook_seconds_bucket"} and q.labels == {"le", "webhook", "a"}
    assert q.functions == {"histogram_quantile", "rate"}
    q = parse('sum(rate(x_total[$__rate_interval])) by (pod) / ignoring (c) group_left y > bool 2 and absent(z)')
    assert q.metrics == {"x_total", "y", "z"} and q.labels == {"pod", "c"}
    assert parse("-1 + max_over_time(m[1h5m] offset [1d])").metrics == {"m"}
    for bad in ("sum(", "rate(x[5m]", "x{a=b}", "frobnicate(x)", "x y", "{__name__=\"x\"}", "x{a=\"b\""):
        assert problems(bad), bad
    assert problems("tether_nonexistent") == ["tether_nonexistent: not a metric tether exports"]
    assert problems('tether_claims{phase="Bound", queue="q"}') == [
        "label 'queue': no metric of this expression has it"]
    assert problems('sum by (le) (rate(tether_decision_latency_seconds_bucket[5m]))') == []
    assert problems('tether_claims{pod="x"}') == []  # a label the scrape adds


def dashboard_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                out.append((f"{panel['title']} {target['refId']}", target["expr"]))
            walk(panel.get("panels") or [])

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict) and query.get("query", "").startswith("label_values("):
            metric = query["query"][len("label_values("):].split(",")[0].strip()
            out.append((f"variable {variable['name']}", metric))
    return out


def alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def test_the_dashboard_queries_only_what_tether_exports() -> None:
    expressions = dashboard_expressions()
    assert len(expressions) > 20
    for where, expr in expressions:
        assert not problems(expr), f"{where}: {expr}\n" + "\n".join(problems(expr))


def test_the_dashboard_shows_every_metric() -> None:
    shown = set().union(*(parse(expr).metrics for _, expr in dashboard_expressions()))
    families = {name for name, kind in METRIC_NAMES.items() if not name.endswith(("_created", "_sum"))
                and not (kind == "histogram" and name.endswith("_count") and name.replace("_count", "_bucket")
                         in shown)}
    missing = {m for m in families if m not in shown and not (m.endswith("_bucket") and m.replace(
        "_bucket", "_count") in shown)}
    assert not missing, f"metrics no panel shows: {sorted(missing)}"


def test_the_alert_rules_are_well_formed_and_query_only_what_tether_exports() -> None:
    rules = alert_rules()
    assert len(rules) >= 10
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert not problems(rule["expr"]), f"{rule['alert']}: {rule['expr']}\n" + "\n".join(problems(rule["expr"]))
        # a template may only use the labels the expression keeps
        for label in re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])):
            assert label in parse(rule["expr"]).labels, f"{rule['alert']}: $labels.{label} is not kept"


@pytest.mark.parametrize("name", ["tether_leader", "tether_bindings_held", "tether_watch_errors_total",
                                  "tether_admission_config_valid", "tether_plugin_config_valid"])
def test_the_issues_metrics_are_watched(name: str) -> None:
    """The metrics issue 22 made truthful have an alert each, and so has a refused plugin entry (issue 38)."""
    assert any(name in parse(rule["expr"]).metrics for rule in alert_rules())
