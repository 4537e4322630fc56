"""The Crowd page opens on the channel the study enables, Prolific first where both are;
it lists which channels are off and why, MTurk's closure, and who may take part (the
prescreeners and the earlier studies excluded) before anything is published (issue 33)."""

from __future__ import annotations

from html import unescape

from app.models import Annotator, Channel
from tests.hits.factory import make_study

PROLIFIC = {"enabled": True, "completion_code": "C0DE"}
MTURK = {"enabled": True, "sandbox": True}


def _study(session, slug, **channels):
    study = make_study(session, slug=slug, lengths=(10,), per_cell=10)
    study.channels = {**study.channels, **channels}
    session.commit()
    return study


def _page(client, slug, query=""):
    r = client.get(f"/dashboard/studies/{slug}/crowd{query}")
    assert r.status_code == 200
    return r


def test_it_opens_on_prolific_where_both_are_enabled(logged_in, session):
    _study(session, "both", prolific=PROLIFIC, mturk=MTURK)
    r = _page(logged_in, "both")
    assert r.context["target"].provider == "prolific"
    labels = [t.label for t in r.context["tabs"]]
    assert labels[0] == "Prolific" and labels[-1].startswith("Local")
    # asked for by name, a tab still opens
    assert _page(logged_in, "both", "?provider=mturk").context["target"].provider == "mturk"


def test_it_opens_on_the_only_channel_enabled_or_the_invite_links(logged_in, session):
    _study(session, "turk", mturk=MTURK)
    _study(session, "lab")
    r = _page(logged_in, "turk")
    assert (r.context["target"].provider, r.context["target"].environment) == ("mturk", "sandbox")
    text = unescape(r.text)
    assert "no new requesters since 30 July 2026" in text and "30 September 2026" in text
    assert _page(logged_in, "lab").context["target"].provider == "local"


def test_channels_off_and_why(logged_in, session):
    _study(session, "half", prolific=PROLIFIC)
    r = _page(logged_in, "half")
    states = {f"{c.tab.provider}-{c.tab.environment}": c.off for c in r.context["channels"]}
    # enabled, but this server has no Prolific token
    assert "EBC_PROLIFIC_API_TOKEN" in states["prolific-production"]
    assert "[channels.mturk] enabled = true" in states["mturk-sandbox"]
    assert states["local-local"] is None
    assert 'data-channel="mturk-sandbox"' in r.text and "(off)" in r.text


def test_who_may_take_part_is_shown_before_publishing(logged_in, session):
    old = _study(session, "pilot", mturk=MTURK)
    session.add(Annotator(study_id=old.id, channel=Channel.mturk, external_id="W1"))
    prescreeners = {"first_languages": ["19"], "countries": ["1"], "min_approval_rate": 95}
    study = _study(
        session, "main", prolific={**PROLIFIC, "prescreeners": prescreeners}, mturk=MTURK
    )
    study.participants = {"exclude_studies": ["pilot", "ghost"]}
    session.commit()
    r = _page(logged_in, "main")
    text = unescape(r.text)
    assert 'id="prescreeners"' in r.text and "first_languages" in text and "95" in text
    assert "pilot" in text and "previous-studies blocklist" in text
    assert "No study is called ghost" in text
    turk = unescape(_page(logged_in, "main", "?provider=mturk").text)
    assert "qualification also keeps them" in turk and "1 earlier worker " in turk
    assert 'id="prescreeners"' not in turk
