"""A stand-in of Prolific's REST API (an httpx.MockTransport), for the provider's tests and
the service's.

The stand-in keeps state the way Prolific does for the endpoints the provider uses
(draft study → publish → submissions → transitions → bonus set-up → pay), refuses bodies
with unknown or missing fields (so a misspelt field name fails here), pages submissions
by at most 3 whatever `limit` asks, and pays a bulk bonus payment again every time its pay
endpoint is called, as Prolific documents. Faults are queued per route.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict, deque

import httpx

from app.crowd.platforms.prolific.provider import ProlificProvider

TOKEN = "pk-test-7f3a9c1e-secret"
BASE = "https://prolific.test/api/v1/"
CREATE_REQUIRED = {
    "name", "description", "external_study_url", "prolific_id_option", "completion_codes",
    "total_available_places", "estimated_completion_time", "reward",
}  # fmt: skip
CREATE_KNOWN = CREATE_REQUIRED | {
    "internal_name", "device_compatibility", "filters", "peripheral_requirements",
    "maximum_allowed_time", "submissions_config", "project", "study_labels",
}  # fmt: skip
CATEGORIES = {
    "BAD_CODE", "FAILED_CHECK", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "LOW_EFFORT",
    "MALINGERING", "NO_CODE", "NO_DATA", "OTHER", "TOO_QUICKLY", "TOO_SLOWLY", "UNSUPP_DEVICE",
}  # fmt: skip
LONG_MESSAGE = (
    "Your answers did not follow the instructions: every text was answered with the same "
    "option within a second, which the study treats as not reading the texts."
)


def prolific_error(status: int, detail, title: str = "Bad request") -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"status": status, "title": title, "detail": detail}}
    )


class FakeProlific:
    """Prolific's API as far as the provider uses it, with state."""

    page_cap = 3

    def __init__(self) -> None:
        self.studies: dict[str, dict] = {}
        self.submissions: dict[str, dict] = {}
        self.setups: dict[str, dict] = {}
        self.paid: list[tuple[str, int]] = []  # (submission id, cents) per payment made
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, dict]] = []  # (method, path, JSON body) sent
        self.faults: dict[tuple[str, str], deque] = defaultdict(deque)
        self.balance = {
            "currency_code": "GBP",
            "total_balance": 90_000,
            "available_balance": 81_250,
        }
        self._n = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def provider(self, **options) -> ProlificProvider:
        self.sleeps: list[float] = []
        options.setdefault("sleep", self.sleeps.append)
        return ProlificProvider(TOKEN, api_url=BASE, transport=self.transport(), **options)

    def fail(self, method: str, path: str, *responses) -> None:
        """Answer the next calls of `method path` with `responses` (a Response, or a
        callable run on the request: the request is then processed and its answer lost)."""
        self.faults[(method, path)].extend(responses)

    def new_id(self) -> str:
        self._n += 1
        return f"{self._n:024x}"

    def add_submission(self, study_id: str, status: str = "AWAITING REVIEW") -> str:
        sid = self.new_id()
        self.submissions[sid] = {
            "id": sid,
            "participant_id": f"p{sid[-6:]}",
            "study_id": study_id,
            "status": status,
            "started_at": "2026-11-20T10:00:00.000000Z",
            "completed_at": None if status == "ACTIVE" else "2026-11-20T10:09:30.000000Z",
            "bonus_payments": [],
        }
        return sid

    # -- dispatch ---------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1/")
        self.calls.append((request.method, path))
        if request.content:
            self.bodies.append((request.method, path, json.loads(request.content)))
        if request.headers.get("Authorization") != f"Token {TOKEN}":
            return prolific_error(401, "Invalid token.", "Unauthorized")
        queue = self.faults.get((request.method, path))
        if queue:
            fault = queue.popleft()
            if not isinstance(fault, httpx.Response):
                self.route(request, path)  # processed, but the answer is lost
                return fault
            return fault
        return self.route(request, path)

    def route(self, request: httpx.Request, path: str) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        m = request.method
        if m == "POST" and path == "studies/":
            return self.create_study(body)
        if m == "GET" and path == "studies/":
            return self.list_studies(request.url.params)
        if match := re.fullmatch(r"studies/(\w+)/", path):
            study = self.studies.get(match[1])
            return httpx.Response(200, json=study) if study else prolific_error(404, "Not found.")
        if match := re.fullmatch(r"studies/(\w+)/transition/", path):
            return self.transition_study(match[1], body)
        if match := re.fullmatch(r"studies/(\w+)/submissions/", path):
            return self.list_submissions(match[1], request.url.params)
        if m == "GET" and (match := re.fullmatch(r"submissions/(\w+)/", path)):
            sub = self.submissions.get(match[1])
            if sub is None:
                return prolific_error(404, "Not found.")
            shown = {k: v for k, v in sub.items() if k != "participant_id"}
            return httpx.Response(200, json={**shown, "participant": sub["participant_id"]})
        if match := re.fullmatch(r"submissions/(\w+)/transition/", path):
            return self.transition_submission(match[1], body)
        if m == "POST" and path == "submissions/bonus-payments/":
            return self.set_up_bonus(body)
        if m == "POST" and (match := re.fullmatch(r"bulk-bonus-payments/(\w+)/pay/", path)):
            setup = self.setups.get(match[1])
            if setup is None:
                return prolific_error(404, "Not found.")
            for sid, cents in setup["rows"]:  # not idempotent: every call pays again
                self.paid.append((sid, cents))
                self.submissions[sid]["bonus_payments"].append(float(cents))
            return httpx.Response(202, json={})
        if m == "GET" and re.fullmatch(r"workspaces/(\w+)/balance/", path):
            return httpx.Response(200, json=self.balance)
        return prolific_error(404, f"No route {m} {path}")

    def create_study(self, body: dict) -> httpx.Response:
        if missing := CREATE_REQUIRED - body.keys():
            return prolific_error(400, {k: ["This field is required."] for k in sorted(missing)})
        if unknown := body.keys() - CREATE_KNOWN:
            return prolific_error(400, {k: ["Unknown field."] for k in sorted(unknown)})
        if body["prolific_id_option"] not in {"question", "url_parameters", "not_required"}:
            return prolific_error(400, {"prolific_id_option": ["Not a valid choice."]})
        for code in body["completion_codes"]:
            if set(code) - {"code", "code_type", "actions", "actor"} or not code.get("code"):
                return prolific_error(400, {"completion_codes": ["Invalid completion code."]})
        if not isinstance(body["reward"], int) or body["reward"] < 1:
            return prolific_error(400, {"reward": ["Must be a positive number of cents."]})
        sid = self.new_id()
        self.studies[sid] = {**body, "id": sid, "status": "UNPUBLISHED"}
        return httpx.Response(201, json=self.studies[sid])

    def transition_study(self, sid: str, body: dict) -> httpx.Response:
        study = self.studies.get(sid)
        if study is None:
            return prolific_error(404, "Not found.")
        moves = {
            ("UNPUBLISHED", "PUBLISH"): "ACTIVE",
            ("ACTIVE", "PAUSE"): "PAUSED",
            ("PAUSED", "START"): "ACTIVE",
            ("ACTIVE", "STOP"): "AWAITING REVIEW",
            ("PAUSED", "STOP"): "AWAITING REVIEW",
        }
        new = moves.get((study["status"], body.get("action")))
        if new is None:
            return prolific_error(
                400, f"Cannot {body.get('action')} a study that is {study['status']}."
            )
        study["status"] = new
        return httpx.Response(200, json=study)

    def list_studies(self, params) -> httpx.Response:
        """GET /studies/: the workspace's studies, `page_cap` a page, the next page's link."""
        rows = list(self.studies.values())
        offset = int(params.get("offset", 0))
        page = rows[offset : offset + self.page_cap]
        more = offset + self.page_cap < len(rows)
        nxt = f"{BASE}studies/?offset={offset + self.page_cap}"
        return httpx.Response(
            200, json={"results": page, "_links": {"next": {"href": nxt if more else None}}}
        )

    def list_submissions(self, sid: str, params) -> httpx.Response:
        rows = [s for s in self.submissions.values() if s["study_id"] == sid]
        offset = int(params.get("offset", 0))
        limit = min(int(params.get("limit", 20)), self.page_cap)
        page = rows[offset : offset + limit]
        more = offset + limit < len(rows)
        nxt = f"{BASE}studies/{sid}/submissions/?limit={limit}&offset={offset + limit}"
        return httpx.Response(
            200,
            json={
                "results": page,
                "_links": {"next": {"href": nxt if more else None}},
                "meta": {"count": len(rows)},
            },
        )

    def transition_submission(self, sid: str, body: dict) -> httpx.Response:
        sub = self.submissions.get(sid)
        if sub is None:
            return prolific_error(404, "Not found.")
        action = body.get("action")
        if set(body) - {"action", "message", "rejection_category"}:
            return prolific_error(400, "Unknown field.")
        if action == "REJECT":
            if len(body.get("message") or "") < 100:
                return prolific_error(400, {"message": ["It must be at least 100 chars long."]})
            if body.get("rejection_category") not in CATEGORIES:
                return prolific_error(400, {"rejection_category": ["Not a valid choice."]})
        target = {"APPROVE": "APPROVED", "REJECT": "REJECTED"}.get(action)
        if target is None or sub["status"] != "AWAITING REVIEW":
            return prolific_error(400, f"Submission cannot be transitioned from {sub['status']}.")
        sub["status"] = target
        return httpx.Response(200, json={"id": sid, "status": target})

    def set_up_bonus(self, body: dict) -> httpx.Response:
        if set(body) != {"study_id", "csv_bonuses"}:
            return prolific_error(400, "study_id and csv_bonuses are required.")
        rows = []
        for line in body["csv_bonuses"].strip().splitlines():
            sid, amount = line.split(",")
            sub = self.submissions.get(sid)
            if sub is None or sub["study_id"] != body["study_id"]:
                return prolific_error(400, f"{sid} did not take part in the study.")
            if not re.fullmatch(r"\d+\.\d\d", amount):
                return prolific_error(400, f"{amount} is not an amount.")
            rows.append((sid, round(float(amount) * 100)))
        bid = self.new_id()
        self.setups[bid] = {"study_id": body["study_id"], "rows": rows}
        return httpx.Response(201, json={"id": bid, "study": body["study_id"], "amount": 0})

    def count(self, method: str, pattern: str) -> int:
        return sum(1 for m, p in self.calls if m == method and re.fullmatch(pattern, p))
