"""The study page's "Simulate before you pay" panel and its page (app.web.dashboard_simulate)."""

from __future__ import annotations

import dataclasses
import html
import re
from contextlib import ExitStack
from urllib.parse import urlencode

import pytest
from sqlalchemy import select

from app.crowd.platforms.local.provider import NO_FEE
from app.models import Base, StudyMember
from app.simulate.costs import channel_costs
from app.simulate.preview import PAGE_LIMITS
from app.studytypes.nextword.preview import PreviewOptions, simulate_before_paying
from app.web import dashboard_simulate
from app.web.dashboard_simulate import BUSY, MAX_RUNNING, RUNNING
from tests.hits.factory import make_study
from tests.web.accounts import login, make_user


def _study(session):
    study = make_study(session, slug="sim1", lengths=(10, 20), per_cell=10, overlap_share=0.1)
    study.items_per_cell = 300
    study.per_annotator_cap = 15
    study.reward_cents = 40
    study.channels = {"mturk": {"enabled": True, "masters": True}}
    session.commit()
    return study


def _snapshot(session) -> dict[str, list]:
    session.expire_all()
    conn = session.connection()
    return {
        t.name: conn.execute(select(t).order_by(*t.primary_key.columns)).all()
        for t in Base.metadata.sorted_tables
    }


def test_the_study_page_shows_the_panel(logged_in, session):
    _study(session)
    r = logged_in.get("/dashboard/studies/sim1")
    assert r.status_code == 200 and r.template.name == "study.html"
    assert r.context["sim"] is None and r.context["sim_values"]["replications"] == "20"
    assert r.context["sim_limits"] is PAGE_LIMITS
    assert "Simulate before you pay" in r.text
    assert 'action="/dashboard/studies/sim1/simulate"' in r.text and 'method="get"' in r.text
    assert "at most 50 here" in r.text


def test_the_simulation_renders_its_figures_and_costs(logged_in, session, settings):
    study = _study(session)
    query = {"crowd": "sampler,noisy:0.1", "target_ebc": "1.05", "replications": "4", "seed": "2"}
    before = _snapshot(session)
    r = logged_in.get(f"/dashboard/studies/sim1/simulate?{urlencode(query)}")
    assert r.status_code == 200, r.text[:500]
    assert r.template.name == "simulate.html" and r.context["sim_errors"] == {}
    sim = r.context["sim"]
    # The service's answer for the same options and the page's limits, seeded.
    options = PreviewOptions(crowd="sampler,noisy:0.1", target_ebc=1.05, replications=4, seed=2)
    again = simulate_before_paying(
        study, settings, options, limits=PAGE_LIMITS, price=channel_costs
    )
    assert sim.rows == again.rows and sim.costs == again.costs and sim.options.b == 2_000
    page = html.unescape(r.text)
    assert "Simulation" in page and "not data" in page and "crowd sampler,noisy:0.1" in page
    for row in sim.rows:
        assert f"{row.estimate:.4f} ± {row.se:.4f}" in page  # x ± y
        assert f"{row.coverage:.3f} ± {row.coverage_mc:.3f}" in page  # p
        assert f"{row.rejection:.3f} ± {row.rejection_mc:.3f}" in page  # q
    assert "Power q" in page and "Coverage p over R" in page
    # 2 lengths x (54 HITs x 1 + 6 x 3) = 144 assignments at 40 cents; Masters: 25% = 10 c.
    costs = {c.provider: c for c in sim.costs}
    assert costs["mturk"].estimate.total_cents == 144 * 50
    assert "$72.00" in page and "$57.60" in page  # MTurk's total, the rewards
    assert "$82.25" in page  # Prolific: $57.60 + 42.8% ($24.65)
    assert "channel off for this study" in page and NO_FEE in page
    assert "Masters workers: MTurk adds 5%" in page
    assert f"{sim.size.judgments:,}" in page
    for line in sim.assumptions:
        assert line in page
    assert _snapshot(session) == before  # running it changed nothing


def test_a_viewer_may_run_it_and_a_stranger_finds_nothing(client, session):
    study = _study(session)
    viewer = make_user(session, "vera", is_admin=False)
    make_user(session, "sam", is_admin=False)
    session.add(StudyMember(study_id=study.id, user_id=viewer.id, role="view"))
    session.commit()
    assert login(client, "vera").status_code == 303
    assert client.get("/dashboard/studies/sim1/simulate?replications=2").status_code == 200
    client.cookies.clear()
    assert login(client, "sam").status_code == 303
    assert client.get("/dashboard/studies/sim1/simulate?replications=2").status_code == 404


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"replications": "0"}, "replications", "greater than or equal to 1"),
        ({"replications": "51"}, "replications", "at most 50 here"),
        ({"replications": "1000000000"}, "replications", "at most 50 here"),
        ({"replications": "twenty"}, "replications", "valid integer"),
        ({"target_ebc": "0"}, "target_ebc", "greater than 0"),
        ({"target_ebc": "-2"}, "target_ebc", "greater than 0"),
        ({"target_ebc": "1,05"}, "target_ebc", "valid number"),
        ({"true_ebc": "1.6"}, "true_ebc", "a CGD is a share"),
        ({"crowd": "lazy"}, "crowd", "unknown crowd behaviour"),
        ({"crowd": "<script>alert(1)</script>"}, "crowd", "unknown crowd behaviour"),
    ],
)
def test_bad_input_re_renders_the_form_with_a_400(logged_in, session, query, field, message):
    _study(session)
    before = _snapshot(session)
    r = logged_in.get(f"/dashboard/studies/sim1/simulate?{urlencode(query)}")
    assert r.status_code == 400 and r.template.name == "simulate.html"
    assert r.context["sim"] is None and message in r.context["sim_errors"][field]
    assert r.context["sim_errors"][field] in html.unescape(r.text)
    assert "<script>alert(1)</script>" not in r.text  # shown escaped, never as markup
    assert 'aria-invalid="true"' in r.text
    assert _snapshot(session) == before


LM_KINDS = [
    "data",
    "model",
    "data_shuffled",
    "random",
    "data_corrupted@0.1",
    "data_corrupted@0.3",
    "model_corrupted@0.1",
    "model_corrupted@0.3",
]


def test_a_design_too_big_for_the_page_is_refused_with_a_400(logged_in, session):
    """100 lengths x 8 kinds with a cap of 1: few judgments but 800 cells, 701 ratios
    bootstrapped over 200 annotators (~14 s a replication): refused before any work."""
    study = _study(session)
    study.prefix_lengths = list(range(5, 105))
    study.kinds = LM_KINDS
    study.hit_layout = {"mix": dict.fromkeys(LM_KINDS, 1), "attention": 1}
    study.items_per_cell = 2
    study.per_annotator_cap = 1
    session.commit()
    before = _snapshot(session)
    r = logged_in.get("/dashboard/studies/sim1/simulate?replications=1")
    assert r.status_code == 400 and r.template.name == "simulate.html"
    message = r.context["sim_errors"]["replications"]
    assert "1,800 judgments in 800 cells by about 200 annotators" in message
    assert "too much to simulate here" in message and message in html.unescape(r.text)
    assert r.context["sim"] is None and _snapshot(session) == before


def test_past_the_page_s_time_budget_it_says_what_was_done(logged_in, session, monkeypatch):
    """The page's wall-clock budget, set to nothing: one replication of the four asked,
    said on the page."""
    _study(session)
    cut = dataclasses.replace(dashboard_simulate.PAGE_LIMITS, seconds=0.0)
    monkeypatch.setattr(dashboard_simulate, "PAGE_LIMITS", cut)
    r = logged_in.get("/dashboard/studies/sim1/simulate?replications=4&seed=1")
    assert r.status_code == 200 and r.context["sim"].summary.replications == 1
    page = html.unescape(r.text)
    assert "Stopped after 1 of the 4 replications asked" in page
    assert "1 simulated studies" in page and 'id="simulate-stopped"' in page


def test_more_simulations_at_once_than_the_server_runs_get_a_429(logged_in, session):
    """With every slot taken (as by requests still running) the next is refused at once
    with a 429, Retry-After and a message, and nothing is simulated; once a slot is
    free it runs."""
    _study(session)
    url = "/dashboard/studies/sim1/simulate?replications=2"
    with ExitStack() as running:
        held = [running.enter_context(RUNNING.take()) for _ in range(MAX_RUNNING)]
        assert all(held)
        with RUNNING.take() as free:
            assert not free  # the slots are full: one more is refused, not queued
        r = logged_in.get(url)
        assert r.status_code == 429 and r.headers["Retry-After"] == "5"
        assert r.template.name == "simulate.html" and r.context["sim"] is None
        assert r.context["sim_errors"] == {"form": BUSY}
        assert BUSY in html.unescape(r.text)
        # Bad input is still a 400, whatever the load.
        assert logged_in.get(url + "&seed=-1").status_code == 400
    r = logged_in.get(url)
    assert r.status_code == 200 and r.context["sim"].summary.replications == 2


def test_the_simulation_ends_with_a_sentence_verdict(logged_in, session):
    _study(session)
    r = logged_in.get("/dashboard/studies/sim1/simulate?replications=4")
    assert r.status_code == 200, r.text[:500]
    said = re.search(r'id="simulate-verdict" role="status"><strong>(.*?)</strong>', r.text, re.S)
    assert said and said.group(1) == html.escape(r.context["sim"].verdict)
    assert said.group(1).startswith(("Too small: ", "Enough: "))
