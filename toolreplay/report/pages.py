"""The two HTML pages: one session (`replay`/`scope --format html`) and a fleet (`audit --format html`).

The fleet page puts the summary first but learns it last, so each session's row is spooled to an
anonymous temporary file as its result arrives and read back when the page is written: the memory
of a 20,000-session page is that of its summary and of the sessions shown in detail.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

from toolreplay.audit.detail import FLEET_LIMITS, SESSION_LIMITS, SessionDetail, build_detail, detail_batch
from toolreplay.audit.fleet import CALL_BUCKETS, FleetSummary, SessionJob, SessionResult, ranked_counts
from toolreplay.format.text import escape_text
from toolreplay.report.html import (
    bar_chart,
    count,
    histogram,
    kind_badge,
    kind_hue,
    number,
    page,
    path_text,
    script_data,
    session_view,
    stat_cards,
    text,
)

if TYPE_CHECKING:
    from toolreplay.audit.api import FleetRun

__all__ = ["session_page", "RowSpool", "iter_fleet_page", "TOOLS_CHARTED", "ROWS_LISTED", "fleet_report_page",
           "session_report_page", "DETAILED_SESSIONS"]

DETAILED_SESSIONS = 50  # sessions of the fleet page shown with their calls (rank them: `audit_many(top=...)`)

TOOLS_CHARTED = 12  # bars in "findings by tool"; the rest are summed into one line
ROWS_LISTED = 50000  # rows of the sessions table's data; beyond, the page says how many are left out
WHERE_LISTED = 20  # of each problem, the sessions the first screen names (the lists below have them all)


def _summary_cards(calls: int, findings: int, kinds: Sequence[tuple[str, int]]) -> str:
    cards = [("calls", calls, ""), ("findings", findings, "bad" if findings else "good")]
    return stat_cards(cards) + ("<p>" + "".join(kind_badge(kind, count) for kind, count in kinds) + "</p>\n"
                                if kinds else "")


def session_page(detail: SessionDetail, command: str, agent: str | None = None) -> Iterator[str]:
    """The page of one session's `replay` or `scope` report."""
    what = f"{command} report" + (f" for agent {agent}" if agent is not None else "")
    body = [f'<header class="top"><h1 class="path">{text(detail.path)}</h1><p class="sub">{text(what)}</p></header>\n',
            _summary_cards(detail.calls, detail.finding_count, sorted(detail.by_kind, key=lambda i: (-i[1], i[0]))),
            '<section class="panel">\n']
    return page(f"{command}: {detail.path}", [*body, *session_view(detail), "</section>\n"])


_Row = tuple[str, int, int, list[list[Any]], "int | None", "int | None", "str | None", bool, "str | None"]


class RowSpool:
    """The sessions table's rows, written to an anonymous temporary file as results arrive."""

    def __init__(self) -> None:
        self._file: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.count = 0

    def add(self, result: SessionResult) -> None:
        """Spool one session's row."""
        broken = None if result.chain is None or result.chain.intact else result.chain.broken_at
        row = [result.path, result.calls, result.finding_count, result.by_kind, result.divergence, broken,
               result.error, result.sealed, None if result.checkpoint is None else result.checkpoint.status]
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.count += 1

    def rows(self) -> Iterator[_Row]:
        """The spooled rows, in the order they were added."""
        self._file.seek(0)
        for line in self._file:
            path, calls, findings, kinds, divergence, broken, error, sealed, checkpoint = json.loads(line)
            yield path, calls, findings, kinds, divergence, broken, error, sealed, checkpoint

    def close(self) -> None:
        """Delete the spool."""
        self._file.close()


def _short_number(value: int) -> str:
    return f"{value // 1000}k" if value >= 1000 and value % 1000 == 0 else str(value)


def _bucket_labels() -> list[str]:
    labels, low = [], 0
    for bound in CALL_BUCKETS:
        labels.append(str(bound) if low == bound else f"{_short_number(low)}–{_short_number(bound)}")
        low = bound + 1
    labels.append(f">{_short_number(CALL_BUCKETS[-1])}")
    return labels


def _tool_rows(summary: FleetSummary) -> list[tuple[str, int]]:
    ranked = ranked_counts(summary.by_tool)
    rows = ranked[:TOOLS_CHARTED]
    rest = ranked[TOOLS_CHARTED:]
    if rest:
        rows.append((f"{len(rest)} other tools", sum(count for _, count in rest)))
    return rows


def _overview(summary: FleetSummary, subtitle: str, anchors: dict[str, str], base: str) -> Iterator[str]:
    yield (f'<header class="top"><h1>Fleet audit</h1><p class="sub">{text(subtitle)}</p></header>\n')
    yield stat_cards([("sessions", summary.sessions, ""), ("calls", summary.calls, ""),
                      ("sessions with findings", summary.sessions_with_findings,
                       "bad" if summary.sessions_with_findings else "good"),
                      ("findings", summary.counted, "bad" if summary.counted else "good"),
                      *([("information", summary.information, "")]
                        if summary.state_aware or summary.information else []),
                      ("broken chains", summary.broken, "bad" if summary.broken else ""),
                      ("unreadable files", summary.unreadable, "bad" if summary.unreadable else ""),
                      *([("sessions with unknown outcomes", summary.unknown_outcomes, "bad")]
                        if summary.unknown_outcomes else []),
                      *_checkpoint_cards(summary)])
    yield from _where(summary, anchors, base)
    yield '<div class="grid">\n'
    yield _panel("Findings by kind", bar_chart(ranked_counts(summary.by_kind), kinds=True))
    yield _panel("Findings by tool", bar_chart(_tool_rows(summary)))
    yield _panel("Calls per session", histogram(list(zip(_bucket_labels(), summary.histogram, strict=True))))
    if summary.by_rule:
        yield _panel("Findings by rule", bar_chart(ranked_counts(summary.by_rule), hue=290))
    if summary.information_by_kind:  # what the guard did: blocked, approved, shadow
        yield _panel("Information by kind", bar_chart(ranked_counts(summary.information_by_kind), kinds=True))
    yield "</div>\n"


def _checkpoint_cards(summary: FleetSummary) -> list[tuple[str, int, str]]:
    if not summary.checkpoints:
        return []
    cards = [("sessions anchored", summary.anchored, "good" if summary.anchored == summary.checkpoints else ""),
             ("failed checkpoints", summary.failed_checkpoints, "bad" if summary.failed_checkpoints else "")]
    if summary.unverified:
        cards.append(("unverified checkpoints", summary.unverified, ""))
    return cards


def _where(summary: FleetSummary, anchors: dict[str, str], base: str) -> Iterator[str]:
    """The first screen's list of where to look: each broken chain, unreadable file and session with unknown
    outcomes, named and linked (to its details when shown, else to its line in the lists below)."""
    groups = [
        ("Broken chains", "broken", [(path, f"first broken link: index {at}") for path, at in summary.broken_listed],
         summary.broken),
        ("Unreadable files", "unreadable",
         [(path, message) for path, message in zip(summary.unreadable_paths, summary.unreadable_listed, strict=True)],
         summary.unreadable),
        ("Sessions with unknown outcomes", "unknown",
         [(path, count(calls, "call") + " with an unknown outcome") for path, calls in summary.unknown_listed],
         summary.unknown_outcomes)]
    if not any(total for *_, total in groups):
        return
    yield '<section class="panel where" id="where"><h3>Where to look</h3>\n'
    for title, key, entries, total in groups:
        if not total:
            continue
        yield f'<p><b>{title} ({number(total)})</b></p><ul>\n'
        for position, (path, why) in enumerate(entries[:WHERE_LISTED]):
            target = anchors.get(path, f"{key}-{position}")
            yield (f'<li><a class="path" href="#{target}">{path_text(path, base)}</a> '
                   f'<span class="why">{text(why)}</span></li>\n')
        more = total - min(len(entries), WHERE_LISTED)
        if more > 0:
            yield f'<li><a href="#{key}">{number(more)} more</a></li>\n'
        yield "</ul>\n"
    yield "</section>\n"


def _panel(title: str, content: str) -> str:
    return f'<section class="panel"><h3>{title}</h3>{content}</section>\n'


def _worst(summary: FleetSummary, anchors: dict[str, str], base: str) -> Iterator[str]:
    top = summary.top_sessions()
    if not top:
        return
    yield ('<h2>Sessions with the most findings</h2>\n<p class="note">Ranked by distinct calls with findings (a '
           'call and its identical repeats are one), then by findings.</p>\n<section class="panel"><table><thead>'
           '<tr><th>Session</th><th class="n">Distinct calls</th><th class="n">Findings</th><th class="n">Calls</th>'
           '<th>Kinds</th></tr></thead><tbody>\n')
    for path, findings, calls, kinds, distinct in top:
        name = path_text(path, base)
        link = f'<a class="path" href="#{anchors[path]}">{name}</a>' if path in anchors else name
        badges = "".join(kind_badge(kind, count) for kind, count in kinds)
        yield (f'<tr><td>{link}</td><td class="n">{number(distinct)}</td><td class="n">{number(findings)}</td>'
               f'<td class="n">{number(calls)}</td>'
               f'<td>{badges}</td></tr>\n')
    yield "</tbody></table></section>\n"


def _problems(summary: FleetSummary, base: str) -> Iterator[str]:
    if summary.broken:
        yield (f'<h2 id="broken">Broken chains ({number(summary.broken)})</h2>\n'
               '<section class="panel"><table><tbody>\n')
        for position, (path, at) in enumerate(summary.broken_listed):
            yield (f'<tr id="broken-{position}"><td class="path">{path_text(path, base)}</td>'
                   f'<td class="chain-broken">first broken link: index {at}</td></tr>\n')
        yield "</tbody></table>" + _left_out(summary.broken - len(summary.broken_listed)) + "</section>\n"
    if summary.failed_checkpoints:
        yield (f'<h2>Failed checkpoints ({number(summary.failed_checkpoints)})</h2>\n'
               '<section class="panel"><table><tbody>\n')
        for path, first in summary.failed_listed:
            yield (f'<tr><td class="path">{path_text(path, base)}</td>'
                   f'<td class="chain-broken">{text(first)}</td></tr>\n')
        yield ("</tbody></table>" + _left_out(summary.failed_checkpoints - len(summary.failed_listed))
               + "</section>\n")
    if summary.unreadable:
        yield (f'<h2 id="unreadable">Unreadable files ({number(summary.unreadable)})</h2>\n'
               '<section class="panel"><table><tbody>\n')
        for position, message in enumerate(summary.unreadable_listed):
            yield f'<tr id="unreadable-{position}"><td class="mono err">{text(message)}</td></tr>\n'
        yield "</tbody></table>" + _left_out(summary.unreadable - len(summary.unreadable_listed)) + "</section>\n"
    if summary.unknown_outcomes:
        yield (f'<h2 id="unknown">Sessions with unknown outcomes ({number(summary.unknown_outcomes)})</h2>\n'
               '<section class="panel"><table><tbody>\n')
        for position, (path, calls) in enumerate(summary.unknown_listed):
            yield (f'<tr id="unknown-{position}"><td class="path">{path_text(path, base)}</td>'
                   f'<td class="chain-broken">{count(calls, "call")} with an unknown outcome</td></tr>\n')
        yield ("</tbody></table>" + _left_out(summary.unknown_outcomes - len(summary.unknown_listed))
               + "</section>\n")


def _left_out(count: int) -> str:
    return f'<p class="note">{number(count)} more not listed; the JSON report has them all.</p>' if count > 0 else ""


def _row_json(row: _Row, anchors: dict[str, str], base: str) -> str:
    path, calls, findings, kinds, divergence, broken, error, sealed, checkpoint = row
    shown = path[len(base):] if path.startswith(base) else path
    folder, slash, name = shown.rpartition("/")
    fields = [escape_text(folder + slash), escape_text(name), calls, findings,
              [[escape_text(kind), count] for kind, count in kinds], anchors.get(path, ""), divergence, broken,
              None if error is None else escape_text(error), sealed]
    if checkpoint is not None:  # the checkpoint's status, only for a session that has one
        fields.append(checkpoint)
    return json.dumps(fields, separators=(",", ":"))


def _sessions_table(rows: Iterable[_Row], summary: FleetSummary, anchors: dict[str, str],
                    base: str) -> Iterator[str]:
    """The table of every session: its rows are data the page's script shows 500 at a time, and filters."""
    yield (f'<h2>All sessions ({number(summary.sessions)})</h2>\n<p><input type="search" id="filter" '
           'placeholder="Filter by path" aria-label="Filter sessions by path"> '
           '<label><input type="checkbox" id="only"> only sessions with findings</label>'
           '<span id="count"></span></p>\n'
           '<section class="panel"><table id="sessions"><thead><tr><th>Session</th><th class="n">Calls</th>'
           '<th class="n">Findings</th><th>Kinds</th><th>Status</th></tr></thead><tbody></tbody></table>'
           '<button id="more" hidden>Show 500 more</button>\n')
    listed = 0

    def pieces() -> Iterator[str]:
        nonlocal listed
        hues = {escape_text(kind): kind_hue(kind) for kind in sorted(summary.by_kind)}
        yield '{"hues":' + json.dumps(hues, separators=(",", ":")) + ',"rows":['
        for row in rows:
            if listed == ROWS_LISTED:
                break
            yield ("," if listed else "") + _row_json(row, anchors, base)
            listed += 1
        yield "]}"

    yield from script_data("rows", pieces())
    yield _left_out(summary.sessions - listed) + "</section>\n"


def iter_fleet_page(summary: FleetSummary, rows: Iterable[_Row], details: Sequence[SessionDetail],
                    subtitle: str, base: str = "") -> Iterator[str]:
    """The fleet page: overview and charts, the worst sessions, problems, the details, then every session.

    `base` is a folder every session path starts with (ending with `/`): the page names it once, in
    the subtitle, and shows the paths below it.
    """
    anchors = {detail.path: f"s{position}" for position, detail in enumerate(details)}

    def body() -> Iterator[str]:
        yield from _overview(summary, subtitle, anchors, base)
        yield from _worst(summary, anchors, base)
        yield from _problems(summary, base)
        if details:
            yield (f'<h2>Session details</h2>\n<p class="note">The {number(len(details))} sessions with the most '
                   'findings, each with its findings and the calls they concern. Run <code>toolreplay replay '
                   '--format html PATH</code> for the page of any other session.</p>\n')
        for detail in details:
            anchor = anchors[detail.path]
            yield (f'<details class="session" id="{anchor}"><summary>'
                   f'<span class="path">{path_text(detail.path, base)}</span> '
                   f'<span class="meta">{count(detail.finding_count, "finding")}</span></summary><div class="body">\n')
            yield from session_view(detail, f"{anchor}-", findings_open=False)
            yield "</div></details>\n"
        yield from _sessions_table(rows, summary, anchors, base)

    return page("Fleet audit", body())


def session_report_page(job: SessionJob, report: Any, command: str, agent: str | None = None,
                        count_changes: bool = False, fail_on: frozenset[str] = frozenset()) -> Iterator[str]:
    """The page of one session's `replay` or `scope` report (`report` from `toolreplay.audit.api`), with the
    calls behind its findings read again from `job` (see `toolreplay.audit.api.session_file`)."""
    detail = build_detail(job, report.calls, getattr(report, "divergence", None), report.findings, SESSION_LIMITS,
                          count_changes=count_changes, fail_on=fail_on)
    return session_page(detail, command, agent)


def fleet_report_page(run: FleetRun) -> Iterator[str]:
    """The fleet page of an `audit_many` run, in two passes: every result (one table row each, spooled to
    disk), then the sessions ranked first audited again with their calls (on the run's engine)."""
    spool = RowSpool()
    try:
        for result in run.results:
            if result.skipped is None:  # not a session
                spool.add(result)
        summary = run.summary
        rank = {ranked.path: place for place, ranked in enumerate(summary.top_sessions())}
        wanted = [job for job in run.jobs if job.display in rank]
        details: list[SessionDetail] = list(run.engine.map_batches(detail_batch, wanted, (run.options, FLEET_LIMITS)))
        details.sort(key=lambda d: rank[d.path])
        base = common_folder(run.jobs)
        options = run.options
        subtitle = (f"{summary.sessions:,} sessions" + (f" in {base}" if base else "") + ", audited with "
                    + ("state-aware replay" if options.state_aware else "replay"))
        if options.policy is not None:
            subtitle += f" and scope for agent {options.policy.agent!r}"
        yield from iter_fleet_page(summary, spool.rows(), details, subtitle, base)
    finally:
        spool.close()


def common_folder(jobs: Sequence[SessionJob]) -> str:
    """The folder (with its trailing `/`) every session's display path is in, or "" when there is none."""
    if not jobs:
        return ""
    first, last = jobs[0].display, jobs[-1].display  # sorted: their common prefix is everyone's
    folder = os.path.commonprefix([first, last]).rpartition("/")[0]
    return folder + "/" if folder else ("/" if first.startswith("/") else "")
