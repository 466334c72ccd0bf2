"""The metric names any PromQL text reads, and the same text with label matchers added to every
selector: a small lexer (no PromQL parser exists in Python here).

Shared by the analyzer (which exporter series a stock adapter rule reads) and the metric-name
contract tests of the rules and dashboards.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME_RE = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                       "group_right", "offset", "bool", "inf", "nan", "Inf", "NaN"})
_LABEL_VALUES_RE = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*[{,]")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a ``label_values(metric, label)`` query) reads."""
    found = set(_LABEL_VALUES_RE.findall(expr))
    if expr.lstrip().startswith("label_values("):
        return found
    text = _STRING_RE.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING_RE.sub(" ", text)
    text = re.sub(r"\boffset\s+-?[\dsmhdwy]+", " ", text)
    text = re.sub(r"@\s*(?:start\(\)|end\(\)|[\d.]+)", " ", text)
    return found | {name for name in _NAME_RE.findall(text) if name not in _KEYWORDS}


# One token of PromQL text that matters to a selector: what is skipped whole (strings, ranges,
# grouping clauses, offsets) or a name, or a selector's braces.
_TOKEN_RE = re.compile(
    r"""(?P<skip>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`|\[[^\]]*\]
        |\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\boffset\s+-?[\dsmhdwy]+)
      |(?P<braces>\{[^}]*\})
      |(?P<name>(?<![\w.:])[a-zA-Z_:][\w:]*)""", re.VERBOSE)
# After a name: an aggregation's optional grouping and then its call (``sum by (x) (``).
_CALL_RE = re.compile(r"\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(")
# A pod's own series (kube-state-metrics' pod and container families, cAdvisor's containers) name
# its namespace and pod; the node it runs on only kube_pod_info names (kube-state-metrics'
# docs/metrics/workload/pod-metrics.md: `node` is a label of kube_pod_info alone).
POD_INFO = "kube_pod_info"
_POD_SERIES_RE = re.compile(r"(?:kube_pod_(?!info$)|container_)[\w:]+")
_POD_INFO_ONLY = frozenset({"node"})


def with_matchers(expr: str, matchers: str) -> str:
    """``expr`` with ``matchers`` (``cluster="a",node=~"n[12]"``) added to every series selector,
    so the whole expression reads only the series they match.

    Where the expression joins a pod's series to its node through ``kube_pod_info``, a matcher on
    the node goes on ``kube_pod_info`` only: the pod's own series carry no node label, and the
    join keeps the pods on the matched nodes (a shard by node reads its pods' restarts)."""
    if not matchers:
        return expr
    parsed = parse_matchers(matchers)
    joined = POD_INFO in metric_names(expr)
    pod_matchers = ",".join(_rendered(m) for m in parsed if m[0] not in _POD_INFO_ONLY)
    out: list[str] = []
    pos = 0
    name = None  # the metric name whose braces come next
    for token in _TOKEN_RE.finditer(expr):
        out.append(expr[pos:token.start()])
        text, pos = token.group(), token.end()
        if token.lastgroup == "braces":
            inside = text[1:-1].strip()
            out.append(_braces(_for(name, joined, matchers, pod_matchers), inside))
            name = None
        elif token.lastgroup == "name" and text not in _KEYWORDS and not _CALL_RE.match(expr, pos):
            # A metric name: matchers go into its braces (the next token) or new ones.
            following = expr[pos:].lstrip()
            if following.startswith("{"):
                out.append(text)
                name = text
            else:
                chosen = _for(text, joined, matchers, pod_matchers)
                out.append(text + (_braces(chosen, "") if chosen else ""))
        else:
            out.append(text)
    out.append(expr[pos:])
    return "".join(out)


def _for(name: str | None, joined: bool, matchers: str, pod_matchers: str) -> str:
    """The matchers a selector of metric ``name`` takes."""
    pod_series = joined and name is not None and _POD_SERIES_RE.fullmatch(name) is not None
    return pod_matchers if pod_series else matchers


def _braces(matchers: str, inside: str) -> str:
    return "{" + ",".join(part for part in (matchers, inside) if part) + "}"


def _rendered(matcher: tuple[str, str, str]) -> str:
    label, op, value = matcher
    return label + op + '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_MATCHER_RE = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def parse_matchers(text: str) -> list[tuple[str, str, str]]:
    """``cluster="a", node=~"n[12]"`` as ``(label, op, value)`` triples; ValueError when it is not
    a comma-separated list of PromQL label matchers with double-quoted values."""
    found, pos = [], 0
    while pos < len(text.rstrip()):
        match = _MATCHER_RE.match(text, pos)
        if match is None:
            raise ValueError(f"not a list of label matchers such as cluster=\"a\": {text[pos:]!r}")
        label, op, value = match.groups()
        value = re.sub(r"\\(.)", r"\1", value)  # \" and \\ as in a PromQL string
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"label {label}: not a regular expression: {exc}") from None
        found.append((label, op, value))
        pos = match.end()
    return found


def labels_match(labels: Mapping[str, str], matchers: Iterable[tuple[str, str, str]]) -> bool:
    """Whether a series with ``labels`` is selected by ``matchers``, as PromQL decides it (a missing
    label is the empty string; regular expressions match the whole value)."""
    for label, op, value in matchers:
        have = labels.get(label, "")
        hit = have == value if op in ("=", "!=") else re.fullmatch(value, have) is not None
        if hit != (op in ("=", "=~")):
            return False
    return True
