"""The rule engine: argument-aware rules, evaluated the same way by the guard and by `scope`.

A rule applies to some tools and has an effect (`deny`, `ask` or `allow`), a reason, and two lists of
conditions: it *fires* on a call when every `when` condition holds and not every `unless` condition
holds. A condition can also be impossible to evaluate on a call (a missing argument, a value of the
wrong type, a value its matcher will not read); it then yields a *rule error*, a string saying why,
and the logic is three-valued (false and error is false, true and error is error). A deny or ask
rule whose outcome is an error fires anyway, with "rule error: ..." as its reason: the rules fail
closed. An allow rule that cannot be evaluated does not fire.

Evaluation is split in two so that `scope` can do the costly half in its worker processes:

- `RuleSet.prepare(tool, args)` looks only at the call: it evaluates the argument conditions and
  extracts the keys the sequence conditions need, into a small picklable tuple;
- `RuleState.check(tool, prepared, now)` adds the session's history (earlier executed calls, counts,
  times) and returns the `Ruling`. A call that is not refused by the rules is counted as executed at
  once; `RuleState.withdraw(ruling)` takes it back when the call does not run after all (a person
  refused it, or the record shows the guard refused it).

A *shadow* rule (`"shadow": true`) is evaluated like the others but never decides: what it would have
decided goes to `Ruling.shadows`, for the guard to record (`meta["x-shadow"]`), and the call is
counted as the other rules let it run.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolreplay.format.canonical import CanonicalError, canonical_bytes
from toolreplay.format.strictjson import json_type_name
from toolreplay.policy.matchers import MatchError, host_matches, is_under, url_host
from toolreplay.policy.regexbound import MAX_INPUT

__all__ = ["ArgCondition", "AfterCondition", "CountCondition", "RateCondition", "IdenticalCondition", "Condition",
           "Rule", "RuleSet", "RuleState", "Ruling", "EFFECTS", "ARG_OPERATORS", "COUNTED_OUTCOMES"]

EFFECTS = ("deny", "ask", "allow")
# The outcomes (meta.outcome) of the calls that count as executed for `after`, `count`, `rate` and
# `identical`: the call ran, or may have (a write cut short); a refused, cached or cancelled one did not.
COUNTED_OUTCOMES = frozenset({"ran", "unknown"})
STRING_OPERATORS = ("under", "glob", "regex", "host")
NUMBER_OPERATORS = ("lt", "le", "gt", "ge")
LENGTH_OPERATORS = ("max_length", "min_length")
ARG_OPERATORS = STRING_OPERATORS + ("eq", "in") + NUMBER_OPERATORS + LENGTH_OPERATORS

# How prepare() evaluates a rule of argument conditions only: one `when`, one `unless`, or any.
_STATELESS, _ONE_WHEN, _ONE_UNLESS = 1, 2, 3

# A condition's outcome on one call: True, False, or the reason it cannot be evaluated.
Outcome = bool | str


@dataclass(frozen=True, slots=True)
class ArgCondition:
    """A test of one argument (`path` goes down nested objects and arrays) with one operator."""

    path: tuple[str | int, ...]
    operator: str
    operand: Any  # prepared by the loader: (folders, root) as segment tuples, a compiled pattern, canonical bytes...

    def evaluate(self, args: dict[str, Any]) -> Outcome:
        """Whether the call's argument passes the test, or why it cannot be tested."""
        path = self.path
        if len(path) == 1:  # the common case: a top-level argument
            if path[0] not in args:
                return f"argument {self.name} is missing"
            return _TESTS[self.operator](self, args[path[0]])
        value: Any = args
        for step in path:
            if isinstance(step, str):
                if not isinstance(value, dict) or step not in value:
                    return f"argument {self.name} is missing"
            elif not isinstance(value, (list, tuple)) or not -len(value) <= step < len(value):
                return f"argument {self.name} is missing"
            value = value[step]
        return _TESTS[self.operator](self, value)

    @property
    def name(self) -> str:
        """The argument's name as written in messages: `"a"`, `"a.b"`, `"a[0]"`."""
        text = ""
        for step in self.path:
            text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
        return f'"{text}"'


@dataclass(frozen=True, slots=True)
class AfterCondition:
    """Holds when an earlier executed call of `tool` had the same values of the `same` arguments."""

    tool: str
    same: tuple[str, ...]
    slot: int  # which table of earlier calls: one per distinct (tool, same)


@dataclass(frozen=True, slots=True)
class CountCondition:
    """Holds while the executed calls of `tool` (None: of every tool), this one included, are at most `limit`."""

    tool: str | None
    limit: int


@dataclass(frozen=True, slots=True)
class RateCondition:
    """Holds while the calls of `tool` (None: all) in the last `seconds`, this one included, are at most `limit`."""

    tool: str | None
    limit: int
    seconds: float
    slot: int


@dataclass(frozen=True, slots=True)
class IdenticalCondition:
    """Holds while the executed calls identical to this one (same tool, canonically equal arguments), this one
    included, are at most `limit`, in the last `seconds` when given; `tool` (None: every tool) is whose calls
    it counts: on a call of another tool it holds."""

    tool: str | None
    limit: int
    seconds: float | None = None


Condition = ArgCondition | AfterCondition | CountCondition | RateCondition | IdenticalCondition


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the policy file."""

    id: str
    tools: frozenset[str] | None  # None: every tool (`"*"`)
    effect: str
    reason: str
    when: tuple[Condition, ...] = ()
    unless: tuple[Condition, ...] | None = None  # None: no `unless` list
    shadow: bool = False  # decides nothing: what it would have decided is recorded (`Ruling.shadows`)

    @property
    def has_rate(self) -> bool:
        """Whether the rule needs call times (which a record does not carry): a `rate`, or a window of `identical`."""
        return any(isinstance(c, RateCondition) or (isinstance(c, IdenticalCondition) and c.seconds is not None)
                   for c in self.when + (self.unless or ()))


@dataclass(slots=True)
class Ruling:
    """What the rules say about one call: the firing deny and ask rules as (id, reason), and allow; the
    shadow rules that would have fired, as (id, effect, reason), decide nothing."""

    denials: list[tuple[str, str]] = field(default_factory=list)
    asks: list[tuple[str, str]] = field(default_factory=list)
    allowed: bool = False
    reserved: tuple[Any, ...] | None = None  # what check() counted, for withdraw()
    shadows: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def refusal(self) -> str | None:
        """The refusal text of the first firing deny rule, or None."""
        if not self.denials:
            return None
        rule_id, reason = self.denials[0]
        return f"denied by rule {rule_id}: {reason}"


# ---- argument tests -------------------------------------------------------------------------------

def _type_name(value: Any) -> str:
    """`a string`, `an array`, `null`: the JSON type of an argument, for a rule error's reason."""
    name = "array" if isinstance(value, tuple) else json_type_name(value)
    return name if name == "null" else ("an " if name[0] in "aeiou" else "a ") + name


def _wrong_type(condition: ArgCondition, value: Any, wanted: str) -> str:
    return f"argument {condition.name} is {_type_name(value)}, not {wanted}"


def _test_under(c: ArgCondition, value: Any) -> Outcome:
    if not isinstance(value, str):
        return _wrong_type(c, value, "a string")
    try:
        return is_under(value, *c.operand)
    except MatchError as exc:
        return f"argument {c.name} {exc}"


def _test_glob(c: ArgCondition, value: Any) -> Outcome:
    if not isinstance(value, str):
        return _wrong_type(c, value, "a string")
    return bool(c.operand.fullmatch(value) is not None)


def _test_regex(c: ArgCondition, value: Any) -> Outcome:
    if not isinstance(value, str):
        return _wrong_type(c, value, "a string")
    if len(value) > MAX_INPUT:  # the bound that keeps a backtracking match short (regexbound)
        return f"argument {c.name} is longer than {MAX_INPUT:,} characters, the most a regex rule tests"
    return bool(c.operand.fullmatch(value) is not None)


def _test_host(c: ArgCondition, value: Any) -> Outcome:
    if not isinstance(value, str):
        return _wrong_type(c, value, "a string")
    try:
        return host_matches(url_host(value), c.operand)
    except MatchError as exc:
        return f"argument {c.name} {exc}"


def _canonical(value: Any) -> bytes | None:
    try:
        return canonical_bytes(value)
    except (CanonicalError, RecursionError):
        return None


def _test_eq(c: ArgCondition, value: Any) -> Outcome:
    key = _canonical(value)
    return f"argument {c.name} has no JSON form" if key is None else key == c.operand


def _test_in(c: ArgCondition, value: Any) -> Outcome:
    key = _canonical(value)
    return f"argument {c.name} has no JSON form" if key is None else key in c.operand


def _number(c: ArgCondition, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if value == value else None  # NaN compares with nothing


def _test_number(c: ArgCondition, value: Any) -> Outcome:
    number = _number(c, value)
    if number is None:
        return _wrong_type(c, value, "a number")
    operator, bound = c.operator, c.operand
    if operator == "lt":
        return bool(number < bound)
    if operator == "le":
        return bool(number <= bound)
    if operator == "gt":
        return bool(number > bound)
    return bool(number >= bound)


def _test_length(c: ArgCondition, value: Any) -> Outcome:
    if not isinstance(value, (str, list, tuple)):
        return _wrong_type(c, value, "a string or an array")
    return bool(len(value) <= c.operand if c.operator == "max_length" else len(value) >= c.operand)


_TESTS = {"under": _test_under, "glob": _test_glob, "regex": _test_regex, "host": _test_host,
          "eq": _test_eq, "in": _test_in, "lt": _test_number, "le": _test_number, "gt": _test_number,
          "ge": _test_number, "max_length": _test_length, "min_length": _test_length}


def _sequence_key(args: dict[str, Any], names: tuple[str, ...]) -> bytes | str:
    values = []
    for name in names:
        if name not in args:
            return f'argument "{name}" is missing'
        values.append(args[name])
    key = _canonical(values)
    return "the arguments have no JSON form" if key is None else key


def _both(left: Outcome, right: Outcome) -> Outcome:
    """Three-valued AND: false wins, then the first error, then true."""
    if left is False or right is False:
        return False
    return left if left is not True else right


# ---- the rule set ---------------------------------------------------------------------------------

class RuleSet:
    """The compiled rules of a policy, indexed by tool; immutable and picklable."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        """Index the rules; conditions come from the policy loader, already validated."""
        self.rules = rules
        self._for_tool: dict[str, tuple[int, ...]] = {}
        self._everyone = tuple(i for i, rule in enumerate(rules) if rule.tools is None)
        for position, rule in enumerate(rules):
            for tool in rule.tools or ():
                self._for_tool[tool] = self._for_tool.get(tool, ()) + (position,)
        for tool, positions in self._for_tool.items():
            self._for_tool[tool] = tuple(sorted(positions + self._everyone))
        self._entries = {tool: self._lists(positions) for tool, positions in self._for_tool.items()}
        self._everyone_entries = self._lists(self._everyone)
        # The sequence tables: a call of TOOL leaves the key of its `same` values in each slot of TOOL.
        slots: dict[tuple[str, tuple[str, ...]], int] = {}
        for condition in self._conditions():
            if isinstance(condition, AfterCondition):
                slots.setdefault((condition.tool, condition.same), condition.slot)
        self._provides: dict[str, tuple[tuple[int, tuple[str, ...]], ...]] = {}
        for (tool, same), slot in slots.items():
            self._provides[tool] = self._provides.get(tool, ()) + ((slot, same),)
        self.slot_count = len(slots)
        rates = [c for c in self._conditions() if isinstance(c, RateCondition)]
        self.rate_slots = len(rates)
        self._rates_of: dict[str, tuple[int, ...]] = {}
        for tool in {c.tool for c in rates if c.tool is not None} | {""}:
            self._rates_of[tool] = tuple(c.slot for c in rates if c.tool in (None, tool))
        # the rules a backtest cannot check without times (a shadow rule it does not check at all)
        self.unchecked_offline = tuple(rule.id for rule in rules if rule.has_rate and not rule.shadow)
        # `identical`: the tools whose calls leave their identity, and whether counts or times are kept
        identical = [(rule.tools, c) for rule in rules for c in rule.when + (rule.unless or ())
                     if isinstance(c, IdenticalCondition)]
        self._identical_everyone = any(tools is None and c.tool is None for tools, c in identical)
        self._identical_tools = frozenset(name for tools, c in identical
                                          for name in ((c.tool,) if c.tool is not None else tools or ()))
        self.identical_counted = any(c.seconds is None for _, c in identical)
        self.identical_window = max((c.seconds for _, c in identical if c.seconds is not None), default=0.0)

    def _conditions(self) -> list[Condition]:
        return [c for rule in self.rules for c in rule.when + (rule.unless or ())]

    def _lists(self, positions: tuple[int, ...]) -> tuple[tuple[int, tuple[Condition, ...], Any, int], ...]:
        """Per rule: position, conditions, and how `prepare` evaluates it (0: it needs the history)."""
        found = []
        for position in positions:
            rule = self.rules[position]
            kind = 0
            if all(type(c) is ArgCondition for c in rule.when + (rule.unless or ())):
                kind = _STATELESS
                if len(rule.when) == 1 and rule.unless is None:
                    kind = _ONE_WHEN
                elif not rule.when and rule.unless is not None and len(rule.unless) == 1:
                    kind = _ONE_UNLESS
            found.append((position, rule.when, rule.unless, kind))
        return tuple(found)

    def applies_to(self, tool: str) -> bool:
        """Whether any rule applies to calls of `tool` (one that names it, or one for every tool)."""
        return bool(self._for_tool.get(tool, self._everyone))

    def rate_slots_of(self, tool: str) -> tuple[int, ...]:
        """The rate conditions a call of `tool` counts towards."""
        return self._rates_of.get(tool, self._rates_of[""])

    def __bool__(self) -> bool:
        return bool(self.rules)

    def prepare(self, tool: str, args: dict[str, Any]) -> tuple[Any, ...] | None:
        """What the call alone decides, as (decided, pending, keys, identity), or None when that is nothing:

        - decided: (position, outcome) of each rule with argument conditions only that fires or errs;
        - pending: (position, when inputs, unless inputs) of each rule that needs the history, an
          input being a condition's outcome, the sequence key of an `after` condition or the identity
          of an `identical` condition;
        - keys: (slot, key) of the sequence keys this call leaves for later `after` conditions;
        - identity: the digest of the call for `identical` conditions (None: none counts it; a string:
          why it has none).
        """
        entries = self._entries.get(tool, self._everyone_entries)
        provides = self._provides.get(tool)
        if not entries and provides is None:
            return None
        identity = None
        if self._identical_everyone or tool in self._identical_tools:
            identity = _identity(tool, args)
        decided = []
        pending = []
        for position, when, unless, stateless in entries:
            if stateless == _ONE_WHEN:
                fires = when[0].evaluate(args)  # type: ignore[union-attr]
                if fires is not False:
                    decided.append((position, fires))
            elif stateless == _ONE_UNLESS:
                holds = unless[0].evaluate(args)
                if holds is not True:
                    decided.append((position, True if holds is False else holds))
            elif stateless:
                fires = _combine((c.evaluate(args) for c in when),  # type: ignore[union-attr]
                                 None if unless is None else (c.evaluate(args) for c in unless))
                if fires is not False:
                    decided.append((position, fires))
            else:
                pending.append((position, [_prepare(c, args, identity) for c in when],
                                None if unless is None else [_prepare(c, args, identity) for c in unless]))
        keys: tuple[tuple[int, bytes], ...] = ()
        if provides is not None:
            keys = tuple((slot, key) for slot, same in provides if isinstance(key := _sequence_key(args, same), bytes))
        if not decided and not pending and not keys:
            return None
        return decided, pending, keys, identity


def _combine(when: Iterable[Outcome], unless: Iterable[Outcome] | None) -> Outcome:
    """Whether a rule fires: every `when` outcome holds and not every `unless` one (three-valued)."""
    fires: Outcome = True
    for outcome in when:
        fires = _both(fires, outcome)
        if fires is False:
            return False
    if unless is None:
        return fires
    every: Outcome = True
    for outcome in unless:
        every = _both(every, outcome)
        if every is False:
            return fires
    return False if every is True else _both(fires, every)


def _prepare(condition: Condition, args: dict[str, Any], identity: bytes | str | None) -> Any:
    if type(condition) is ArgCondition:
        return condition.evaluate(args)
    if isinstance(condition, AfterCondition):
        return _sequence_key(args, condition.same)
    if isinstance(condition, IdenticalCondition):
        return identity
    return None


def _identity(tool: str, args: dict[str, Any]) -> bytes | str:
    """A digest of the canonical call (memory per distinct call stays small), or why it has none."""
    key = _canonical([tool, args])
    return "the arguments have no JSON form" if key is None else hashlib.sha256(key).digest()


class RuleState:
    """The history a session's rules need: executed-call keys, counts and times. Thread-safe."""

    def __init__(self, rules: RuleSet, *, offline: bool = False) -> None:
        """`offline`: a backtest over a record, whose calls carry a time (`meta.ts`) or not; a call checked
        with `now=None` has no time, so rates cannot be checked on it and count as holding."""
        self._rules = rules
        self._offline = offline
        self._seen: list[dict[bytes, int]] = [{} for _ in range(rules.slot_count)]
        self._counts: dict[str, int] = {}
        self._total = 0
        self._times: list[deque[float]] = [deque() for _ in range(rules.rate_slots)]
        self._identical: dict[bytes, int] = {}  # identity -> executed calls (`identical` without `seconds`)
        self._identical_times: dict[bytes, deque[float]] = {}  # identity -> their times (with `seconds`)
        self._lock = threading.Lock()

    def copy(self) -> RuleState:
        """A state of its own with the same history (a gate that starts from a history kept for several)."""
        with self._lock:
            other = RuleState(self._rules, offline=self._offline)
            other._seen = [dict(table) for table in self._seen]
            other._counts = dict(self._counts)
            other._total = self._total
            other._times = [deque(times) for times in self._times]
            other._identical = dict(self._identical)
            other._identical_times = {identity: deque(times) for identity, times in self._identical_times.items()}
            return other

    def note(self, tool: str, now: float | None = None) -> None:
        """Offline, the same as `check` for an executed call that `prepare` found nothing to say about."""
        with self._lock:
            self._counts[tool] = self._counts.get(tool, 0) + 1
            self._total += 1
            if self._rules.rate_slots and now is not None:
                for slot in self._rules.rate_slots_of(tool):
                    self._times[slot].append(now)

    def check(self, tool: str, prepared: tuple[Any, ...] | None, now: float | None = 0.0) -> Ruling:
        """The ruling on a call at time `now` (seconds; None: not known); unless it is denied, the call is
        counted as executed."""
        ruling = Ruling()
        rules = self._rules.rules
        with self._lock:
            if prepared is not None:
                decided, pending = prepared[0], prepared[1]
                outcomes = list(decided)
                for position, when, unless in pending:
                    rule = rules[position]
                    fires = _combine(
                        (self._outcome(c, p, tool, now) for c, p in zip(rule.when, when, strict=True)),
                        None if rule.unless is None or unless is None else
                        (self._outcome(c, p, tool, now) for c, p in zip(rule.unless, unless, strict=True)))
                    if fires is not False:
                        outcomes.append((position, fires))
                if decided and pending:
                    outcomes.sort(key=_first)  # file order
                for position, fires in outcomes:
                    _apply(rules[position], fires, ruling)
            if not ruling.denials:
                ruling.reserved = self._reserve(tool, prepared, now)
        return ruling

    def withdraw(self, ruling: Ruling) -> None:
        """Undo what `check` counted for a call that did not run after all."""
        if ruling.reserved is None:
            return
        tool, keys, now, identity = ruling.reserved
        ruling.reserved = None
        with self._lock:
            if identity is not None:
                self._unreserve_identical(identity, now)
            self._counts[tool] -= 1
            self._total -= 1
            for slot, key in keys:
                left = self._seen[slot][key] - 1
                if left:
                    self._seen[slot][key] = left
                else:
                    del self._seen[slot][key]
            for slot in () if now is None else self._rules.rate_slots_of(tool):
                try:
                    self._times[slot].remove(now)
                except ValueError:  # already aged out of the window
                    pass

    def _outcome(self, condition: Condition, prepared: Any, tool: str, now: float | None) -> Outcome:
        if isinstance(condition, ArgCondition):
            return prepared  # type: ignore[no-any-return]
        if isinstance(condition, AfterCondition):
            if isinstance(prepared, str):
                return prepared
            return prepared in self._seen[condition.slot]
        if isinstance(condition, CountCondition):
            if condition.tool is None:
                return self._total + 1 <= condition.limit
            return self._counts.get(condition.tool, 0) + (condition.tool == tool) <= condition.limit
        if isinstance(condition, IdenticalCondition):
            return self._identical_outcome(condition, prepared, tool, now)
        if now is None:
            return True
        times = self._times[condition.slot]
        while times and times[0] <= now - condition.seconds:
            times.popleft()
        return len(times) + (condition.tool in (None, tool)) <= condition.limit

    def _reserve(self, tool: str, prepared: tuple[Any, ...] | None, now: float | None) -> tuple[Any, ...]:
        self._counts[tool] = self._counts.get(tool, 0) + 1
        self._total += 1
        keys: tuple[tuple[int, bytes], ...] = () if prepared is None else prepared[2]
        for slot, key in keys:
            table = self._seen[slot]
            table[key] = table.get(key, 0) + 1
        if self._rules.rate_slots and now is not None:
            for slot in self._rules.rate_slots_of(tool):
                self._times[slot].append(now)
        identity = None if prepared is None or not isinstance(prepared[3], bytes) else prepared[3]
        if identity is not None:
            if self._rules.identical_counted:
                self._identical[identity] = self._identical.get(identity, 0) + 1
            if self._rules.identical_window and now is not None:
                self._identical_times.setdefault(identity, deque()).append(now)
        return tool, keys, now, identity

    def _identical_outcome(self, condition: IdenticalCondition, identity: Any, tool: str, now: float | None) -> Outcome:
        if condition.tool is not None and condition.tool != tool:
            return True  # no call of its tool is identical to this one
        if isinstance(identity, str) or identity is None:
            return identity or "the call has no identity"
        if condition.seconds is None:
            return self._identical.get(identity, 0) + 1 <= condition.limit
        if now is None:
            return True
        times = self._identical_times.get(identity)
        if times is None:
            return 1 <= condition.limit
        while times and times[0] <= now - self._rules.identical_window:  # older than every window
            times.popleft()
        since, count = now - condition.seconds, 1
        for then in reversed(times):
            if then <= since:
                break
            count += 1
        return count <= condition.limit

    def _unreserve_identical(self, identity: bytes, now: float | None) -> None:
        """Take back one executed call of `identity` (lock held); an identity with nothing left is forgotten."""
        count = self._identical.get(identity)
        if count is not None:
            if count > 1:
                self._identical[identity] = count - 1
            else:
                del self._identical[identity]
        times = self._identical_times.get(identity)
        if times is not None and now is not None:
            try:
                times.remove(now)
            except ValueError:  # already aged out of the window
                pass
            if not times:
                del self._identical_times[identity]


def _first(item: tuple[int, Outcome]) -> int:
    return item[0]


def _apply(rule: Rule, fires: Outcome, ruling: Ruling) -> None:
    """Add a rule that fires (True) or errs (a reason) to the ruling; an erring allow rule does nothing; a
    shadow rule only says what it would have decided."""
    if rule.shadow:
        if rule.effect != "allow" or fires is True:
            ruling.shadows.append((rule.id, rule.effect, rule.reason if fires is True else f"rule error: {fires}"))
        return
    if rule.effect == "allow":
        ruling.allowed = ruling.allowed or fires is True
        return
    reason = rule.reason if fires is True else f"rule error: {fires}"
    (ruling.denials if rule.effect == "deny" else ruling.asks).append((rule.id, reason))
