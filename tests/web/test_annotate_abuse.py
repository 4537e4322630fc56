"""The annotator routes under abuse: who may enrol (channels, panel keys, rate limits), bad
input of every kind (a clear 4xx that changes nothing, never a 500), oversized bodies,
a second tab's answers, a HIT given back, and MTurk work left out until confirmed."""

import re
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.annotation.identities import invite_token
from app.crowd.platforms.prolific.entry import entry_key
from app.main import create_app
from app.models import Annotator, Assignment, HitPosition, Judgment
from app.results.schemas import ResultQuery
from app.results.service import study_results
from tests.hits.factory import annotator, make_study

MTURK_ORIGIN = "https://workersandbox.mturk.com"
PID = "5f0c6e3a9b1d2c4e6f8a0b1c"  # Prolific ids are 24 hex digits
PANEL_STUDY = "64a1b2c3d4e5f60718293a4b"


@pytest.fixture
def study(session):
    return make_study(session, per_cell=10, lengths=(10,), min_ms_per_item=0)


def _client(settings, connection, **overrides):
    app = create_app(settings.model_copy(update=overrides), bind=connection)
    return TestClient(app, base_url="http://testserver")


@pytest.fixture
def strict(settings, connection):
    """The app with small enrolment limits."""
    with _client(
        settings, connection, enrol_per_address_per_hour=3, enrol_per_study_per_minute=5
    ) as c:
        yield c


def _counts(session):
    return tuple(
        session.scalar(select(func.count()).select_from(t))
        for t in (Annotator, Assignment, Judgment)
    )


def _panel(session, study, **extra):
    study.channels = {
        **study.channels,
        "prolific": {"enabled": True, "study_id": PANEL_STUDY, "completion_code": "C0DE", **extra},
    }
    session.flush()


def _entry(settings, study, pid=PID, panel_study=PANEL_STUDY, session_id="sess1", key=None):
    key = entry_key(settings.secret_key, study.slug) if key is None else key
    return (
        f"/p/{study.slug}?key={key}&PROLIFIC_PID={pid}&STUDY_ID={panel_study}"
        f"&SESSION_ID={session_id}"
    )


def _mturk(slug, assignment="3ABCDEFGHIJKLMNOPQRSTUVWXYZ012", worker="A1B2C3D4E5F6G7"):
    return (
        f"/mturk/{slug}?assignmentId={assignment}&hitId=3HITID0000000000000000000000"
        f"&workerId={worker}&turkSubmitTo={MTURK_ORIGIN}"
    )


def _form(html):
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', html))


def _answers(session, public_id, rank=0):
    a = session.scalar(select(Assignment).where(Assignment.public_id == public_id))
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(HitPosition.hit_id == a.hit_id)
    ).all()
    return {f"o{p}": str(order.index(rank)) for p, order in rows}


# -- who may enrol -----------------------------------------------------------------------


def test_an_invite_only_study_refuses_panel_and_mturk_entries(client, session, settings, study):
    before = _counts(session)
    for url in (
        _entry(settings, study),
        _mturk(study.slug),
        f"/mturk/{study.slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1",
    ):
        r = client.get(url, follow_redirects=False)
        assert r.status_code == 404 and "There is no such study" in r.text, url
    form = {"assignment": "x" * 32, "assignmentId": "A" * 30, "workerId": "W" * 14, "o0": "0"}
    assert client.post(f"/mturk/{study.slug}/submit", data=form).status_code == 404
    assert _counts(session) == before


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        ({"key": ""}, 403, "did not come from the study"),
        ({"key": "AAAAAAAAAAAAAAAAAAAAAA"}, 403, "did not come from the study"),
        ({"panel_study": "0" * 24}, 403, "another study on the panel"),
        ({"panel_study": ""}, 403, "another study on the panel"),
        ({"pid": ""}, 400, "participant id"),
        ({"pid": "p" * 65}, 400, "participant id"),
        ({"session_id": "s" * 256}, 400, "session id"),
    ],
)
def test_a_panel_entry_must_prove_it_came_from_the_panel(
    client, session, settings, study, change, status, words
):
    _panel(session, study)
    before = _counts(session)
    r = client.get(_entry(settings, study, **change), follow_redirects=False)
    assert r.status_code == status and words in r.text
    assert r.template.name == "annotate/message.html"
    assert _counts(session) == before
    # The right entry still works afterwards (an over-long SESSION_ID used to lock the
    # participant out with a 500 on every load).
    r = client.get(_entry(settings, study), follow_redirects=False)
    assert r.status_code == 303
    page = client.get(r.headers["location"])
    assert page.status_code == 200 and page.template.name == "nextword/hit.html"


def test_the_panel_key_belongs_to_one_study(client, session, settings, study):
    other = make_study(session, slug="s2", per_cell=5, lengths=(10,))
    _panel(session, study)
    _panel(session, other)
    wrong = entry_key(settings.secret_key, other.slug)
    assert client.get(_entry(settings, study, key=wrong)).status_code == 403
    r = client.get(_entry(settings, other), follow_redirects=False)
    assert r.status_code == 303


def test_new_identities_are_rate_limited_per_address_and_per_study(
    strict, session, settings, study
):
    _panel(session, study)
    pids = [f"{i:024x}" for i in range(6)]
    for pid in pids[:3]:
        assert (
            strict.get(_entry(settings, study, pid=pid), follow_redirects=False).status_code == 303
        )
    before = _counts(session)
    r = strict.get(_entry(settings, study, pid=pids[3]), follow_redirects=False)
    assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 3600
    assert "from your network" in r.text and _counts(session) == before
    # Someone already enrolled comes back freely.
    assert (
        strict.get(_entry(settings, study, pid=pids[0]), follow_redirects=False).status_code == 303
    )
    # The address is kept only as a keyed hash.
    stored = session.scalars(select(Annotator.enrolled_from).where(Annotator.channel == "prolific"))
    assert {len(h) for h in stored} == {64} and "testclient" not in str(stored)
    # The per-study ceiling counts every address: make it the one that binds.
    session.execute(
        Annotator.__table__.update()
        .where(Annotator.channel == "prolific")
        .values(enrolled_from="elsewhere")
    )
    session.flush()
    assert (
        strict.get(_entry(settings, study, pid=pids[3]), follow_redirects=False).status_code == 303
    )
    assert (
        strict.get(_entry(settings, study, pid=pids[4]), follow_redirects=False).status_code == 303
    )
    r = strict.get(_entry(settings, study, pid=pids[5]), follow_redirects=False)
    assert r.status_code == 429 and r.headers["retry-after"] == "60"
    assert "try again in a minute" in r.text


def test_each_channel_has_its_own_bucket_per_address(strict, session, settings, study):
    """Panel participants and MTurk workers from one address (a lab's network) are limited
    on each channel separately."""
    _panel(session, study)
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    for i in range(3):
        r = strict.get(_entry(settings, study, pid=f"{i:024x}"), follow_redirects=False)
        assert r.status_code == 303
    full = strict.get(_entry(settings, study, pid=f"{9:024x}"), follow_redirects=False)
    assert full.status_code == 429 and "from your network" in full.text
    for n in range(2):  # the same address, another channel: a bucket of its own
        worker, assignment = f"A1B2C3D4E5F6G{n}", f"3ABCDEFGHIJKLMNOPQRSTUVWXY{n:04d}"
        r = strict.get(_mturk(study.slug, assignment=assignment, worker=worker))
        assert r.status_code == 200, r.text[:300]
    mturk = select(func.count()).where(Annotator.channel == "mturk", Annotator.study_id == study.id)
    assert session.scalar(mturk) == 2
    # Five new identities this minute: the study-wide ceiling counts every channel.
    r = strict.get(_mturk(study.slug, assignment="3" + "Z" * 29, worker="A9Z9Z9Z9Z9Z9Z9"))
    assert r.status_code == 429 and "try again in a minute" in r.text


def test_mturk_work_is_stored_but_left_out_until_confirmed(client, session, study):
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    hidden = _form(client.get(_mturk(study.slug)).text)
    data = {**hidden, **_answers(session, hidden["assignment"])}
    r = client.post(f"/mturk/{study.slug}/submit", data=data)
    assert r.status_code == 200 and "externalSubmit" in r.text
    assert session.scalar(select(Assignment.unverified)) is True
    assert session.scalar(select(func.count()).select_from(Judgment)) == 11
    res = study_results(session, study, ResultQuery(b=100))
    assert res.results is None and res.other is None  # nothing counts yet
    assert res.exclusions.excluded_by_rule["unverified"] == 11
    assert any("not yet confirmed through the MTurk API" in m for m in res.messages)


def test_a_javascript_redirect_is_never_emitted(client, session, settings, study):
    # Stored unchecked (as before the study file refused it): the page still drops it.
    _panel(session, study, redirect_url="javascript:alert(document.domain)")
    r = client.get(_entry(settings, study))
    hidden = _form(r.text)
    data = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
    done = client.post(str(r.url.path) + "/submit", data=data)
    assert "C0DE" in done.text and "javascript:" not in done.text.lower()


# -- bad input ---------------------------------------------------------------------------

NASTY = ["\x00", "a\x00b", "\x1b[31m", "x" * 300, "é", "\u202e", "../../etc", "<script>"]


@pytest.mark.parametrize("value", NASTY)
def test_bad_ids_in_crowd_urls_are_refused(client, session, settings, study, value):
    _panel(session, study)
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    before = _counts(session)
    value = quote(value, safe="")  # sent percent-encoded, as a browser does
    urls = [
        _entry(settings, study, pid=value),
        _entry(settings, study, session_id=value),
        _entry(settings, study, panel_study=value),
        _entry(settings, study, key=value),
        _mturk(study.slug, worker=value),
        _mturk(study.slug, assignment=value),
        _mturk(study.slug).replace("3HITID0000000000000000000000", value),
        _mturk(study.slug).replace(MTURK_ORIGIN, f"http://[{value}"),
        f"/p/{value}?key=x",
        f"/mturk/{value}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE",
        f"/a/{value}",
    ]
    for url in urls:
        r = client.get(url, params=None, follow_redirects=False)
        assert 400 <= r.status_code < 500, (url, r.status_code)
    assert _counts(session) == before


@pytest.mark.parametrize(
    "tamper",
    [
        {"o0": "²"},
        {"o0": "١"},  # noqa: RUF001 (an Arabic-Indic digit: int() takes it)
        {"o0": "10**18"},
        {"o0": str(10**18)},
        {"o0": "inf"},
        {"o0": "nan"},
        {"o0": "1_0"},
        {"o0": " 1"},
        {"o0": "-1"},
        {"o0": "\x00"},
        {"ms0": "inf"},
        {"ms0": "nan"},
        {"ms0": "²"},
        {"ms0": "1e9"},
        {"ms0": "9" * 40},
        {"assignment": "\x00"},
        {"assignment": "a\x00b"},
        {"assignment": "x" * 300},
        {"assignment": "é" * 10},
        {"o²": "0"},  # a field name that only looks like a position: ignored, form incomplete
    ],
)
def test_bad_form_fields_are_a_4xx_that_stores_nothing(client, session, settings, study, tamper):
    link = f"/a/{invite_token(settings.secret_key, annotator(session, study))}"
    hidden = _form(client.get(link).text)
    form = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
    if "o²" in tamper:
        form.pop("o0")
    r = client.post(f"{link}/submit", data={**form, **tamper}, follow_redirects=False)
    assert 400 <= r.status_code < 500
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0
    assert session.scalar(select(Assignment.status)).value == "leased"


def test_bodies_over_the_limit_are_refused_and_made_up_links_first(
    client, session, settings, study
):
    link = f"/a/{invite_token(settings.secret_key, annotator(session, study))}"
    hidden = _form(client.get(link).text)
    form = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
    big = {**form, "pad": "x" * 70_000}
    r = client.post(f"{link}/submit", data=big)  # with its Content-Length
    assert r.status_code == 413 and "too large" in r.text

    def chunks():  # no Content-Length: counted while it streams in
        body = "&".join(f"{k}={v}" for k, v in form.items()).encode() + b"&pad="
        yield body
        for _ in range(100):
            yield b"x" * 1000

    r = client.post(
        f"{link}/submit",
        content=chunks(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 413
    # A made-up link is refused before its body is read.
    r = client.post("/a/made-up.token-signature-xxxxxxxxxxxx/submit", data=big)
    assert r.status_code == 404
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0
    # A page's own post, even as multipart, is well under the limit.
    r = client.post(f"{link}/submit", files={k: (None, v) for k, v in form.items()})
    assert r.status_code == 200 and "your answers were saved" in r.text
    assert session.scalar(select(func.count()).select_from(Judgment)) == 11


# -- a second tab, a HIT given back --------------------------------------------------------


def test_a_second_tabs_different_answers_say_the_first_were_kept(client, session, settings, study):
    link = f"/a/{invite_token(settings.secret_key, annotator(session, study))}"
    hidden = _form(client.get(link).text)
    first = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"], 0)}
    second = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"], 3)}
    assert client.post(f"{link}/submit", data=first, follow_redirects=False).status_code == 303
    r = client.post(f"{link}/submit", data=second, follow_redirects=False)
    assert r.status_code == 200 and r.template.name == "annotate/kept.html"
    assert "answers sent first were kept" in r.text and "were not saved" in r.text
    assert "your answers were saved" not in r.text.lower()
    # The stored result is shown: the first answers, checked (and nothing to change).
    checked = dict(re.findall(r'name="o(\d+)" value="(\d+)" required checked disabled', r.text))
    assert checked == {k[1:]: v for k, v in first.items() if k.startswith("o")}
    assert session.scalars(select(Judgment.chosen_rank)).all() == [0] * 11
    # The same answers again (a double click) are simply acknowledged.
    r = client.post(f"{link}/submit", data=first, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("?n=ok")


def test_a_hit_given_back_is_refused_with_a_clear_page(client, session, settings, study):
    link = f"/a/{invite_token(settings.secret_key, annotator(session, study))}"
    hidden = _form(client.get(link).text)
    form = {"assignment": hidden["assignment"], **_answers(session, hidden["assignment"])}
    client.post(f"{link}/return", data={"assignment": hidden["assignment"]})
    r = client.post(f"{link}/submit", data=form)
    assert r.status_code == 409 and "gave this HIT back" in r.text and "Nothing was saved" in r.text
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0


def test_a_link_signed_with_an_over_long_session_id_still_opens(client, session, settings, study):
    # Such links were issued before panel ids were checked; each load then failed (a 500).
    from itsdangerous import URLSafeSerializer

    from app.annotation.identities import INVITE_SALT

    a = annotator(session, study)
    serializer = URLSafeSerializer(settings.secret_key, salt=INVITE_SALT)
    for payload in ([a.id, a.invite_nonce, "s" * 300], [a.invite_nonce, "s\x00" * 10]):
        r = client.get(f"/a/{serializer.dumps(payload)}")
        assert r.status_code == 200 and r.template.name == "nextword/hit.html"
    assert session.scalar(select(Assignment.external_session_id)) is None
