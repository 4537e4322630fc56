"""The annotator's pages through HTTP: flow, channels, headers, abuse, leaks, XSS."""

import re
from collections import Counter
from dataclasses import fields
from html import unescape

import pytest
from sqlalchemy import func, select

from app.annotation.content import HIT_CACHE
from app.annotation.identities import invite_token
from app.crowd.platforms.prolific.entry import entry_key
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Hit,
    HitPosition,
    Item,
    Judgment,
    StudyStatus,
)
from tests.hits.factory import annotator, make_study

MTURK_ORIGIN = "https://workersandbox.mturk.com"


def _form(html):
    """The HIT form's fields and, per position, the option words in screen order."""
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', html))
    words = re.findall(r'<span class="word">([^<]*)</span>', html)
    return hidden, words


def _answer_all(session, public_id, rank=0):
    a = session.scalar(select(Assignment).where(Assignment.public_id == public_id))
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(HitPosition.hit_id == a.hit_id)
    ).all()
    return {f"o{p}": str(order.index(rank)) for p, order in rows}


@pytest.fixture
def study(session):
    return make_study(session, per_cell=10, lengths=(10,))


@pytest.fixture
def link(session, settings, study):
    a = annotator(session, study)
    return f"/a/{invite_token(settings.secret_key, a)}"


def test_invite_flow_page_submit_next_then_no_work(client, session, link):
    r = client.get(link)
    assert r.status_code == 200 and r.template.name == "nextword/hit.html"
    assert "HIT 1 of at most 200" in r.text and r.text.count("<fieldset") == 11
    assert "x-frame-options" not in r.headers
    assert "frame-ancestors *" in r.headers["content-security-policy"]
    assert "set-cookie" not in r.headers  # nothing rides on cookies
    hidden, _ = _form(r.text)
    form = {"assignment": hidden["assignment"], **_answer_all(session, hidden["assignment"])}
    r = client.post(f"{link}/submit", data=form, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"{link}?n=ok"
    r = client.get(r.headers["location"])
    assert "your answers were saved" in r.text and "HIT 2 of at most 200" in r.text
    hidden2, _ = _form(r.text)
    form2 = {"assignment": hidden2["assignment"], **_answer_all(session, hidden2["assignment"])}
    r = client.post(f"{link}/submit", data=form2)
    assert r.template.name == "annotate/message.html" and r.context["kind"] == "no_work"
    # a repeat of the first submission is answered as a success, and stores nothing
    n = session.scalar(select(func.count()).select_from(Judgment))
    r = client.post(f"{link}/submit", data=form, follow_redirects=False)
    assert r.status_code == 303 and session.scalar(select(func.count()).select_from(Judgment)) == n


def test_an_incomplete_form_comes_back_with_the_answers_kept(client, session, link):
    hidden, _ = _form(client.get(link).text)
    answers = _answer_all(session, hidden["assignment"])
    answers.pop("o3")
    r = client.post(f"{link}/submit", data={"assignment": hidden["assignment"], **answers})
    assert r.status_code == 400 and "1 still open" in r.text
    assert r.text.count(" checked") == 10
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0
    # The HIT's texts are rendered once and reused: a refilled form must not be what is reused.
    again = client.get(link)
    assert _form(again.text)[0]["assignment"] == hidden["assignment"]
    assert " checked" not in again.text and again.text.count("<fieldset") == 11


def test_a_hits_texts_are_rendered_once_and_kept_by_the_web_layer(client, link):
    first = client.get(link)
    hit_id = first.context["work"].assignment.hit_id
    rendered = client.app.state.hit_html.get(hit_id)
    assert rendered is not None and rendered == first.context["fragment"]
    assert client.get(link).context["fragment"] is rendered  # reused, not rendered again
    # The domain's cache of the HIT holds its content only, never web-rendered HTML.
    content = client.app.state.sessionmaker.kw["info"][HIT_CACHE].get(hit_id)
    assert [f.name for f in fields(content)] == ["positions", "slots"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda f, link: (link, {**f, "assignment": "made-up"}),
        lambda f, link: (link, {**f, "o0": "9"}),
        lambda f, link: (link, {**f, "o0": "<script>"}),
        lambda f, link: (link, {**f, "o99": "0"}),
        lambda f, link: (link[:-3] + "abc", f),
    ],
)
def test_forged_or_tampered_input_is_refused_and_changes_nothing(client, session, link, tamper):
    hidden, _ = _form(client.get(link).text)
    form = {"assignment": hidden["assignment"], **_answer_all(session, hidden["assignment"])}
    url, data = tamper(form, link)
    r = client.post(f"{url}/submit", data=data, follow_redirects=False)
    assert 400 <= r.status_code < 500
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0
    assert session.scalar(select(Assignment.status)) is AssignmentStatus.leased


def test_a_form_with_too_many_fields_is_refused(client, session, link):
    hidden, _ = _form(client.get(link).text)
    fields = {"assignment": hidden["assignment"], **{f"x{i}": "1" for i in range(1000)}}
    r = client.post(f"{link}/submit", data=fields)
    assert r.status_code == 400 and "too many fields" in r.text
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0


def test_another_annotators_assignment_is_refused(client, session, settings, study, link):
    hidden, _ = _form(client.get(link).text)
    other = f"/a/{invite_token(settings.secret_key, annotator(session, study, 'b'))}"
    form = {"assignment": hidden["assignment"], **_answer_all(session, hidden["assignment"])}
    assert client.post(f"{other}/submit", data=form).status_code == 404
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0


def test_return_gives_the_hit_back(client, session, link):
    hidden, _ = _form(client.get(link).text)
    r = client.post(f"{link}/return", data={"assignment": hidden["assignment"]})
    assert "The HIT was returned" in r.text
    assert (
        session.scalar(
            select(Assignment.status).where(Assignment.public_id == hidden["assignment"])
        )
        is AssignmentStatus.returned
    )


def test_distinct_messages(client, session, settings, study):
    blocked = annotator(session, study, "x", blocked=True)
    capped = annotator(session, study, "y", hit_cap=0)
    texts = set()
    for who in (blocked, capped):
        r = client.get(f"/a/{invite_token(settings.secret_key, who)}")
        texts.add(r.context["kind"])
    fresh = annotator(session, study, "z")
    study.status = StudyStatus.closed
    session.flush()
    texts.add(client.get(f"/a/{invite_token(settings.secret_key, fresh)}").context["kind"])
    assert texts == {"blocked", "cap_reached", "closed"}


def test_panel_link_then_completion_code(client, session, settings, study):
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
    assert r.status_code == 303
    page = client.get(r.headers["location"])
    hidden, _ = _form(page.text)
    assert session.scalar(select(Assignment.external_session_id)) == "sess-9"
    data = {"assignment": hidden["assignment"], **_answer_all(session, hidden["assignment"])}
    r = client.post(r.headers["location"] + "/submit", data=data)
    assert "C0DE42" in r.text and "https://panel.example/done" in r.text
    assert client.get(f"/p/{study.slug}?key={key}&SID=s").status_code == 400  # no participant id


def _mturk(slug, assignment="A1", worker="W1", submit_to=MTURK_ORIGIN):
    return (
        f"/mturk/{slug}?assignmentId={assignment}&hitId=H1&workerId={worker}"
        f"&turkSubmitTo={submit_to}"
    )


@pytest.fixture
def mturk_study(session, study):
    study.channels = {**study.channels, "mturk": {"enabled": True}}  # channels are opt-in
    session.flush()
    return study


def test_mturk_preview_page_and_submit(client, session, mturk_study):
    study = mturk_study
    r = client.get(f"/mturk/{study.slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    assert r.status_code == 200 and "This is a preview" in r.text and "disabled" in r.text
    csp = r.headers["content-security-policy"]
    assert "frame-ancestors https://worker.mturk.com https://www.mturk.com" in csp
    assert "x-frame-options" not in r.headers
    assert session.scalar(select(func.count()).select_from(Assignment)) == 0
    r = client.get(_mturk(study.slug))
    hidden, _ = _form(r.text)
    assert (
        hidden["assignmentId"] == "A1"
        and f"form-action 'self' {MTURK_ORIGIN}" in r.headers["content-security-policy"]
    )
    assert client.get(_mturk(study.slug)).text.count(hidden["assignment"]) == 1  # reload: same
    data = {**hidden, **_answer_all(session, hidden["assignment"])}
    r = client.post(f"/mturk/{study.slug}/submit", data=data)
    assert r.status_code == 200
    assert f'action="{MTURK_ORIGIN}/mturk/externalSubmit"' in r.text
    assert 'name="assignmentId" value="A1"' in r.text
    assert session.scalar(select(func.count()).select_from(Judgment)) == 11  # stored first
    # reopening a submitted assignment offers the MTurk submit again, stores nothing
    assert "externalSubmit" in client.get(_mturk(study.slug)).text


def test_mturk_refuses_unknown_submit_targets_and_other_workers(client, session, mturk_study):
    study = mturk_study
    assert client.get(_mturk(study.slug, submit_to="https://evil.example")).status_code == 400
    hidden, _ = _form(client.get(_mturk(study.slug)).text)
    r = client.get(_mturk(study.slug, worker="W2"))  # W2 claims W1's MTurk assignment
    assert r.status_code == 403
    data = {**hidden, "workerId": "W2", **_answer_all(session, hidden["assignment"])}
    assert client.post(f"/mturk/{study.slug}/submit", data=data).status_code == 404
    data = {**hidden, "assignmentId": "A9", **_answer_all(session, hidden["assignment"])}
    assert client.post(f"/mturk/{study.slug}/submit", data=data).status_code == 400
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0


@pytest.mark.parametrize("change", ["block", "close"])
def test_an_incomplete_mturk_form_after_a_block_or_close_is_a_message(
    client, session, mturk_study, change
):
    study = mturk_study
    hidden, _ = _form(client.get(_mturk(study.slug)).text)
    if change == "block":
        held = select(Assignment).where(Assignment.public_id == hidden["assignment"])
        session.get(Annotator, session.scalar(held).annotator_id).blocked = True
    else:
        study.status = StudyStatus.closed
    session.flush()
    r = client.post(f"/mturk/{study.slug}/submit", data=hidden)  # no answers at all
    assert r.status_code == 400 and r.template.name == "annotate/message.html"
    assert "externalSubmit" not in r.text
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0


def test_an_incomplete_form_for_a_lapsed_lease_does_not_fill_in_the_next_hit(client, session, link):
    hidden, _ = _form(client.get(link).text)
    answers = _answer_all(session, hidden["assignment"])
    answers.pop("o3")
    held = session.scalar(select(Assignment).where(Assignment.public_id == hidden["assignment"]))
    held.expires_at = held.leased_at  # the lease lapsed: the next page is another HIT
    session.flush()
    r = client.post(f"{link}/submit", data={"assignment": hidden["assignment"], **answers})
    assert r.status_code == 400 and r.template.name == "nextword/hit.html"
    assert _form(r.text)[0]["assignment"] != hidden["assignment"]
    assert " checked" not in r.text  # the old HIT's answers are not the new HIT's
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0


KINDS = ("data", "model", "attention", "data_shuffled", "random", "corrupted")


def test_nothing_leaks_and_the_top1_screen_slot_is_uniform(client, session, settings):
    study = make_study(session, per_cell=200, lengths=(10,), per_annotator_cap=1)
    ids = {str(i) for i in session.scalars(select(Item.id))} | {
        str(i) for i in session.scalars(select(Hit.id))
    }
    slots = Counter()
    pages = []
    for i in range(40):
        who = annotator(session, study, f"p{i}")
        link = f"/a/{invite_token(settings.secret_key, who)}"
        r = client.get(link)
        hidden, words = _form(r.text)
        a = session.scalar(select(Assignment).where(Assignment.public_id == hidden["assignment"]))
        rows = session.execute(
            select(HitPosition.choice_order, Item.choices)
            .join(Item)
            .where(HitPosition.hit_id == a.hit_id)
            .order_by(HitPosition.position)
        ).all()
        for n, (order, choices) in enumerate(rows):
            shown = words[n * 6 : n * 6 + 5]
            assert shown == [choices[rank]["word"] for rank in order[:-1]]
            slots[order.index(0)] += 1
        data = {"assignment": hidden["assignment"], **_answer_all(session, hidden["assignment"])}
        done = client.post(f"{link}/submit", data=data)
        pages += [r.text, done.text]
    pages.append(client.get("/static/annotate.js").text)
    for text in pages:
        low = unescape(text).lower()
        visible = re.sub(r"<[^>]+>", " ", low)
        for kind in KINDS:
            assert not re.search(rf"\b{kind}\b", visible), kind
        # Radio values are screen slots (0-5) and data-n the display number:
        # every other attribute value must be free of item and HIT ids.
        values = re.findall(r'(?:\bid|name|href|action|src)="([^"]*)"', low)
        values += re.findall(r'type="hidden" name="\w+" value="([^"]*)"', low)
        assert not ids & set(values)
        # URLs carry the signed link token only (annotator id and nonce), never a HIT or item
        links = re.findall(r'(?:href|action)="([^"]*)"', text)
        assert all(
            re.fullmatch(r"#main|/a/[\w.-]+/(submit|return|comment)|https?://\S+\.css", u)
            for u in links
        ), links
        values += re.findall(r'data-[\w-]+="([^"]*)"', low)
        assert not any(re.search(rf"\b{k}\b", v) for v in values for k in KINDS)
        # (random link tokens and handles aside: they may spell anything)
        plain = re.sub(r'/a/[\w.-]+|value="[\w-]{20,}"', "", low)
        assert "prob" not in plain and "rank" not in plain
        # the factory's probabilities (tokens in attributes are random, so the text only)
        assert not re.search(r"\b0\.(4|3|15|1|05|97)\b(?!\.)", visible)
    # chi-square, 4 dof, p = 0.001 critical value 18.47
    n = sum(slots.values())
    chi2 = sum((slots[s] - n / 5) ** 2 / (n / 5) for s in range(5))
    assert chi2 < 18.47, slots


def test_untrusted_text_renders_inert(client, session, settings):
    evil = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "{{7*7}}", "</textarea>"]
    study = make_study(
        session, per_cell=5, lengths=(3,), attention=0, words=[*evil, "ok"], task="seq2seq"
    )
    for item in session.scalars(select(Item)):
        item.source = "<svg onload=alert(1)>"
    session.flush()
    r = client.get(f"/a/{invite_token(settings.secret_key, annotator(session, study))}")
    assert r.status_code == 200
    assert "<script>alert" not in r.text and "<img src=x" not in r.text and "<svg" not in r.text
    assert "&lt;script&gt;" in r.text and "{{7*7}}" in r.text  # not evaluated either
    assert "Sentence to translate" in r.text
    # only our own, external, scripts: the page's and every HIT page's (participant.js)
    scripts = re.findall(r"<script\b[^>]*>", r.text)
    assert len(scripts) == 2 and all('src="/static/' in t or "/static/" in t for t in scripts)
