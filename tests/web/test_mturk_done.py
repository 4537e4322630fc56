"""The MTurk done page: after our store, its form posts the stored answers on to MTurk
(screen slots and our assignment id, so MTurk's answer XML can restore them), never a
model rank or an item's kind."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from sqlalchemy import select

from app.models import Assignment, HitPosition, Judgment
from tests.hits.factory import make_study

MTURK_ORIGIN = "https://workersandbox.mturk.com"
OPEN = "/mturk/{slug}?assignmentId=A1&hitId=H1&workerId=W1&turkSubmitTo=" + MTURK_ORIGIN


class Forms(HTMLParser):
    """Every form of a page: its action and its inputs' (name, value), in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append({"action": a.get("action"), "inputs": []})
        elif tag == "input" and self.forms and a.get("name"):
            self.forms[-1]["inputs"].append((a["name"], a.get("value") or ""))


def submit_form(html: str) -> list[tuple[str, str]]:
    parsed = Forms()
    parsed.feed(html)
    (form,) = [f for f in parsed.forms if (f["action"] or "").endswith("/mturk/externalSubmit")]
    return form["inputs"]


@pytest.fixture
def study(session):
    study = make_study(session, slug="done1", per_cell=10, lengths=(10,), min_ms_per_item=0)
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    return study


def answers(session, public_id: str, rank: int) -> dict[str, str]:
    """The form's answers choosing the model's `rank` everywhere (its slot varies)."""
    hit_id = session.scalar(select(Assignment.hit_id).where(Assignment.public_id == public_id))
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(HitPosition.hit_id == hit_id)
    ).all()
    return {f"o{p}": str(order.index(rank)) for p, order in rows}


def stored_slots(session, public_id: str) -> dict[int, int]:
    rows = session.execute(
        select(Judgment.position, Judgment.option)
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .where(Assignment.public_id == public_id)
    ).all()
    return dict(rows)


def test_the_done_form_carries_the_stored_slots_and_our_assignment_id(client, session, study):
    page = client.get(OPEN.format(slug=study.slug))
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    public_id = hidden["assignment"]
    sent = answers(session, public_id, rank=0)
    r = client.post(f"/mturk/{study.slug}/submit", data={**hidden, **sent})

    assert r.status_code == 200 and r.template.name == "annotate/mturk_done.html"
    slots = stored_slots(session, public_id)
    assert len(slots) == 11 and {str(s) for s in slots.values()} != {"0"}  # slots, not ranks
    fields_of = [(f"o{p}", str(s)) for p, s in sorted(slots.items())]
    assert r.context["stored"] == {"assignment": public_id, "fields": fields_of}
    fields = submit_form(r.text)
    assert fields == [
        ("assignmentId", "A1"),
        ("ebc", "stored"),
        ("assignment", public_id),
        *((f"o{p}", str(s)) for p, s in sorted(slots.items())),
    ]
    assert {name: value for name, value in fields if name.startswith("o")} == sent
    # Nothing of a kind, a rank or a probability, in a name or in the page's words.
    assert not [n for n, _ in fields if re.search(r"kind|rank|prob|model|data", n)]
    words = re.sub(r"<[^>]*>", " ", r.text).lower()
    assert not re.search(r"\b(data|model|rank|kind|top-?1)\b", words)

    # Reopened from MTurk: the same stored answers are offered again.
    again = client.get(OPEN.format(slug=study.slug))
    assert again.template.name == "annotate/mturk_done.html"
    assert submit_form(again.text) == fields


def test_after_a_repeat_with_other_answers_the_kept_ones_are_posted(client, session, study):
    page = client.get(OPEN.format(slug=study.slug))
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    public_id = hidden["assignment"]
    first = answers(session, public_id, rank=0)
    client.post(f"/mturk/{study.slug}/submit", data={**hidden, **first})

    other = answers(session, public_id, rank=3)
    r = client.post(f"/mturk/{study.slug}/submit", data={**hidden, **other})
    assert r.status_code == 200 and r.context["notice"]  # says which answers were kept
    posted = {n: v for n, v in submit_form(r.text) if re.fullmatch(r"o\d+", n)}
    assert posted == first != other
    kept = [(f"o{p}", str(s)) for p, s in sorted(stored_slots(session, public_id).items())]
    assert r.context["stored"]["fields"] == kept
