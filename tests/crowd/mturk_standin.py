"""A local stand-in for Mechanical Turk's requester API, for end-to-end tests.

It answers botocore's JSON 1.1 protocol (`POST /`, `X-Amz-Target:
MTurkRequesterServiceV20170117.<Operation>`, JSON body) on 127.0.0.1, keeps the state
MTurk would (HIT types, HITs by request token, assignments, approvals, bonuses by token,
blocks, qualifications) and can be told to misbehave: throttle, drop the connection after
doing the work, fail. Signatures are not checked (the client signs with dummy
credentials). Its error bodies carry MTurk's `RequestError` shape (`Message`,
`TurkErrorCode`); the wording of messages that AWS does not document is ours.
"""

from __future__ import annotations

import itertools
import json
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TARGET_PREFIX = "MTurkRequesterServiceV20170117."
ANSWER_NS = (
    "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2005-10-01/"
    "QuestionFormAnswers.xsd"
)


class Drop(Exception):
    """Close the connection without answering (the work may have been done)."""


class Reply(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


def request_error(message: str, code: str) -> Reply:
    return Reply(400, {"__type": "RequestError", "Message": message, "TurkErrorCode": code})


def answer_xml(fields: dict[str, str]) -> str:
    """The QuestionFormAnswers XML MTurk stores for an ExternalQuestion submission."""
    from xml.sax.saxutils import escape

    answers = "".join(
        f"<Answer><QuestionIdentifier>{escape(k)}</QuestionIdentifier>"
        f"<FreeText>{escape(v)}</FreeText></Answer>"
        for k, v in fields.items()
    )
    return (
        f'<?xml version="1.0" encoding="ASCII"?><QuestionFormAnswers xmlns="{ANSWER_NS}">'
        f"{answers}</QuestionFormAnswers>"
    )


@dataclass
class StandInMTurk:
    """The platform's state, and what it was asked."""

    balance: str = "10000.00"
    page_size: int = 100  # assignments per ListAssignmentsForHIT page (at most MaxResults)
    name_hit_in_duplicate_error: bool = True
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hit_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    hits: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    assignments: dict[str, dict[str, Any]] = field(default_factory=dict)
    bonuses: dict[str, dict[str, Any]] = field(default_factory=dict)  # by token
    blocks: dict[str, str] = field(default_factory=dict)
    qualification_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    grants: list[dict[str, Any]] = field(default_factory=list)
    # op -> faults to apply, in order, one per call: "throttle", "rate_exceeded",
    # "drop_after" (do it, then drop the connection), "fault" (a ServiceFault), "refuse"
    # (a RequestError: nothing done).
    faults: dict[str, list[str]] = field(default_factory=dict)
    # op -> called with the request's parameters after the work, before the answer.
    hooks: dict[str, Callable[[dict[str, Any]], None]] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- helpers for tests -------------------------------------------------------------

    def new_id(self, prefix: str = "") -> str:
        n = next(self._ids)
        alphabet = string.ascii_uppercase + string.digits
        body = "".join(alphabet[(n * 7 + i * 13) % 36] for i in range(30 - len(prefix) - 6))
        return f"{prefix}{body}{n:06d}"[:30]

    def add_assignment(
        self,
        hit_id: str,
        worker_id: str,
        *,
        assignment_id: str | None = None,
        status: str = "Submitted",
        answers: dict[str, str] | None = None,
    ) -> str:
        assignment_id = assignment_id or self.new_id("A")
        self.assignments[assignment_id] = {
            "AssignmentId": assignment_id,
            "WorkerId": worker_id,
            "HITId": hit_id,
            "AssignmentStatus": status,
            "SubmitTime": time.time(),
            "AcceptTime": time.time() - 300,
            "Answer": answer_xml(answers or {}),
        }
        return assignment_id

    def count(self, op: str) -> int:
        return sum(1 for name, _ in self.calls if name == op)

    # -- the API ------------------------------------------------------------------------

    def handle(self, op: str, params: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.calls.append((op, params))
            queued = self.faults.get(op) or []
            fault = queued.pop(0) if queued else None
        if fault == "throttle":
            raise Reply(400, {"__type": "ThrottlingException", "message": "Rate exceeded"})
        if fault == "rate_exceeded":
            raise request_error("Rate exceeded", "AWS.MechanicalTurk.RateExceeded")
        if fault == "fault":
            raise Reply(500, {"__type": "ServiceFault", "Message": "internal error"})
        if fault == "refuse":
            raise request_error("Refused by the stand-in", "AWS.MechanicalTurk.InvalidParameter")
        method = getattr(self, f"op_{op}", None)
        if method is None:
            raise request_error(f"{op} is not served by the stand-in", "NotImplemented")
        with self._lock:
            result = method(params)
        hook = self.hooks.get(op)
        if hook is not None:
            hook(params)
        if fault == "drop_after":
            raise Drop()
        return result

    def op_GetAccountBalance(self, p):
        return {"AvailableBalance": self.balance}

    def op_CreateQualificationType(self, p):
        name = p["Name"]
        if name in self.qualification_types:
            raise request_error(
                f"You have already created a QualificationType with this name: {name}",
                "AWS.MechanicalTurk.QualificationTypeAlreadyExists",
            )
        qt = {"QualificationTypeId": self.new_id("Q"), "Name": name, "Status": "Active"}
        self.qualification_types[name] = qt
        return {"QualificationType": qt}

    def op_ListQualificationTypes(self, p):
        found = [qt for name, qt in self.qualification_types.items() if p.get("Query", "") in name]
        return {"NumResults": len(found), "QualificationTypes": found}

    def op_AssociateQualificationWithWorker(self, p):
        self.grants.append(p)
        return {}

    def op_CreateHITType(self, p):
        key = json.dumps(p, sort_keys=True)
        for type_id, known in self.hit_types.items():
            if json.dumps(known, sort_keys=True) == key:
                return {"HITTypeId": type_id}  # MTurk reuses an identical HIT type
        type_id = self.new_id("T")
        self.hit_types[type_id] = p
        return {"HITTypeId": type_id}

    def op_CreateHITWithHITType(self, p):
        if p["HITTypeId"] not in self.hit_types:
            raise request_error("no such HIT type", "AWS.MechanicalTurk.HITTypeDoesNotExist")
        token = p.get("UniqueRequestToken")
        if token and token in self.tokens:
            hit_id = self.tokens[token]
            named = f" HITId: {hit_id}" if self.name_hit_in_duplicate_error else ""
            raise request_error(
                f"There is already a HIT which exists with the same request token.{named}",
                "AWS.MechanicalTurk.HitAlreadyExists",
            )
        hit_id = self.new_id("H")
        self.hits[hit_id] = {
            "HITId": hit_id,
            "HITTypeId": p["HITTypeId"],
            "RequesterAnnotation": p.get("RequesterAnnotation"),
            "MaxAssignments": p.get("MaxAssignments", 1),
            "Question": p.get("Question"),
            "CreationTime": time.time(),
            "Expiration": time.time() + p["LifetimeInSeconds"],
            "HITStatus": "Assignable",
            "UniqueRequestToken": token,
        }
        if token:
            self.tokens[token] = hit_id
        public = {k: v for k, v in self.hits[hit_id].items() if k != "UniqueRequestToken"}
        return {"HIT": public}

    def op_ListHITs(self, p):
        hits = [
            {k: v for k, v in h.items() if k != "UniqueRequestToken"} for h in self.hits.values()
        ]
        return self._page(hits, p, "HITs", p.get("MaxResults", 100))

    def op_ListAssignmentsForHIT(self, p):
        statuses = p.get("AssignmentStatuses") or ["Submitted", "Approved"]
        rows = [
            a
            for a in self.assignments.values()
            if a["HITId"] == p["HITId"] and a["AssignmentStatus"] in statuses
        ]
        return self._page(rows, p, "Assignments", min(self.page_size, p.get("MaxResults", 10)))

    def _page(self, rows, p, key, size):
        start = int(p.get("NextToken") or 0)
        page = rows[start : start + size]
        out = {key: page, "NumResults": len(page)}
        if start + size < len(rows):
            out["NextToken"] = str(start + size)
        return out

    def _assignment(self, p):
        a = self.assignments.get(p["AssignmentId"])
        if a is None:
            raise request_error("no such assignment", "AWS.MechanicalTurk.AssignmentDoesNotExist")
        return a

    def op_GetAssignment(self, p):
        a = self._assignment(p)
        return {"Assignment": a, "HIT": self.hits.get(a["HITId"], {"HITId": a["HITId"]})}

    def op_ApproveAssignment(self, p):
        a = self._assignment(p)
        if a["AssignmentStatus"] != "Submitted":
            raise request_error(
                "This operation can be called with a status of: Submitted",
                "AWS.MechanicalTurk.InvalidAssignmentState",
            )
        a["AssignmentStatus"] = "Approved"
        a["ApprovalTime"] = time.time()
        return {}

    def op_RejectAssignment(self, p):
        a = self._assignment(p)
        if a["AssignmentStatus"] != "Submitted":
            raise request_error(
                "This operation can be called with a status of: Submitted",
                "AWS.MechanicalTurk.InvalidAssignmentState",
            )
        a["AssignmentStatus"] = "Rejected"
        a["RequesterFeedback"] = p["RequesterFeedback"]
        return {}

    def op_SendBonus(self, p):
        token = p.get("UniqueRequestToken")
        if token and token in self.bonuses:
            raise request_error(
                f"The bonus for request token {token} was already paid.",
                "AWS.MechanicalTurk.DuplicateRequest",
            )
        self.bonuses[token or self.new_id("B")] = p
        return {}

    def op_ListBonusPayments(self, p):
        """Every bonus paid on the assignment, whatever its token (MTurk keeps payments
        for good; it forgets tokens after 24 hours)."""
        rows = [
            {
                "WorkerId": b["WorkerId"],
                "BonusAmount": b["BonusAmount"],
                "AssignmentId": b["AssignmentId"],
                "Reason": b["Reason"],
                "GrantTime": time.time(),
            }
            for b in self.bonuses.values()
            if b["AssignmentId"] == p["AssignmentId"]
        ]
        return self._page(rows, p, "BonusPayments", p.get("MaxResults", 100))

    def op_CreateWorkerBlock(self, p):
        self.blocks[p["WorkerId"]] = p["Reason"]
        return {}

    def op_DeleteWorkerBlock(self, p):
        self.blocks.pop(p["WorkerId"], None)
        return {}

    def op_UpdateExpirationForHIT(self, p):
        hit = self.hits.get(p["HITId"])
        if hit is None:
            raise request_error("no such HIT", "AWS.MechanicalTurk.HITDoesNotExist")
        hit["Expiration"] = p["ExpireAt"]
        # A past time expires the HIT at once; a future one lists it again.
        hit["HITStatus"] = "Unassignable" if p["ExpireAt"] <= time.time() else "Assignable"
        return {}

    @property
    def paid_bonuses(self) -> list[dict[str, Any]]:
        return list(self.bonuses.values())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    standin: StandInMTurk

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        target = self.headers.get("X-Amz-Target", "")
        if not target.startswith(TARGET_PREFIX):
            self._send(400, {"__type": "UnknownOperationException", "message": target})
            return
        try:
            result = self.standin.handle(target[len(TARGET_PREFIX) :], body)
        except Drop:
            self.close_connection = True
            return
        except Reply as reply:
            self._send(reply.status, reply.body)
            return
        self._send(200, result)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("x-amzn-RequestId", "standin")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # quiet
        pass


class Server:
    """The stand-in served on 127.0.0.1 in a thread, as a context manager."""

    def __init__(self, standin: StandInMTurk | None = None) -> None:
        self.standin = standin or StandInMTurk()
        handler = type("Handler", (_Handler,), {"standin": self.standin})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll: `shutdown` waits for the loop's next poll (0.5 s by default), at the
        # end of every test that serves the stand-in.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
