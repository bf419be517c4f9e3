"""Self-contained HTML pages: one file, inline CSS and script, nothing fetched, light and dark.

Everything that came from a session (paths, tool names, args, responses, messages) goes through
`text` or `json_text` before it reaches the page, so a tool named `<script>` is shown, never run.
The Content-Security-Policy allows no network at all, and only the page's own script (by its hash).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from toolreplay.audit.detail import CallView, SessionDetail
from toolreplay.audit.findings import Finding
from toolreplay.audit.fleet_render import checkpoint_phrase
from toolreplay.format.text import escape_text

__all__ = ["STYLE", "text", "path_text", "json_text", "kind_hue", "script_data", "page", "kind_badge", "stat_cards",
           "args_summaries", "bar_chart", "histogram", "session_view", "number", "count"]

_KIND_HUES = {"non-determinism": 32, "redundant-call": 212, "permission-overreach": 350, "policy-violation": 290,
              "broken-chain": 0, "unreadable": 0, "blocked": 150, "approved": 190, "shadow": 260,
              "unknown-outcome": 15}
# How the timeline marks a call that did not simply run: (class, label), from its outcome or its findings.
_OUTCOME_MARKS = {"refused": ("blocked", "blocked"), "unknown": ("unknown", "unknown outcome"),
                  "cached": ("cached", "cached"), "cancelled": ("cancelled", "cancelled")}
_FINDING_MARKS = {"approved": ("approved", "approved"), "shadow": ("shadow", "shadow")}
_INVISIBLE = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def text(value: str) -> str:
    """Log-controlled text for the page: control and direction characters shown as escapes, then HTML-escaped."""
    return html.escape(escape_text(value), quote=True)


def json_text(value: str) -> str:
    """Canonical JSON for the page: direction characters as JSON escapes (same value), then HTML-escaped."""
    return html.escape(_INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", value), quote=True)


def path_text(path: str, base: str = "") -> str:
    """A path without the `base` every path of the page starts with, its folder muted so names stand out."""
    folder, slash, name = path[len(base):].rpartition("/") if path.startswith(base) else path.rpartition("/")
    return f'<span class="dir">{text(folder + slash)}</span>{text(name)}' if slash else text(name)


def script_data(element_id: str, pieces: Iterable[str]) -> Iterator[str]:
    """A JSON data block for the page's script, from pieces of ASCII JSON; `<` escaped so nothing can end it."""
    yield f'<script type="application/json" id="{element_id}">'
    for piece in pieces:
        yield piece.replace("<", "\\u003c")
    yield "</script>\n"


def number(value: int) -> str:
    """An integer with thousands separators."""
    return f"{value:,}"


def count(value: int, noun: str) -> str:
    """`1 finding`, `2 findings`: a number and its noun."""
    return f"{value:,} {noun}{'' if value == 1 else 's'}"


def _hue(kind: str) -> int:
    return _KIND_HUES.get(kind, zlib.crc32(kind.encode("utf-8")) % 360)


def kind_hue(kind: str) -> int:
    """The hue (0-359) of a finding kind's colour: fixed for the known kinds, derived from the name for others."""
    return _hue(kind)


def kind_badge(kind: str, count: int | None = None) -> str:
    """A coloured label for a finding kind (a colour for any kind, known or new)."""
    suffix = "" if count is None else f" <b>{number(count)}</b>"
    return f'<span class="badge" style="--hue:{_hue(kind)}">{text(kind)}{suffix}</span>'


_CSS = """
:root{color-scheme:light dark;--bg:#f6f7f9;--panel:#fff;--ink:#1c2330;--muted:#5b6576;--line:#dde1e8;
--accent:#2f6fdf;--bad:#c62f3a;--good:#1d8a4e;--code:#f0f2f6;--l:42%;--bgl:94%}
@media (prefers-color-scheme:dark){:root{--bg:#12151b;--panel:#1a1f27;--ink:#e4e8ef;--muted:#9aa4b5;
--line:#2c3440;--accent:#7aa7ff;--bad:#ff7b84;--good:#5cd08f;--code:#222935;--l:72%;--bgl:22%}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"Noto Sans",sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 24px 64px}
header.top{margin-bottom:20px}
h1{font-size:26px;margin:0 0 4px;letter-spacing:-.01em}h2{font-size:19px;margin:32px 0 12px}
h3{font-size:15px;margin:0 0 10px;color:var(--muted);font-weight:600;text-transform:uppercase;letter-spacing:.04em}
.sub{color:var(--muted);margin:0}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:13px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px;margin:18px 0}
.card{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:12px 16px}
.card .v{font-size:26px;font-weight:650;font-variant-numeric:tabular-nums}.card .l{color:var(--muted);font-size:13px}
.card.bad .v{color:var(--bad)}.card.good .v{color:var(--good)}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:14px;align-items:start}
.panel{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:16px 18px;overflow:auto}
.bars{display:grid;grid-template-columns:minmax(90px,max-content) 1fr max-content;gap:6px 10px;align-items:center}
.bars .n{font-variant-numeric:tabular-nums;color:var(--muted);text-align:right}
.bar{height:12px;border-radius:6px;background:hsl(var(--hue,212) 65% var(--l));min-width:2px}
.hist{display:flex;align-items:flex-end;gap:6px;height:150px;padding-top:8px}
.hist>div{flex:1;min-width:0;display:flex;flex-direction:column;justify-content:flex-end;align-items:center;height:100%}
.hist .area{flex:1;width:100%;display:flex;align-items:flex-end}
.hist .col{width:100%;background:var(--accent);border-radius:4px 4px 0 0;min-height:1px;opacity:.8}
.hist small{color:var(--muted);font-size:10px;white-space:nowrap;overflow:hidden;max-width:100%}
.hist .c{font-size:11px;color:var(--muted)}
.badge{display:inline-block;padding:1px 8px;border-radius:999px;font-size:12px;font-weight:600;white-space:nowrap;
color:hsl(var(--hue) 70% var(--l));background:hsl(var(--hue) 70% var(--bgl));margin:1px 2px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:6px 10px;border-bottom:1px solid var(--line);
vertical-align:top}th{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em;
position:sticky;top:0;background:var(--panel)}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:hover{background:var(--code)}.path{word-break:break-all}.dir{opacity:.62}
#sessions td.path{min-width:24em}
.note{color:var(--muted);font-size:13px;margin:8px 0}
.err{color:var(--bad)}.ok{color:var(--good)}
input[type=search]{font:inherit;padding:6px 10px;border:1px solid var(--line);border-radius:8px;
background:var(--panel);color:var(--ink);width:min(420px,100%)}
.session{background:var(--panel);border:1px solid var(--line);border-radius:10px;margin:14px 0}
.session>summary{padding:12px 16px;cursor:pointer;font-weight:600}.session>.body{padding:0 16px 16px}
.meta{color:var(--muted);font-size:13px;font-weight:400}
ol.timeline{list-style:none;margin:8px 0 0;padding:0;border-left:2px solid var(--line)}
ol.timeline>li{margin:0 0 0 -2px;padding:2px 0 2px 12px;border-left:2px solid transparent}
ol.timeline>li.hit{border-left-color:hsl(var(--hue) 70% var(--l))}
ol.timeline>li:target,ol.timeline>li.flash{background:var(--code)}
ol.timeline>li.m-blocked .t,ol.timeline>li.m-cancelled .t{text-decoration:line-through}
ol.timeline>li.m-unknown{border-left-style:dashed}
.mark{font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;padding:0 6px;border-radius:4px;
border:1px solid currentColor}.mark.m-blocked{color:var(--good)}.mark.m-unknown{color:var(--bad)}
.mark.m-approved{color:var(--accent)}.mark.m-shadow,.mark.m-cached,.mark.m-cancelled{color:var(--muted)}
.where li{margin:2px 0}.where .why{color:var(--muted)}
li.gap{color:var(--muted);font-size:13px;font-style:italic;padding:6px 12px}
.call>summary{cursor:pointer;display:flex;gap:10px;align-items:baseline;flex-wrap:wrap;padding:3px 0}
.call .i{color:var(--muted);font-variant-numeric:tabular-nums;min-width:3.5em;text-align:right}
.call .t{font-weight:600}.call .w{color:var(--muted);font-variant-numeric:tabular-nums}
.call .s{color:var(--muted);overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
max-width:32em}
.call .body{padding:6px 0 10px 4.3em}
.finding{border-left:3px solid hsl(var(--hue) 70% var(--l));background:hsl(var(--hue) 70% var(--bgl) / .5);
padding:6px 10px;border-radius:0 6px 6px 0;margin:4px 0}
.pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:10px;margin-top:6px}
pre{background:var(--code);padding:8px 10px;border-radius:6px;white-space:pre-wrap;word-break:break-all;margin:4px 0;
max-height:340px;overflow:auto}
.label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.cut{color:var(--muted);font-size:12px}
.chain-broken{color:var(--bad);font-weight:600}
details.list>summary{cursor:pointer;font-weight:600;margin:4px 0 8px}
button{font:inherit;padding:6px 14px;border:1px solid var(--line);border-radius:8px;background:var(--panel);
color:var(--accent);cursor:pointer;margin-top:10px}#count{color:var(--muted);font-size:13px;margin-left:8px}
.lazy{content-visibility:auto;contain-intrinsic-size:auto 40px}
footer{color:var(--muted);font-size:12px;margin-top:40px}
"""

# Opens a collapsed call or session when a link points into it, and filters the sessions table.
_SCRIPT = """
function reveal(){var id=decodeURIComponent(location.hash.slice(1));if(!id)return;var el=document.getElementById(id);
if(!el)return;for(var p=el;p;p=p.parentElement){if(p.tagName==='DETAILS')p.open=true;}
var d=el.querySelector(':scope>details');if(d)d.open=true;el.scrollIntoView({block:'center'});}
window.addEventListener('hashchange',reveal);reveal();
var data=document.getElementById('rows');
if(data){var d=JSON.parse(data.textContent),rows=d.rows,hues=d.hues,list=rows,shown=0,STEP=500,
body=document.querySelector('#sessions tbody'),more=document.getElementById('more'),q=document.getElementById('filter'),
only=document.getElementById('only'),count=document.getElementById('count');
function el(tag,cls,txt){var e=document.createElement(tag);if(cls)e.className=cls;
if(txt!=null)e.textContent=txt;return e;}
function num(n){return n.toLocaleString('en-US');}
function row(r){var tr=el('tr'),td=el('td','path'),t=td;if(r[5]){t=el('a');t.href='#'+r[5];td.appendChild(t);}
if(r[0])t.appendChild(el('span','dir',r[0]));t.appendChild(document.createTextNode(r[1]));tr.appendChild(td);
tr.appendChild(el('td','n',num(r[2])));tr.appendChild(el('td','n',num(r[3])));var k=el('td');
r[4].forEach(function(p){var b=el('span','badge',p[0]+' ');b.style.setProperty('--hue',hues[p[0]]);
b.appendChild(el('b',null,num(p[1])));k.appendChild(b);});tr.appendChild(k);var s=el('td'),parts=[];
if(r[8]!==null){parts.push(['err','unreadable'],['mono',r[8]]);}
else{if(r[6]!==null)parts.push(['','divergence at '+r[6]]);
if(r[7]!==null)parts.push(['chain-broken','chain broken at '+r[7]]);else if(r[9])parts.push(['ok','chain intact']);
if(r[10])parts.push([r[10]==='failed'?'chain-broken':r[10]==='anchored'?'ok':'','checkpoint '+r[10]]);
if(!parts.length&&!r[3])parts.push(['ok','clean']);}
parts.forEach(function(p,i){if(i)s.appendChild(document.createTextNode(r[8]!==null?' ':', '));
s.appendChild(el('span',p[0],p[1]));});
tr.appendChild(s);return tr;}
function flagged(r){return r[3]>0||r[7]!==null||r[8]!==null||r[10]==='failed';}
function render(){var end=Math.min(shown+STEP,list.length),f=document.createDocumentFragment();
for(var i=shown;i<end;i++)f.appendChild(row(list[i]));body.appendChild(f);shown=end;more.hidden=shown>=list.length;
count.textContent='showing '+num(shown)+' of '+num(list.length)+(list===rows?'':' matching');}
function apply(){var s=q.value.toLowerCase(),o=only.checked;list=(s||o)?rows.filter(function(r){
return(!s||(r[0]+r[1]).toLowerCase().indexOf(s)>=0)&&(!o||flagged(r));}):rows;body.textContent='';shown=0;render();}
q.addEventListener('input',apply);only.addEventListener('change',apply);more.addEventListener('click',render);render();}
"""
STYLE = _CSS  # the pages' style sheet, which the console's pages share

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")
_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src 'sha256-{_SCRIPT_HASH}'; base-uri 'none'; form-action 'none'")


def page(title: str, body: Iterable[str]) -> Iterator[str]:
    """A whole page around `body` (already HTML): head with the policy and style, then the script."""
    yield ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
           f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">\n'
           '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
           '<meta name="color-scheme" content="light dark">\n'
           f"<title>{text(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n")
    yield from body
    yield '<footer>Written by toolreplay. Nothing on this page was fetched from the network.</footer>\n'
    yield f"</main>\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"


def stat_cards(cards: Sequence[tuple[str, int, str]]) -> str:
    """A row of big numbers: (label, value, tone) with tone "", "bad" or "good"."""
    items = "".join(f'<div class="card {tone}"><div class="v">{number(value)}</div><div class="l">{label}</div></div>'
                    for label, value, tone in cards)
    return f'<div class="cards">{items}</div>\n'


def bar_chart(rows: Sequence[tuple[str, int]], *, kinds: bool = False, hue: int = 212) -> str:
    """Horizontal bars, longest first as given; `kinds` colours each bar by its finding kind."""
    if not rows:
        return '<p class="note">None.</p>'
    top = max(count for _, count in rows) or 1
    cells = []
    for label, count in rows:
        colour = _hue(label) if kinds else hue
        name = kind_badge(label) if kinds else f'<span class="mono">{text(label)}</span>'
        cells.append(f'{name}<div class="bar" style="--hue:{colour};width:{max(count * 100 / top, 0.5):.1f}%"></div>'
                     f'<span class="n">{number(count)}</span>')
    return f'<div class="bars">{"".join(cells)}</div>'


def histogram(columns: Sequence[tuple[str, int]]) -> str:
    """Vertical bars with a label under each and the count over it."""
    top = max((count for _, count in columns), default=0) or 1
    cells = "".join(f'<div><span class="c">{number(count)}</span><div class="area"><div class="col" '
                    f'style="height:{count * 100 / top:.1f}%"></div></div><small>{label}</small></div>'
                    for label, count in columns)
    return f'<div class="hist">{cells}</div>'


def _chain_text(detail: SessionDetail) -> str:
    if detail.chain is None:
        return ""
    if detail.chain.intact:
        return '<span class="ok">chain intact</span>'
    return (f'<span class="chain-broken">chain broken at link {detail.chain.broken_at}</span> '
            f'({text(detail.chain.field or "")}: expected <code>{text(detail.chain.expected or "")}</code>, '
            f'found <code>{text(detail.chain.found or "")}</code>)')


def _checkpoint_text(detail: SessionDetail) -> str:
    status = detail.checkpoint
    if status is None:
        return ""
    phrase = text(checkpoint_phrase(status))
    if status.status == "anchored":
        return f'<span class="ok">{phrase}</span>'
    if status.status == "unverified":
        return phrase
    found = "; ".join(f"{kind}: {message}" for kind, message in status.findings)
    return f'<span class="chain-broken">{phrase}</span> ({text(found)})'


def _short(value: str) -> str:
    return text(value if len(value) <= 100 else value[:100] + "…")


def _json_block(label: str, value: str, size: int) -> str:
    cut = "" if size <= len(value.encode("utf-8")) else (
        f' <span class="cut">first {number(len(value))} characters of {number(size)} bytes</span>')
    return f'<div><div class="label">{label}{cut}</div><pre>{json_text(value)}</pre></div>'


def _parsed_args(call: CallView) -> dict[str, Any] | None:
    """A call's args as an object, when the view holds them whole (not cut at the detail's limit)."""
    if len(call.args.encode("utf-8")) < call.args_size:
        return None
    try:
        value = json.loads(call.args)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _value_key(args: dict[str, Any], name: str) -> str:
    return json.dumps(args[name], sort_keys=True) if name in args else "\0absent"  # JSON text never starts so


def args_summaries(calls: Sequence[CallView]) -> dict[int, str]:
    """The one-line args of each shown call, the fields whose values differ between the shown calls of its
    tool first (in name order), then the rest: the one field that tells five attempts apart is the one seen.

    A call whose args are cut, or not an object, keeps its canonical text (calls of a tool shown once too)."""
    by_tool: dict[str, list[tuple[CallView, dict[str, Any]]]] = {}
    for call in calls:
        parsed = _parsed_args(call)
        if parsed is not None:
            by_tool.setdefault(call.tool, []).append((call, parsed))
    summaries: dict[int, str] = {}
    for group in by_tool.values():
        if len(group) < 2:
            continue
        names = sorted({name for _, args in group for name in args})
        differ = [name for name in names if len({_value_key(args, name) for _, args in group}) > 1]
        if not differ:
            continue
        for call, args in group:
            ordered = {name: args[name] for name in differ if name in args}
            ordered.update((name, args[name]) for name in names if name in args and name not in ordered)
            summaries[call.index] = json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))
    return summaries


def _marks(call: CallView, findings: Sequence[Finding]) -> list[tuple[str, str]]:
    """How the timeline marks a call apart from one that ran: blocked, unknown outcome, approved, shadow."""
    marks = [_OUTCOME_MARKS[call.outcome]] if call.outcome in _OUTCOME_MARKS else []
    for f in findings:
        mark = _FINDING_MARKS.get(f.kind)
        if mark is not None and mark not in marks:
            marks.append(mark)
    return marks


def _call_item(call: CallView, findings: Sequence[Finding], shown: dict[int, CallView], prefix: str,
               summary: str | None = None) -> str:
    anchor = f"{prefix}c{call.index}"
    marks = _marks(call, findings)
    classes = "".join(f" m-{name}" for name, _ in marks)
    labels = "".join(f'<span class="mark m-{name}">{label}</span>' for name, label in marks)
    hue = f' style="--hue:{_hue(findings[0].kind)}"' if findings else ""
    badges = "".join(kind_badge(f.kind) for f in findings)
    parts = []
    for f in findings:
        link = ""
        if f.related_index is not None:
            target = f"#{prefix}c{f.related_index}" if f.related_index in shown else ""
            link = (f' <a href="{target}">see index {f.related_index}</a>' if target
                    else f" (index {f.related_index} not shown)")
        parts.append(f'<div class="finding" style="--hue:{_hue(f.kind)}">{kind_badge(f.kind)} {text(f.message)}'
                     f'{link}</div>')
        related = shown.get(f.related_index) if f.related_index is not None else None
        if related is not None and f.related_index != call.index and f.kind == "non-determinism":
            parts.append('<div class="pair">' + _json_block(f"first response, index {related.index}",
                                                            related.response, related.response_size)
                         + _json_block(f"this response, index {call.index}", call.response, call.response_size)
                         + "</div>")
    parts.append('<div class="pair">' + _json_block("args", call.args, call.args_size)
                 + _json_block("response", call.response, call.response_size) + "</div>")
    return (f'<li id="{anchor}" class="lazy{" hit" if findings else ""}{classes}"{hue}><details class="call">'
            f'<summary><span class="i">{call.index}</span>{labels}{_when(call)}<span class="t">{text(call.tool)}</span>'
            f'<span class="s mono">{_short(call.args if summary is None else summary)}</span>'
            f'<span class="s mono">→ {_short(call.response)}</span>'
            f'{badges}</summary><div class="body">{"".join(parts)}</div></details></li>\n')


def _when(call: CallView) -> str:
    """The call's time of day and duration where its record has them (format 1.1), the full time on hover."""
    if call.ts is None and call.duration_ms is None:
        return ""
    parts = [] if call.ts is None else [call.ts[11:-1]]
    if call.duration_ms is not None:
        parts.append(f"{call.duration_ms:g} ms")
    title = f' title="{text(call.ts)}"' if call.ts is not None else ""
    return f'<span class="w"{title}>{text(" · ".join(parts))}</span>'


def _shown(shown: int, total: int) -> str:
    return number(total) if shown == total else f"the first {number(shown)} of {number(total)}"


def _gap(calls: int) -> str:
    return f'<li class="gap">{count(calls, "call")} without shown findings left out</li>\n'


def session_view(detail: SessionDetail, prefix: str = "", findings_open: bool = True) -> Iterator[str]:
    """A session's findings (a list, open or folded) and timeline; anchors start with `prefix` so several fit
    in one page."""
    meta = [count(detail.calls, "call"), count(detail.finding_count, "finding")]
    if detail.information:
        meta.append(f"{number(detail.information)} information")
    if detail.divergence is not None:
        meta.append(f'divergence at <a href="#{prefix}c{detail.divergence}">index {detail.divergence}</a>')
    meta.append(_chain_text(detail))
    meta.append(_checkpoint_text(detail))
    # The findings of calls (information too): a checkpoint's findings are counted in finding_count and shown
    # in the line above.
    listed = (detail.finding_count + detail.information
              - (len(detail.checkpoint.findings) if detail.checkpoint is not None else 0))
    yield f'<p class="meta">{" · ".join(part for part in meta if part)}</p>\n'
    if detail.error is not None:
        yield f'<p class="err mono">{text(detail.error)}</p>\n'
    by_index: dict[int, list[Finding]] = {}
    for f in detail.findings:
        by_index.setdefault(f.index, []).append(f)
    shown = {call.index: call for call in detail.shown_calls}
    if detail.findings:
        rows = "".join(f'<tr><td class="n"><a href="#{prefix}c{f.index}">{f.index}</a></td><td>{kind_badge(f.kind)}'
                       f'</td><td>{text(f.message)}</td></tr>' for f in detail.findings)
        yield (f'<details class="list"{" open" if findings_open else ""}><summary>Findings '
               f'({_shown(len(detail.findings), listed)})</summary>'
               '<table class="findings"><thead><tr><th class="n">Index</th>'
               f'<th>Kind</th><th>Finding</th></tr></thead><tbody>{rows}</tbody></table></details>\n')
    left = listed - len(detail.findings)
    if left > 0:
        yield (f'<p class="note">{number(left)} more findings are not shown here; '
               f'<code>toolreplay replay --format json</code> lists them all.</p>\n')
    if not detail.shown_calls:
        return
    yield '<h3 style="margin-top:16px">Timeline</h3>\n<ol class="timeline">\n'
    previous = -1
    summaries = args_summaries(detail.shown_calls)
    for call in detail.shown_calls:
        if call.index > previous + 1:
            yield _gap(call.index - previous - 1)
        yield _call_item(call, by_index.get(call.index, ()), shown, prefix, summaries.get(call.index))
        previous = call.index
    if detail.calls > previous + 1:
        yield _gap(detail.calls - previous - 1)
    yield "</ol>\n"
