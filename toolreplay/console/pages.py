"""The console's pages, as pure functions from what the index, the inbox and the approvals hold to HTML.

Every string that came from a record, a request file or an approvals file goes through `text` (or
`json_text` for canonical JSON) from `toolreplay.report.html`; the timeline of a session is the HTML
report's (`session_view`). The pages load one script, `/console.js`, from the console itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from toolreplay.audit.detail import SessionDetail
from toolreplay.console.index import KINDS, Filters, SessionRow
from toolreplay.guard.approvals import Approval
from toolreplay.guard.inbox import Request
from toolreplay.report.html import STYLE, count, json_text, number, session_view, text

__all__ = ["CallMark", "SCRIPT", "PAGE_SIZE", "layout", "sessions_page", "session_page", "inbox_page",
           "approvals_page", "message_page"]

PAGE_SIZE = 50

_EXTRA_STYLE = """
nav.top{display:flex;gap:18px;align-items:baseline;margin-bottom:18px;border-bottom:1px solid var(--line);
padding-bottom:10px}nav.top b{font-size:17px}nav.top a.on{font-weight:650;color:var(--ink)}
form.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:end;margin:8px 0 14px}
form.filters label{font-size:12px;color:var(--muted);display:flex;flex-direction:column;gap:2px}
select,input[type=text]{font:inherit;padding:5px 8px;border:1px solid var(--line);border-radius:8px;
background:var(--panel);color:var(--ink)}form.filters button,form.act button{margin-top:0}
form.act{display:inline-flex;gap:6px;flex-wrap:wrap}button.deny{color:var(--bad)}
.flash{padding:8px 12px;border-radius:8px;margin:8px 0;border:1px solid var(--line);background:var(--panel)}
.flash.err{border-color:var(--bad)}.request{margin:10px 0}.live{color:var(--muted);font-size:12px}
.pager{display:flex;gap:12px;align-items:baseline;margin:10px 0}
"""

# Polls the console for a change (every half second) and swaps in the page's new body, keeping open the
# calls a person opened; nothing runs that the console did not serve.
SCRIPT = """
(function(){var main=document.querySelector('main'),v=main.getAttribute('data-version');if(v===null)return;
var busy=false;function opened(){var s=[];main.querySelectorAll('li[id]>details[open]').forEach(function(d){
s.push(d.parentElement.id);});return s;}
function swap(html){var doc=new DOMParser().parseFromString(html,'text/html'),next=doc.querySelector('main');
if(!next)return;var keep=opened();main.replaceWith(next);main=next;keep.forEach(function(id){
var el=document.getElementById(id);if(el){var d=el.querySelector(':scope>details');if(d)d.open=true;}});}
function tick(){if(busy)return;var a=document.activeElement;if(a&&a!==document.body&&main.contains(a)&&
(a.tagName==='INPUT'||a.tagName==='SELECT'))return;busy=true;fetch('/api/version',{credentials:'same-origin',
cache:'no-store'}).then(function(r){return r.json();}).then(function(d){if(String(d.version)===
main.getAttribute('data-version'))return null;return fetch(location.href,{credentials:'same-origin',
cache:'no-store'}).then(function(r){return r.text();}).then(swap);}).catch(function(){}).then(function(){
busy=false;});}setInterval(tick,500);})();
"""

_NAV = (("/", "Sessions"), ("/inbox", "Inbox"), ("/approvals", "Remembered approvals"))


@dataclass(frozen=True, slots=True)
class CallMark:
    """How one call of a session ended, when it was not a plain run: blocked, approved, unknown (with who decided)."""

    index: int
    tool: str
    mark: str
    note: str


def layout(title: str, active: str, body: Iterable[str], version: str | None, waiting: int = 0) -> str:
    """A whole console page; `version` is what the page's script compares to see whether it is still current
    (None: a page that does not update itself)."""
    links = []
    for href, label in _NAV:
        shown = label + (f" ({number(waiting)})" if href == "/inbox" and waiting else "")
        on = ' class="on"' if href == active else ""
        links.append(f'<a href="{href}"{on}>{text(shown)}</a>')
    live = "" if version is None else f' data-version="{text(version)}"'
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="color-scheme" content="light dark">\n'
            f"<title>{text(title)} · toolreplay console</title>\n<style>{STYLE}{_EXTRA_STYLE}</style>\n</head>\n"
            f'<body>\n<main{live}>\n<nav class="top"><b>toolreplay console</b>{"".join(links)}'
            '<span class="live">live</span></nav>\n' + "".join(body)
            + '<footer>Served by toolreplay serve. Nothing on this page comes from the network.</footer>\n'
            '</main>\n<script src="/console.js"></script>\n</body>\n</html>\n')


def _flash(message: str | None, error: bool) -> str:
    if not message:
        return ""
    return f'<p class="flash{" err" if error else ""}" role="status">{text(message)}</p>\n'


def _when(seconds: float) -> str:
    if not seconds:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _options(name: str, values: Sequence[str], chosen: str, any_label: str) -> str:
    options = [f'<option value=""{" selected" if not chosen else ""}>{text(any_label)}</option>']
    for value in values:
        options.append(f'<option value="{text(value)}"{" selected" if value == chosen else ""}>{text(value)}</option>')
    return f'<select name="{name}">{"".join(options)}</select>'


def _query(filters: Filters, since: str, page: int) -> str:
    fields = [("tool", filters.tool), ("kind", filters.kind), ("rule", filters.rule), ("since", since)]
    kept = [(name, value) for name, value in fields if value]
    if page:
        kept.append(("page", str(page)))
    return "/?" + urlencode(kept) if kept else "/"


def sessions_page(rows: Sequence[SessionRow], total: int, filters: Filters, since: str, page: int,
                  tools: Sequence[str], rules: Sequence[str], problems: Sequence[str], version: str,
                  waiting: int, indexed: int) -> str:
    """The sessions list: filters, one page of rows (newest first), the pager."""
    body = ['<header class="top"><h1>Sessions</h1>'
            f'<p class="sub">{count(indexed, "session")} indexed, newest first; updates as records grow</p></header>\n']
    body.extend(f'<p class="flash err">{text(problem)}</p>\n' for problem in problems)
    body.append('<form class="filters" method="get" action="/">'
                f'<label>tool {_options("tool", tools, filters.tool, "any tool")}</label>'
                f'<label>kind {_options("kind", KINDS, filters.kind, "any kind")}</label>'
                f'<label>rule {_options("rule", rules, filters.rule, "any rule")}</label>'
                f'<label>since <input type="text" name="since" value="{text(since)}" placeholder="1h, 2d, 2026-12-01" '
                'size="12"></label><button type="submit">Filter</button></form>\n')
    head = "".join(f'<th class="n">{kind}</th>' for kind in KINDS)
    lines = []
    for row in rows:
        name = text(row.name)
        link = name if row.history else f'<a href="/session?{urlencode({"path": row.path})}">{name}</a>'
        cells = []
        for kind in KINDS:
            value = row.counts.get(kind, 0)
            shown = "…" if kind == "findings" and not row.audited else number(value)
            bad = kind in ("blocked", "unknown", "findings") and value
            cells.append(f'<td class="n{" err" if bad else ""}">{shown}</td>')
        state = f'<span class="err mono">{text(row.error)}</span>' if row.error else (
            "history" if row.history else "")
        lines.append(f'<tr><td class="path">{link}</td><td class="n">{number(row.calls)}</td>{"".join(cells)}'
                     f'<td class="mono">{text(_when(row.last))}</td><td>{state}</td></tr>\n')
    if not lines:
        lines.append(f'<tr><td colspan="{len(KINDS) + 4}" class="note">no session matches</td></tr>\n')
    body.append(f'<section class="panel"><table id="sessions"><thead><tr><th>Session</th><th class="n">calls</th>'
                f'{head}<th>last record (UTC)</th><th></th></tr></thead><tbody>{"".join(lines)}</tbody></table>'
                '</section>\n')
    pages = max(1, (total + PAGE_SIZE - 1) // PAGE_SIZE)
    pager = [f'<span class="note">{count(total, "session")} match · page {number(page + 1)} of {number(pages)}</span>']
    if page > 0:
        pager.append(f'<a href="{text(_query(filters, since, page - 1))}">newer</a>')
    if page + 1 < pages:
        pager.append(f'<a href="{text(_query(filters, since, page + 1))}">older</a>')
    body.append(f'<div class="pager">{"".join(pager)}</div>\n')
    return layout("Sessions", "/", body, version, waiting)


def session_page(row: SessionRow, detail: SessionDetail, marks: Sequence[CallMark], version: str, waiting: int) -> str:
    """One session: its counts, the calls that did not simply run, and the report's timeline."""
    bad = {kind for kind in ("blocked", "unknown", "findings") if row.counts[kind]}
    cards = "".join(f'<div class="card{" bad" if kind in bad else ""}"><div class="v">{number(row.counts[kind])}</div>'
                    f'<div class="l">{kind}</div></div>'
                    for kind in KINDS)
    body = [f'<header class="top"><h1 class="path">{text(row.name)}</h1>'
            f'<p class="sub">{count(row.calls, "call")}</p></header>\n<div class="cards">{cards}</div>\n']
    if row.error:
        body.append(f'<p class="flash err mono">{text(row.error)}</p>\n')
    if marks:
        items = "".join(f'<tr><td class="n"><a href="#c{mark.index}">{mark.index}</a></td><td>{text(mark.tool)}</td>'
                        f'<td>{text(mark.mark)}</td><td>{text(mark.note)}</td></tr>' for mark in marks)
        body.append('<section class="panel"><h3>Blocked, approved and unknown</h3><table id="marks"><thead><tr>'
                    '<th class="n">index</th><th>tool</th><th>outcome</th><th>how</th></tr></thead>'
                    f'<tbody>{items}</tbody></table></section>\n')
    body.append('<section class="panel">\n')
    body.extend(session_view(detail))
    body.append("</section>\n")
    return layout(row.name, "/", body, version, waiting)


def inbox_page(requests: Sequence[Request | tuple[str, str]], csrf: str, person: str, version: str,
               message: str | None = None, error: bool = False, *, signs: bool = False) -> str:
    """The calls waiting for a person, each with its approve and deny buttons; a call only an approval receipt lets
    run says so, and can be approved only when the console `signs` (has a key), by signing its receipt."""
    waiting = sum(1 for item in requests if isinstance(item, Request))
    body = ['<header class="top"><h1>Approvals inbox</h1>'
            f'<p class="sub">{count(waiting, "call")} waiting; you decide as {text(person)}</p></header>\n',
            _flash(message, error)]
    if not requests:
        body.append('<p class="note" id="empty">No call is waiting for a person.</p>\n')
    for item in requests:
        if not isinstance(item, Request):
            body.append(f'<p class="flash err mono">{text(item[0])}: {text(item[1])}</p>\n')
            continue
        args = json.dumps(item.args, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        where = [part for part in (("session " + item.session) if item.session else "",
                                   ("via " + item.front_end) if item.front_end else "",
                                   ("asked by rule " + item.rule) if item.rule else "", "asked " + item.asked,
                                   "refused after " + _when(item.deadline) + " UTC") if part]
        buttons = "".join(f'<button type="submit" name="decision" value="approve:{scope}">approve {scope}</button>'
                          for scope in ("once", "session", "always"))
        note = ""
        if item.receipt is not None and signs:
            note = (f'<p class="note receipt">runs only with an approval receipt: approving signs one with this '
                    f'console\'s key, as {text(person)}</p>')
        elif item.receipt is not None:  # nothing this console can do makes it run
            buttons = ""
            note = ('<p class="flash err receipt">runs only with an approval receipt signed by an approver: this '
                    'console has no key, so it can only deny it here (start it with <code>toolreplay serve '
                    '--ssh-key KEY</code> to approve it)</p>')
        body.append(f'<section class="panel request" data-id="{text(item.id)}"><div class="t">{text(item.tool)}</div>'
                    f'<p class="meta">{text(" · ".join(where))}</p><pre>{json_text(args)}</pre>{note}'
                    f'<form class="act" method="post" action="/inbox/decide"><input type="hidden" name="csrf" '
                    f'value="{text(csrf)}"><input type="hidden" name="id" value="{text(item.id)}">{buttons}'
                    '<button type="submit" class="deny" name="decision" value="deny:once">deny</button></form>'
                    '</section>\n')
    return layout("Inbox", "/inbox", body, version, waiting)


def approvals_page(files: Sequence[tuple[str, Sequence[Approval] | str]], csrf: str, version: str, waiting: int,
                   message: str | None = None, error: bool = False) -> str:
    """The approvals remembered for good, per file, each revocable; a file that cannot be read says why."""
    body = ['<header class="top"><h1>Remembered approvals</h1>'
            '<p class="sub">answers a person asked to keep; revoking one asks again next time</p></header>\n',
            _flash(message, error)]
    if not files:
        body.append('<p class="note">No approvals file was given '
                    '(<code>toolreplay serve --approvals FILE</code>).</p>\n')
    for path, approvals in files:
        body.append(f'<section class="panel"><h3 class="path">{text(path)}</h3>\n')
        if isinstance(approvals, str):
            body.append(f'<p class="err mono">{text(approvals)}</p></section>\n')
            continue
        if not approvals:
            body.append('<p class="note">none</p>')
        for approval in approvals:
            body.append(f'<div class="request"><span class="mono">{text(approval.describe())}</span> '
                        f'<form class="act" method="post" action="/approvals/revoke"><input type="hidden" name="csrf" '
                        f'value="{text(csrf)}"><input type="hidden" name="file" value="{text(path)}">'
                        f'<input type="hidden" name="id" value="{text(approval.id)}">'
                        '<button type="submit" class="deny">revoke</button></form></div>\n')
        body.append("</section>\n")
    return layout("Remembered approvals", "/approvals", body, version, waiting)


def message_page(title: str, message: str, version: str | None = None, status_word: str = "error") -> str:
    """A page that only says something went wrong (an unknown session, a bad form), and links back."""
    return layout(title, "", [f'<header class="top"><h1>{text(title)}</h1></header>\n',
                              f'<p class="flash err" role="alert">{text(status_word)}: {text(message)}</p>\n',
                              '<p><a href="/">back to the sessions</a></p>\n'], version)
