"""The participant's side of every channel (issue 33), through HTTP: the consent page
before the first HIT, the comment boxes, page signals, exclusion of earlier studies' people,
and what the Annotators page and the exports show of them."""

import csv
import io
import re
from html import unescape

import pytest
from sqlalchemy import func, select

from app.annotation.errors import AnnotationError
from app.annotation.identities import create_local_annotators, invite_token
from app.crowd.platforms.prolific.entry import entry_key
from app.models import Annotator, Assignment, AssignmentStatus, Channel, HitPosition, Judgment
from app.results.participants import annotators_csv
from app.studytypes.nextword.exports import judgments_csv
from app.studytypes.ratings.exports import ratings_csv
from tests.hits.factory import annotator, make_study
from tests.hits.ratings_factory import make_ratings_study

MTURK_ORIGIN = "https://workersandbox.mturk.com"
CONSENT = 'We study <b>words</b> & "texts".\n\nYou may stop at any time.'
FORMULA = '=HYPERLINK("http://evil","x")'


def _hidden(html):
    return dict(re.findall(r'<input type="hidden" name="([\w.]+)" value="([^"]*)"', html))


def _answers(session, public_id, rank=0):
    a = session.scalar(select(Assignment).where(Assignment.public_id == public_id))
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(HitPosition.hit_id == a.hit_id)
    ).all()
    return {f"o{p}": str(order.index(rank)) for p, order in rows}


def _count(session, model):
    return session.scalar(select(func.count()).select_from(model))


@pytest.fixture
def study(session):
    s = make_study(session, per_cell=10, lengths=(10,), min_ms_per_item=0)
    s.participants = {"consent": CONSENT, "comments": True}
    s.channels = {
        **s.channels,
        "mturk": {"enabled": True, "sandbox": True},
        "prolific": {"enabled": True, "completion_code": "C0DE"},
    }
    session.flush()
    return s


@pytest.fixture
def link(session, settings, study):
    return f"/a/{invite_token(settings.secret_key, annotator(session, study))}"


def test_no_consent_no_hit_then_consent_once(client, session, link):
    r = client.get(link, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"{link}/consent"
    assert _count(session, Assignment) == 0  # nothing claimed before consent
    r = client.get(f"{link}/consent")
    assert r.status_code == 200 and r.template.name == "annotate/consent.html"
    assert "&lt;b&gt;words&lt;/b&gt;" in r.text and "<b>words" not in r.text  # escaped
    assert "frame-ancestors *" in r.headers["content-security-policy"]
    # a post of answers without consent: a clear 403 that stores nothing
    r = client.post(f"{link}/submit", data={"assignment": "x", "o0": "1"})
    assert r.status_code == 403 and "consent" in r.text
    assert _count(session, Judgment) == 0 and _count(session, Assignment) == 0
    # the box unticked: refused, nothing stored
    r = client.post(f"{link}/consent", data={})
    assert r.status_code == 400 and "Tick the box" in r.text
    person = session.scalar(select(Annotator))
    session.refresh(person)
    assert person.consented_at is None
    r = client.post(f"{link}/consent", data={"agree": "yes"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"{link}?n=consent"
    session.refresh(person)
    first = person.consented_at
    assert first is not None
    r = client.get(r.headers["location"])
    assert r.template.name == "nextword/hit.html" and "you agreed to take part" in r.text
    # accepted once: a second post keeps the first time, and the HIT page opens directly
    client.post(f"{link}/consent", data={"agree": "yes"})
    session.refresh(person)
    assert person.consented_at == first
    assert client.get(link, follow_redirects=False).status_code == 200


def test_a_study_without_consent_text_has_no_consent_page(client, session, settings):
    plain = make_study(session, slug="plain", per_cell=10, lengths=(10,))
    url = f"/a/{invite_token(settings.secret_key, annotator(session, plain))}"
    assert client.get(url).template.name == "nextword/hit.html"
    assert client.get(f"{url}/consent").status_code == 404
    assert client.post(f"{url}/consent", data={"agree": "yes"}).status_code == 404


def test_mturk_redirects_to_consent_with_its_ids_then_back(client, session, study):
    query = f"assignmentId=A1&hitId=H1&workerId=W1&turkSubmitTo={MTURK_ORIGIN}"
    r = client.get(f"/mturk/{study.slug}?{query}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith(
        f"/mturk/{study.slug}/consent?"
    )
    page = client.get(r.headers["location"])
    assert (
        page.status_code == 200
        and "workersandbox.mturk.com" in page.headers["content-security-policy"]
    )
    fields = _hidden(page.text)
    assert fields["workerId"] == "W1" and fields["assignmentId"] == "A1"
    assert _count(session, Assignment) == 0
    r = client.post(
        f"/mturk/{study.slug}/consent", data={**fields, "agree": "yes"}, follow_redirects=False
    )
    assert r.status_code == 303
    r = client.get(r.headers["location"])
    assert r.template.name == "nextword/hit.html" and _hidden(r.text)["workerId"] == "W1"
    # the end-of-study comment: a known worker's is kept, a made-up worker id makes nothing
    made = _count(session, Annotator)
    r = client.post(f"/mturk/{study.slug}/comment", data={**fields, "comment": "from MTurk"})
    assert r.status_code == 200 and "Thank you for your comment" in r.text
    stranger = {**fields, "workerId": "NOBODY", "comment": "spam"}
    assert client.post(f"/mturk/{study.slug}/comment", data=stranger).status_code == 404
    assert _count(session, Annotator) == made
    worker = session.scalar(select(Annotator).where(Annotator.external_id == "W1"))
    session.refresh(worker)
    assert worker.comment == "from MTurk"
    # the preview (no assignment yet) is shown without asking
    preview = client.get(f"/mturk/{study.slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE")
    assert preview.status_code == 200


def test_prolific_entry_leads_to_consent(client, session, settings, study):
    key = entry_key(settings.secret_key, study.slug)
    r = client.get(
        f"/p/{study.slug}?PROLIFIC_PID=P1&STUDY_ID=S1&SESSION_ID=X1&key={key}",
        follow_redirects=False,
    )
    token_url = r.headers["location"]
    r = client.get(token_url, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/consent")


def _consented(client, link):
    client.post(f"{link}/consent", data={"agree": "yes"})


def test_hit_comment_and_page_signals_are_stored_and_exported(client, session, link, study):
    _consented(client, link)
    r = client.get(link)
    assert 'id="hit-comment"' in r.text and 'name="sig0"' in r.text
    hidden = _hidden(r.text)
    form = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
    # a bad page field or an over-long comment: 400, nothing stored
    bad = client.post(f"{link}/submit", data={**form, "sig0": "lots"})
    assert bad.status_code == 400 and _count(session, Judgment) == 0
    long = client.post(f"{link}/submit", data={**form, "comment": "x" * 2001})
    assert long.status_code == 400 and "2000" in long.text and _count(session, Judgment) == 0
    sent = {**form, "comment": FORMULA, "sig0": "2,5300", "sig3": "0,0", "sig4": ""}
    r = client.post(f"{link}/submit", data=sent, follow_redirects=False)
    assert r.status_code == 303
    a = session.scalar(select(Assignment).where(Assignment.public_id == hidden["assignment"]))
    session.refresh(a)
    assert a.comment == FORMULA and a.page_signals == {"0": [2, 5300], "3": [0, 0]}
    # a repeat of the post (another comment, other signals) stores nothing, as its answers
    again = {**form, "comment": "changed", "sig0": "9,9000"}
    assert client.post(f"{link}/submit", data=again, follow_redirects=False).status_code == 303
    session.refresh(a)
    assert a.comment == FORMULA and a.page_signals == {"0": [2, 5300], "3": [0, 0]}
    # the judgments export: the comment neutralised, each item's signals (empty: none)
    rows = list(csv.DictReader(io.StringIO("".join(judgments_csv(session, study)))))
    by_position = {int(r["position"]): r for r in rows}
    assert by_position[0]["hit_comment"] == "'" + FORMULA
    assert (by_position[0]["page_away"], by_position[0]["page_away_ms"]) == ("2", "5300")
    assert (by_position[3]["page_away"], by_position[3]["page_away_ms"]) == ("0", "0")
    assert by_position[4]["page_away"] == "" and by_position[4]["page_away_ms"] == ""


def test_end_of_study_comment(client, session, settings, link, study):
    _consented(client, link)
    for _ in range(2):  # the study has two HITs: then no work is left
        r = client.get(link)
        if r.template.name != "nextword/hit.html":
            break
        hidden = _hidden(r.text)
        form = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
        client.post(f"{link}/submit", data=form)
    r = client.get(link)
    assert r.context["kind"] == "no_work" and 'id="study-comment"' in r.text
    assert client.post(f"{link}/comment", data={"comment": "  "}).status_code == 400
    r = client.post(
        f"{link}/comment", data={"comment": "<script>x</script> thanks"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == f"{link}?n=comment"
    person = session.scalar(select(Annotator))
    session.refresh(person)
    assert person.comment == "<script>x</script> thanks" and person.commented_at is not None
    rows = list(csv.DictReader(io.StringIO("".join(annotators_csv(session, study)))))
    assert rows[0]["study_comment"] == "<script>x</script> thanks"
    assert rows[0]["consented_at"] and rows[0]["hits_submitted"] == "2"


def test_no_comment_boxes_when_the_study_offers_none(client, session, settings):
    quiet = make_study(session, slug="quiet", per_cell=10, lengths=(10,))
    quiet.participants = {"comments": False}
    session.flush()
    url = f"/a/{invite_token(settings.secret_key, annotator(session, quiet))}"
    r = client.get(url)
    assert 'id="hit-comment"' not in r.text
    assert client.post(f"{url}/comment", data={"comment": "hi"}).status_code == 404


def test_ratings_study_consent_and_comment_at_the_last_step(client, session, settings):
    study = make_ratings_study(session, per_cell=10, min_seconds_per_item=0)
    study.participants = {"consent": "Rate texts.", "comments": True}
    session.flush()
    link = f"/a/{invite_token(settings.secret_key, annotator(session, study))}"
    assert client.get(link, follow_redirects=False).status_code == 303
    r = client.post(f"{link}/submit", data={"assignment": "x", "rating": "3"})
    assert r.status_code == 403
    _consented(client, link)
    r = client.get(link)
    public_id, steps = None, 0
    while r.template.name == "ratings/rate.html":
        fields = _hidden(r.text)
        public_id = public_id or fields["assignment"]
        if fields["assignment"] != public_id:
            break
        has_box = 'id="hit-comment"' in r.text
        value = "3"
        data = {**fields, "rating": value, f"sig{fields['position']}.{fields['step']}": "1,700"}
        if has_box:
            data["comment"] = "the last text was cut"
        steps += 1
        nxt = client.post(f"{link}/submit", data=data, follow_redirects=False)
        assert nxt.status_code == 303, nxt.text
        r = client.get(nxt.headers["location"])
    a = session.scalar(select(Assignment).where(Assignment.public_id == public_id))
    session.refresh(a)
    assert a.status is AssignmentStatus.submitted and a.comment == "the last text was cut"
    assert len(a.page_signals) == steps and all(v == [1, 700] for v in a.page_signals.values())
    rows = list(csv.DictReader(io.StringIO("".join(ratings_csv(session, study)))))
    assert rows and all(r["page_away"] == "2" and r["page_away_ms"] == "1400" for r in rows)


# -- exclusion of people who took part in earlier studies ---------------------------------


@pytest.fixture
def earlier(session):
    """An earlier study with an MTurk worker, a Prolific participant and a named lab member."""
    old = make_study(session, slug="pilot", per_cell=10, lengths=(10,))
    for channel, external in ((Channel.mturk, "W-OLD"), (Channel.prolific, "P-OLD")):
        session.add(Annotator(study_id=old.id, channel=channel, external_id=external))
    session.add(
        Annotator(study_id=old.id, channel=Channel.local, external_id="local-1", label="Ada")
    )
    session.flush()
    return old


def test_people_of_excluded_studies_are_refused(client, session, settings, study, earlier):
    study.participants = {**study.participants, "exclude_studies": ["pilot"]}
    session.flush()
    before = _count(session, Annotator)
    old = f"assignmentId=A9&hitId=H1&workerId=W-OLD&turkSubmitTo={MTURK_ORIGIN}"
    r = client.get(f"/mturk/{study.slug}?{old}")
    assert r.status_code == 403 and "earlier" in unescape(r.text)
    key = entry_key(settings.secret_key, study.slug)
    r = client.get(f"/p/{study.slug}?PROLIFIC_PID=P-OLD&STUDY_ID=S&SESSION_ID=X&key={key}")
    assert r.status_code == 403
    assert _count(session, Annotator) == before  # no identity made for them
    new = f"assignmentId=A8&hitId=H1&workerId=W-NEW&turkSubmitTo={MTURK_ORIGIN}"
    assert client.get(f"/mturk/{study.slug}?{new}", follow_redirects=False).status_code == 303


def test_an_invite_named_as_an_earlier_lab_member_is_refused(session, study, earlier):
    study.participants = {**study.participants, "exclude_studies": ["pilot"]}
    session.flush()
    with pytest.raises(AnnotationError) as refused:
        create_local_annotators(session, study, 1, "Ada")
    assert refused.value.status_code == 409
    assert create_local_annotators(session, study, 1, "Grace")[0].label == "Grace"


def test_the_annotators_page_shows_consent_comments_and_signals(logged_in, session, link, study):
    client = logged_in
    _consented(client, link)
    hidden = _hidden(client.get(link).text)
    form = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
    client.post(f"{link}/submit", data={**form, "comment": "<i>odd</i>", "sig1": "3,12000"})
    r = client.get(f"/dashboard/studies/{study.slug}/annotators")
    assert r.status_code == 200
    assert "consented " in r.text and "&lt;i&gt;odd&lt;/i&gt;" in r.text
    assert "page left 3\u00d7 on 1 of 1 items (12 s away)" in r.text
    csv_text = client.get(f"/dashboard/studies/{study.slug}/results/annotators.csv").text
    row = next(csv.DictReader(io.StringIO(csv_text)))
    assert row["page_away"] == "3" and row["page_away_s"] == "12" and "odd" in row["hit_comments"]
