"""Table bookings: stateful tools made fresh per run, two scripted agents and an end-state scorer.

`make_tools()` returns a new table of tools over a new, empty booking book: give it to a suite as
`{"factory": "toolreplay.demos.bookings:make_tools"}` and every run starts from the same state.
`TOOLS` is one such table made at import, shared by every run that uses it (its bookings pile up).

`careful_agent` (an `async def`) looks at the customer's bookings, books the table asked for, and
reads the bookings again to confirm; `hasty_agent` books straight away, on the day after the one asked
for, and answers without checking. Both are rules over the question's text, not real models.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any

from toolreplay.evaluation.agent import Answer, CallResult, Conversation, ToolCall

__all__ = ["TOOLS", "booking_made", "careful_agent", "hasty_agent", "make_tools"]


def make_tools() -> dict[str, Callable[..., dict[str, Any]]]:
    """A fresh table of booking tools over an empty booking book."""
    bookings: list[dict[str, Any]] = []

    def list_bookings(customer_id: str) -> dict[str, Any]:
        """The customer's bookings, oldest first."""
        return {"customer_id": customer_id,
                "bookings": [booking for booking in bookings if booking["customer_id"] == customer_id]}

    def book_table(customer_id: str, date: str, party_size: float, note: str = "") -> dict[str, Any]:
        """Book a table; the booking id counts up from B-1 in this book."""
        if isinstance(party_size, bool) or not isinstance(party_size, (int, float)) \
                or party_size not in range(1, 13):
            return {"ok": False, "error": "party_size must be a whole number from 1 to 12"}
        booking = {"booking_id": f"B-{len(bookings) + 1}", "customer_id": customer_id, "date": date,
                   "party_size": int(party_size)}
        bookings.append(booking)
        return {"ok": True, **booking}

    return {"book_table": book_table, "list_bookings": list_bookings}


TOOLS = make_tools()

_CUSTOMER = re.compile(r"\bC-\d+\b")
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_PARTY = re.compile(r"\bfor (\d+)\b")


def _request(question: str) -> tuple[str, str, int]:
    customer, date, party = _CUSTOMER.search(question), _DATE.search(question), _PARTY.search(question)
    if customer is None or date is None or party is None:
        raise ValueError("the question names no customer, date or party size")
    return customer.group(), date.group(), int(party.group(1))


def _summary(response: dict[str, Any]) -> str:
    rows = [f"{b['booking_id']} on {b['date']} for {b['party_size']}" for b in response.get("bookings", [])]
    return "; ".join(rows) if rows else "none"


async def careful_agent(conversation: Conversation) -> ToolCall | Answer:
    """Check the bookings, book, check again, then answer from the last check."""
    customer, date, party = _request(conversation.question)
    done = [call.tool for call in conversation.calls]
    if not done:
        return ToolCall("list_bookings", {"customer_id": customer})
    if done == ["list_bookings"]:
        return ToolCall("book_table", {"customer_id": customer, "date": date, "party_size": party,
                                       "note": "booked by the assistant"})
    if done == ["list_bookings", "book_table"]:
        return ToolCall("list_bookings", {"customer_id": customer})
    return Answer(f"Booked. Your bookings: {_summary(conversation.calls[-1].response)}.")


def hasty_agent(conversation: Conversation) -> ToolCall | Answer:
    """Book at once (on the wrong day: one day late) and answer without checking."""
    customer, date, party = _request(conversation.question)
    if not conversation.calls:
        late = datetime.date.fromisoformat(date) + datetime.timedelta(days=1)
        return ToolCall("book_table", {"customer_id": customer, "date": late.isoformat(),
                                       "party_size": float(party)})
    return Answer(f"Booked: {conversation.calls[0].response.get('booking_id', 'not booked')}.")


def booking_made(answer: str, calls: tuple[CallResult, ...], case: Any) -> bool:
    """End-state check: replay the run's bookings on a fresh book; the customer must hold exactly one
    booking, on the date and for the party size the question asks for."""
    customer, date, party = _request(case.question)
    tools = make_tools()
    for call in calls:
        if call.tool == "book_table" and call.response.get("ok") is True:
            tools["book_table"](**call.args)
    held = tools["list_bookings"](customer_id=customer)["bookings"]
    return [(booking["date"], booking["party_size"]) for booking in held] == [(date, party)]
