"""Mock order-support tools, a five-case suite over them, and two scripted models.

`mock_model` picks the right tool for each question; `sloppy_model` is the same script except that it
calls `get_order` on the order the customer mentions where it should count the customer's orders.
Both are rules over the question's text, not real models, and answer from the one response they get.
"""

from __future__ import annotations

import re
from typing import Any

from toolreplay.evaluation.agent import Answer, Conversation, ToolCall

__all__ = ["SUITE", "TOOLS", "count_orders", "get_order", "get_refund", "mock_model", "sloppy_model",
           "track_shipment"]

_ORDERS: dict[int, dict[str, Any]] = {
    2950: {"customer_id": "C-2077", "status": "completed", "items": ["phone case"], "total": "290.00"},
    2987: {"customer_id": "C-1042", "status": "completed", "items": ["rice cooker"], "total": "1490.00"},
    2999: {"customer_id": "C-2077", "status": "completed", "items": ["screen protector"], "total": "150.00"},
    3001: {"customer_id": "C-0311", "status": "shipped", "items": ["USB-C cable"], "total": "190.00"},
    3002: {"customer_id": "C-1042", "status": "completed", "items": ["kettle"], "total": "690.00"},
    3008: {"customer_id": "C-0502", "status": "shipped", "items": ["desk lamp"], "total": "1290.00"},
    3010: {"customer_id": "C-2077", "status": "cancelled", "items": ["charger"], "total": "390.00"},
    3012: {"customer_id": "C-0788", "status": "cancelled", "items": ["backpack"], "total": "850.00"},
    3015: {"customer_id": "C-1042", "status": "completed", "items": ["water filter"], "total": "420.00"},
    3021: {"customer_id": "C-2077", "status": "shipped", "items": ["earbuds"], "total": "990.00"},
}
_SHIPMENTS = {3001: ("Kerry Express", "KEX0003001", "2026-12-01"),
              3008: ("Thailand Post", "EF123456789TH", "2026-12-03"),
              3021: ("Flash Express", "FLE0003021", "2026-12-02")}
_REFUNDS = {3012: ("refunded", "850.00")}


def get_order(order_id: int) -> dict[str, Any]:
    """One order: its customer, status, items and total (THB)."""
    if order_id not in _ORDERS:
        return {"ok": False, "error": f"no order {order_id}"}
    return {"order_id": order_id, **_ORDERS[order_id]}


def count_orders(customer_id: str) -> dict[str, Any]:
    """How many orders a customer placed, in total and by status."""
    statuses = [order["status"] for order in _ORDERS.values() if order["customer_id"] == customer_id]
    by_status = {status: statuses.count(status) for status in sorted(set(statuses))}
    return {"customer_id": customer_id, "total": len(statuses), "by_status": by_status}


def track_shipment(order_id: int) -> dict[str, Any]:
    """Carrier, tracking number and expected delivery date of a shipped order."""
    if order_id not in _SHIPMENTS:
        return {"ok": False, "error": f"no shipment for order {order_id}"}
    carrier, tracking, eta = _SHIPMENTS[order_id]
    return {"order_id": order_id, "carrier": carrier, "tracking": tracking, "eta": eta}


def get_refund(order_id: int) -> dict[str, Any]:
    """The refund of a cancelled order: its status and amount (THB)."""
    if order_id not in _REFUNDS:
        return {"ok": False, "error": f"no refund for order {order_id}"}
    status, amount = _REFUNDS[order_id]
    return {"order_id": order_id, "status": status, "amount": amount, "currency": "THB"}


TOOLS = {"count_orders": count_orders, "get_order": get_order, "get_refund": get_refund,
         "track_shipment": track_shipment}

SUITE: dict[str, Any] = {
    "tools": {"module": "toolreplay.demos.orders:TOOLS"},
    "cases": [
        {"id": "order-status", "question": "What is the status of order 3001?",
         "expected_answer": "shipped", "expected_tools": [{"tool": "get_order", "args": {"order_id": 3001}}]},
        {"id": "delivery-date", "question": "When will order 3008 arrive?",
         "expected_answer": "2026-12-03", "expected_tools": ["track_shipment"]},
        {"id": "all-orders-completed",
         "question": "I'm customer C-1042 and my last order was 3015. Are all my orders completed?",
         "expected_answer": "completed",
         "expected_tools": [{"tool": "count_orders", "args": {"customer_id": "C-1042"}}]},
        {"id": "orders-placed",
         "question": "I'm customer C-2077 (latest order 3021). How many orders have I placed?",
         "expected_answer": "4 orders",
         "expected_tools": [{"tool": "count_orders", "args": {"customer_id": "C-2077"}}]},
        {"id": "refund-status", "question": "Has my refund for order 3012 gone through?",
         "expected_answer": ["refunded", "850.00"],
         "expected_tools": [{"tool": "get_refund", "args": {"order_id": 3012}}]},
    ],
}

_ORDER_NUMBER = re.compile(r"(?<![\w-])(\d{4})\b")
_CUSTOMER = re.compile(r"\bC-\d{4}\b")
_COUNTING = re.compile(r"how many|all my orders", re.IGNORECASE)


def _plan(question: str, counts: bool) -> ToolCall | None:
    order = _ORDER_NUMBER.search(question)
    customer = _CUSTOMER.search(question)
    if customer and _COUNTING.search(question):
        if counts:
            return ToolCall("count_orders", {"customer_id": customer.group()})
        # the sloppy script's mistake: look at the one order mentioned instead of counting
    if order is None:
        return None
    order_id = int(order.group(1))
    if re.search(r"refund", question, re.IGNORECASE):
        return ToolCall("get_refund", {"order_id": order_id})
    if re.search(r"arrive|deliver", question, re.IGNORECASE):
        return ToolCall("track_shipment", {"order_id": order_id})
    return ToolCall("get_order", {"order_id": order_id})


def _reply(question: str, tool: str, response: dict[str, Any]) -> str:
    if response.get("ok") is False:
        return f"Sorry, I could not look that up: {response.get('error')}."
    if tool == "count_orders":
        total = response["total"]
        if re.search(r"how many", question, re.IGNORECASE):
            return f"You have placed {total} orders."
        completed = response["by_status"].get("completed", 0)
        if completed == total:
            return f"Yes, all {total} of your orders are completed."
        return f"Not yet: {completed} of your {total} orders are completed."
    if tool == "track_shipment":
        return (f"Order {response['order_id']} is with {response['carrier']} "
                f"(tracking {response['tracking']}), expected on {response['eta']}.")
    if tool == "get_refund":
        return (f"The refund for order {response['order_id']} is {response['status']}: "
                f"{response['amount']} {response['currency']}.")
    return f"Order {response['order_id']} is {response['status']}."


def _script(conversation: Conversation, counts: bool) -> ToolCall | Answer:
    if conversation.calls:
        last = conversation.calls[-1]
        return Answer(_reply(conversation.question, last.tool, last.response))
    call = _plan(conversation.question, counts)
    if call is None:
        return Answer("I need an order number or a customer id to help with that.")
    return call


def mock_model(conversation: Conversation) -> ToolCall | Answer:
    """A scripted model that picks the right tool, then answers from its response."""
    return _script(conversation, counts=True)


def sloppy_model(conversation: Conversation) -> ToolCall | Answer:
    """The same script, but it calls get_order where count_orders is needed."""
    return _script(conversation, counts=False)
