"""Simulated raters over HTTP, their pieces: the rating page as a plain HTTP client reads it
(through the app, both databases) and the rater judge (pure)."""

from __future__ import annotations

import numpy as np
import pytest

from app.annotation.identities import invite_token
from app.simulate.godview import ItemTruth, SimulationError, StudyView
from app.simulate.page import RATING_PAGE, read_page
from app.studytypes.ratings.judges import RaterJudge
from app.studytypes.ratings.raters import RaterHeterogeneity
from tests.hits.factory import annotator
from tests.hits.ratings_factory import make_ratings_study

HALVES = ["0", "0.5", "1", "1.5", "2", "2.5", "3", "3.5", "4", "4.5", "5"]


def _view(kinds=("data", "model", "attention"), study_type="ratings", step=0.5) -> StudyView:
    return StudyView(
        id=1, slug="s", kinds=list(kinds), lengths=(10, 20), top_k=5, min_ms_per_item=1000,
        cap=200, study_type=study_type, ratings={"scale_max": 5, "step": step},
    )  # fmt: skip


def _pair(item_id, kind="data", *, length=10, attention=False) -> ItemTruth:
    return ItemTruth(
        hit_id=1, position=0, item_id=item_id, length=length, kind=kind, attention=attention,
        words=(), reference=None, true_next_word=None,
    )  # fmt: skip


@pytest.mark.parametrize("step", [0.5, 1.0])
def test_the_rating_page_is_read_step_by_step_as_a_browser_shows_it(
    client, session, settings, step
):
    study = make_ratings_study(session, per_cell=5, step=step, min_seconds_per_item=0)
    link = f"/a/{invite_token(settings.secret_key, annotator(session, study))}"
    page = read_page(client.get(link))
    assert page.kind == RATING_PAGE and page.action == f"{link}/submit"
    assert (page.position, page.step) == (0, "quality")
    assert page.points == (HALVES if step == 0.5 else HALVES[::2])
    public_id = page.fields["assignment"]
    # The step's page-signal field is sent empty without JavaScript, as a browser would.
    assert page.fields == {
        "assignment": public_id,
        "position": "0",
        "step": "quality",
        "sig0.quality": "",
    }
    sent = client.post(page.action, data={**page.fields, "rating": "3"}, follow_redirects=False)
    assert sent.status_code == 303
    # The same pair, its context now shown, asks for the consistency.
    page = read_page(client.get(sent.headers["location"]))
    assert page.kind == RATING_PAGE and (page.position, page.step) == (0, "consistency")
    assert page.fields["assignment"] == public_id
    # A refusal comes back as the step again, with its status and its reason.
    refused = read_page(client.post(page.action, data={**page.fields, "rating": "7"}))
    assert refused.status == 400 and refused.kind == RATING_PAGE
    assert "A rating is one of" in refused.text and refused.step == "consistency"
    assert page.point(3.0) == "3"
    with pytest.raises(SimulationError, match=r"has no point 3\.25"):
        page.point(3.25)


@pytest.mark.sqlite
def test_the_raters_mean_rating_of_a_kind_is_its_true_mean():
    """Many raters, each meeting a new pair: the mean rating per kind and step recovers the
    raters' exact population mean (a diagnostic kind gets the data's)."""
    view = _view(("data", "model", "data_shuffled", "attention"))
    judge = RaterJudge.calibrated(view, quality=(3.6, 2.4), consistency=(3.0, 1.8), seed=3)
    rng, n = np.random.default_rng(0), 6000
    for code, kind in enumerate(("data", "model", "data_shuffled")):
        for step in ("quality", "consistency"):
            got = []
            for i in range(n):
                value, fast = judge.rate(rng, judge.rater(rng), _pair(i, kind), step)
                got.append(value)
                assert not fast
            truth = judge.raters.truth(10, code, step)
            assert truth == pytest.approx(
                {"quality": (3.6, 2.4), "consistency": (3.0, 1.8)}[step][code == 1]
            )
            assert set(got) <= {i / 2 for i in range(11)}
            assert np.mean(got) == pytest.approx(truth, abs=4 * np.std(got) / np.sqrt(n))


@pytest.mark.sqlite
def test_every_rater_meets_the_same_pair_and_inattention_is_layered_on_top():
    # No rater differences and no noise: a pair's rating is the same whoever rates it, and
    # pairs differ (the pair effect, seeded by the item's id).
    hetero = RaterHeterogeneity(sd_rater=0.0, sd_rater_kind=0.0, sd_pair=0.8, sd_noise=0.0)
    judge = RaterJudge.calibrated(_view(), hetero=hetero, seed=5, attention_accuracy=1.0)
    rng = np.random.default_rng(1)
    per_pair = [
        {judge.rate(rng, judge.rater(rng), _pair(i), "quality")[0] for _ in range(20)}
        for i in range(30)
    ]
    assert all(len(values) == 1 for values in per_pair) and len(set.union(*per_pair)) > 2
    # Attentive raters rate an attention pair (shuffled words) at most 1, then at most 1.5.
    pair = _pair(99, attention=True)
    assert max(judge.rate(rng, judge.rater(rng), pair, "quality")[0] for _ in range(200)) <= 1
    assert max(judge.rate(rng, judge.rater(rng), pair, "consistency")[0] for _ in range(200)) <= 1.5
    # Too-fast clicks: the share asked for, uniform over the scale.
    fast = RaterJudge.calibrated(_view(), hetero=hetero, fast=0.3, seed=5)
    got = [fast.rate(rng, fast.rater(rng), _pair(i), "quality") for i in range(4000)]
    flagged = np.array([v for v, f in got if f])
    assert len(flagged) / 4000 == pytest.approx(0.3, abs=0.03)
    assert set(flagged) == {i / 2 for i in range(11)} and flagged.mean() == pytest.approx(
        2.5, abs=0.15
    )


@pytest.mark.sqlite
def test_raters_refuse_what_is_not_a_ratings_study_s_pair():
    with pytest.raises(SimulationError, match="is a nextword study"):
        RaterJudge.calibrated(_view(study_type="nextword"))
    with pytest.raises(ValueError, match="strictly inside"):
        RaterJudge.calibrated(_view(), quality=(5.0, 3.0))
    judge, rng = RaterJudge.calibrated(_view()), np.random.default_rng(2)
    rater = judge.rater(rng)
    with pytest.raises(SimulationError, match="kind 'random'\\) is not in the study's design"):
        judge.rate(rng, rater, _pair(1, "random"), "quality")
    with pytest.raises(SimulationError, match="length 30"):
        judge.rate(rng, rater, _pair(1, length=30), "quality")
    with pytest.raises(SimulationError, match="a step 'fluency'"):
        judge.rate(rng, rater, _pair(1), "fluency")
    line = judge.describe()
    assert "l=10: quality 3.4 (data) 3.1 (model), consistency 3.3 (data) 2.9 (model)" in line
    assert "sd rater 0.5, rater x kind 0.25, pair 0.6, noise 0.7" in line
