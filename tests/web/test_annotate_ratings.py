"""A ratings study's annotator pages through HTTP: two page loads per pair (quality, then
the context and consistency), every channel, bad input, nothing that tells a pair's kind."""

import re
from html import unescape

import pytest
from sqlalchemy import func, select

from app.annotation.identities import invite_token
from app.crowd.platforms.prolific.entry import entry_key
from app.models import Assignment, AssignmentStatus, Hit, HitPosition, Item, Rating
from tests.hits.factory import annotator
from tests.hits.ratings_factory import PREFIX_WORDS, PROMPT_WORDS, make_ratings_study

MTURK_ORIGIN = "https://workersandbox.mturk.com"
KINDS = ("data", "model", "attention", "shuffled", "random", "corrupted")


def _hidden(html):
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', html))


def _item(session, public_id, position):
    return session.scalar(
        select(Item)
        .join(HitPosition, HitPosition.item_id == Item.id)
        .join(Assignment, Assignment.hit_id == HitPosition.hit_id)
        .where(Assignment.public_id == public_id, HitPosition.position == int(position))
    )


def _visible(html):
    return re.sub(r"<[^>]+>", " ", unescape(html)).lower()


def _snapshot(session):
    ratings = session.execute(
        select(Rating.assignment_id, Rating.position, Rating.quality, Rating.consistency)
    ).all()
    assignments = session.execute(select(Assignment.id, Assignment.status)).all()
    hits = session.execute(select(Hit.id, Hit.leased_count, Hit.submitted_count)).all()
    return sorted(ratings), sorted(assignments), sorted(hits)


@pytest.fixture
def study(session):
    return make_ratings_study(session, per_cell=10, min_seconds_per_item=0)


@pytest.fixture
def link(session, settings, study):
    return f"/a/{invite_token(settings.secret_key, annotator(session, study))}"


def _rate_hit(client, get_url, post_url, pages=None, quality="3.5", consistency="4"):
    """Rate every pair of the HIT `get_url` shows, two steps each: the last post's response
    and, when it redirects, the page it leads to (the next HIT's)."""
    r = client.get(get_url)
    while True:
        assert r.template.name == "ratings/rate.html", r.text
        if pages is not None:
            pages.append(r.text)
        fields = _hidden(r.text)
        value = quality if fields["step"] == "quality" else consistency
        last = client.post(post_url, data={**fields, "rating": value}, follow_redirects=False)
        if last.status_code != 303:
            return last, None
        location = last.headers["location"]
        r = client.get(location)
        if "n=" in location:  # the HIT is done
            return last, r


def test_each_pair_is_rated_for_quality_first_then_its_context_is_shown(client, session, link):
    r = client.get(link)
    assert r.status_code == 200 and r.template.name == "ratings/rate.html"
    assert "HIT 1 of at most 200" in r.text and "Text 1 of 11" in r.text
    assert "frame-ancestors *" in r.headers["content-security-policy"]
    assert r.headers["cache-control"] == "no-store"  # the back button reloads, never a copy
    fields = _hidden(r.text)
    assert (fields["position"], fields["step"]) == ("0", "quality")
    item = _item(session, fields["assignment"], 0)
    assert item.continuation in r.text
    # The context is nowhere on the quality page: no word of any prompt or prefix.
    shown = set(_visible(r.text).split()) | set(re.findall(r"\w+", r.text.lower()))
    assert not shown & set(PROMPT_WORDS + PREFIX_WORDS)
    assert len(re.findall(r'type="radio" name="rating"', r.text)) == 11  # 0, 0.5, ..., 5

    r = client.post(f"{link}/submit", data={**fields, "rating": "2.5"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == link
    stored = session.scalar(select(Rating))
    assert (stored.quality, stored.consistency, stored.item_id) == (2.5, None, item.id)

    r = client.get(link)
    fields = _hidden(r.text)
    assert (fields["position"], fields["step"]) == ("0", "consistency")
    assert f"{item.prompt} {item.words}" in r.text and item.continuation in r.text
    assert "Your quality rating: <strong>2.5</strong>" in r.text
    # the quality cannot be sent again with another value, whatever the form says
    forged = {**fields, "step": "quality", "rating": "5"}
    before = _snapshot(session)
    refused = client.post(f"{link}/submit", data=forged)
    assert refused.status_code == 409 and "can no longer be changed" in refused.text
    assert refused.template.name == "ratings/rate.html"  # the step due, again
    assert _hidden(refused.text)["step"] == "consistency" and _snapshot(session) == before

    r = client.post(f"{link}/submit", data={**fields, "rating": "4"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == link
    assert session.scalar(select(Rating.consistency)) == 4.0
    assert _hidden(client.get(link).text)["position"] == "1"


def test_a_whole_hit_then_the_next_one(client, session, link):
    done, page = _rate_hit(client, link, f"{link}/submit")
    assert done.headers["location"] == f"{link}?n=ok"
    assert "your answers were saved" in page.text and "HIT 2 of at most 200" in page.text
    assert page.template.name == "ratings/rate.html" and "Text 1 of 11" in page.text
    ratings = session.scalars(select(Rating)).all()
    assert len(ratings) == 11 and {(r.quality, r.consistency) for r in ratings} == {(3.5, 4.0)}
    first = session.scalar(select(Assignment).where(Assignment.id == ratings[0].assignment_id))
    assert first.status is AssignmentStatus.submitted and not first.late


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"position": "11"}, 400),  # a pair not in this HIT
        ({"position": "x"}, 400),
        ({"position": "-1"}, 400),
        ({"step": "both"}, 400),
        ({"rating": "5.5"}, 400),  # off the scale
        ({"rating": "7"}, 400),
        ({"rating": "2.25"}, 400),  # not on the step
        ({"rating": "<script>"}, 400),
        ({"rating": ""}, 400),
        ({"step": "consistency"}, 409),  # a consistency before the quality
        ({"position": "3"}, 409),  # not the pair due
        ({"assignment": "made-up"}, 404),
        ({"ms": "soon"}, 400),
    ],
)
def test_bad_input_is_a_4xx_and_stores_nothing(client, session, link, change, status):
    fields = _hidden(client.get(link).text)
    before = _snapshot(session)
    r = client.post(f"{link}/submit", data={**fields, "rating": "3", **change})
    assert r.status_code == status
    assert "<script>" not in r.text  # the refused value is shown escaped, if at all
    assert _snapshot(session) == before and session.scalar(select(func.count(Rating.id))) == 0


def test_another_annotators_assignment_is_refused(client, session, settings, study, link):
    fields = _hidden(client.get(link).text)
    other = f"/a/{invite_token(settings.secret_key, annotator(session, study, 'b'))}"
    client.get(other)
    before = _snapshot(session)
    r = client.post(f"{other}/submit", data={**fields, "rating": "3"})
    assert r.status_code == 404 and _snapshot(session) == before


def test_a_refused_choice_shows_the_same_step_with_the_reason(client, session, link):
    fields = _hidden(client.get(link).text)
    r = client.post(f"{link}/submit", data=fields)  # no rating chosen (no JavaScript)
    assert r.status_code == 400 and r.template.name == "ratings/rate.html"
    assert "Please choose a rating first" in r.text
    assert _hidden(r.text) == fields


def _mturk(slug, assignment="A1", worker="W1", submit_to=MTURK_ORIGIN):
    return (
        f"/mturk/{slug}?assignmentId={assignment}&hitId=H1&workerId={worker}"
        f"&turkSubmitTo={submit_to}"
    )


def test_mturk_preview_steps_and_external_submit(client, session, study):
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    r = client.get(f"/mturk/{study.slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    assert (
        r.status_code == 200 and "This is a preview" in r.text and "rate 11 short texts" in r.text
    )
    assert "disabled" in r.text and session.scalar(select(func.count(Assignment.id))) == 0
    r = client.get(_mturk(study.slug))
    fields = _hidden(r.text)
    assert r.template.name == "ratings/rate.html"
    assert (fields["assignmentId"], fields["workerId"]) == ("A1", "W1")
    assert f"form-action 'self' {MTURK_ORIGIN}" in r.headers["content-security-policy"]
    post = f"/mturk/{study.slug}/submit"
    for forged, status in (({"assignmentId": "A9"}, 400), ({"workerId": "W2"}, 404)):
        before = _snapshot(session)
        r = client.post(post, data={**fields, "rating": "1", **forged}, follow_redirects=False)
        assert r.status_code == status and _snapshot(session) == before
    r = client.post(post, data={**fields, "rating": "1"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith(f"/mturk/{study.slug}?assignmentId=A1&workerId=W1")
    step2 = client.get(r.headers["location"])
    assert _hidden(step2.text)["step"] == "consistency"
    last, _ = _rate_hit(client, r.headers["location"], post, quality="1", consistency="0.5")
    assert last.status_code == 200 and last.template.name == "annotate/mturk_done.html"
    assert f'action="{MTURK_ORIGIN}/mturk/externalSubmit"' in last.text
    sent = _hidden(last.text)
    assert sent["assignmentId"] == "A1" and sent["assignment"] == fields["assignment"]
    assert {k: v for k, v in sent.items() if k[0] in "qc"} == {
        **{f"q{p}": "1" for p in range(11)},
        **{f"c{p}": "0.5" for p in range(11)},
    }
    assert session.scalar(select(func.count(Rating.consistency))) == 11  # stored first
    assert "externalSubmit" in client.get(_mturk(study.slug)).text  # reopened: the same
    # The last rating again: the same value is answered as stored, another one refused.
    final = {**fields, "position": "10", "step": "consistency"}
    before = _snapshot(session)
    again = client.post(post, data={**final, "rating": "0.5"})
    assert again.status_code == 200 and "externalSubmit" in again.text
    changed = client.post(post, data={**final, "rating": "5"})
    assert changed.status_code == 409 and "already given (0.5)" in changed.text
    assert _snapshot(session) == before


def test_a_panel_participant_ends_with_the_completion_code(client, session, settings, study):
    study.channels = {
        "prolific": {
            "enabled": True,
            "participant_param": "PID",
            "study_param": "SID",
            "session_param": "SESS",
            "completion_code": "C0DE42",
            "redirect_url": "https://panel.example/done",
        }
    }
    session.flush()
    key = entry_key(settings.secret_key, study.slug)
    r = client.get(f"/p/{study.slug}?key={key}&PID=p-1&SID=s&SESS=sess-9", follow_redirects=False)
    link = r.headers["location"]
    page = client.get(link)
    assert "C0DE42" not in page.text  # not before a HIT is done
    _, page = _rate_hit(client, link, f"{link}/submit")
    assert "C0DE42" in page.text and "https://panel.example/done" in page.text


def test_nothing_on_the_pages_tells_a_pairs_kind_or_ids(client, session, link):
    pages: list[str] = []
    _, after = _rate_hit(client, link, f"{link}/submit", pages=pages)
    pages += [after.text, client.get("/static/rate.js").text]
    assert len(pages) == 24  # 22 steps, the next HIT, the script
    ids = {str(i) for i in session.scalars(select(Item.id))} | {
        str(i) for i in session.scalars(select(Hit.id))
    }
    for text in pages:
        low = unescape(text).lower()
        for kind in KINDS:
            assert not re.search(rf"\b{kind}\b", _visible(text)), kind
        attributes = re.findall(r'(?:[\w-]+)="([^"]*)"', low)
        assert not any(re.search(rf"\b{k}\b", v) for v in attributes for k in KINDS)
        # ids and links: only the signed token, the assignment's public id, the position
        values = re.findall(r'(?:\bid|href|action|src)="([^"]*)"', low)
        assert not ids & set(values)
        links = re.findall(r'(?:href|action)="([^"]*)"', text)
        assert all(
            re.fullmatch(r"#main|/a/[\w.-]+/(submit|return)|https?://\S+\.(css|js)", u)
            for u in links
        ), links
        assert "item" not in re.sub(r"/a/[\w.-]+|value=\"[\w-]{20,}\"", "", low)
