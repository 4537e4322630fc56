"""The simulated crowd's P_D judges and its reading of the page (pure: no database, no server)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from app.annotation.schemas import PositionView
from app.simulate.crowd import Crowd
from app.simulate.godview import ItemTruth, SimulationError
from app.simulate.page import HIT_PAGE, read_page
from app.studytypes.nextword.judges import ModelJudge
from app.web.templating import templates

pytestmark = pytest.mark.sqlite  # pure: one run is enough

WORDS = ("the", "a", "&amp;", "<i>", '"so"')


def _item(reference, *, attention=False, n=0) -> ItemTruth:
    return ItemTruth(
        hit_id=1, position=n, item_id=10 + n, length=10, kind="data", attention=attention,
        words=WORDS, reference=reference, true_next_word=None,
    )  # fmt: skip


def _ref(top: str, probs=(0.5, 0.2, 0.1, 0.05, 0.05)) -> dict:
    return {
        "reference_top_word": top,
        "word_gd": int(top != WORDS[0]),
        "choice_probs": list(probs),
        "none_prob": max(0.0, 1 - sum(probs)),
    }


def test_an_oracle_picks_the_reference_top_word_when_shown_else_none():
    judge, rng, oracle = ModelJudge(), np.random.default_rng(0), Crowd.parse("oracle")
    items = [_item(_ref("the")), _item(_ref("<i>"), n=1), _item(_ref("elsewhere"), n=2)]
    shown = [list(reversed(WORDS))] * 3  # the screen order does not matter: ranks do
    assert judge.honest(rng, oracle, None, items, shown).tolist() == [1, 4, 0]
    # d = 1[rank != 1] is the item's word-level d_GD.
    assert [int(r != 1) for r in judge.honest(rng, oracle, None, items, shown)] == [
        i.reference["word_gd"] for i in items
    ]


def test_a_sampler_draws_from_the_choice_probabilities_and_none():
    judge, rng, sampler = ModelJudge(), np.random.default_rng(1), Crowd.parse("sampler")
    item = _item(_ref("the", (0.4, 0.2, 0.1, 0.1, 0.05)))
    n = 20_000
    got = judge.honest(rng, sampler, None, [item] * n, [list(WORDS)] * n)
    share = np.bincount(got, minlength=6) / n  # rank 0 is "none"
    assert share == pytest.approx([0.15, 0.4, 0.2, 0.1, 0.1, 0.05], abs=0.015)


def test_a_model_judge_needs_the_reference_except_on_attention_items():
    judge, rng, crowd = ModelJudge(), np.random.default_rng(2), Crowd.parse("oracle")
    assert judge.honest(
        rng, crowd, None, [_item(None, attention=True)], [list(WORDS)]
    ).tolist() == [0]
    with pytest.raises(SimulationError, match=r"item 10 has no reference"):
        judge.honest(rng, crowd, None, [_item(None)], [list(WORDS)])


def test_the_page_is_read_as_a_browser_shows_it():
    """Words with HTML's special characters come back as the words themselves."""
    positions = [
        PositionView(number=p, prompt=None, words="x y", source=None, options=list(WORDS[p:]))
        for p in range(2)
    ]
    items = templates.get_template("nextword/_items.html").render(positions=positions, answers={})
    html = (
        '<form method="post" action="/a/T/submit" id="hit-form">'
        f'<input type="hidden" name="assignment" value="A1">{items}</form>'
    )
    page = read_page(httpx.Response(200, text=html))
    assert page.kind == HIT_PAGE and page.action == "/a/T/submit"
    # Each item's page-signal field is sent empty without JavaScript, as a browser would.
    assert page.fields == {"assignment": "A1", "sig0": "", "sig1": ""}
    assert page.shown(0) == list(WORDS) and page.shown(1) == list(WORDS[1:])
    assert page.none == {0: 5, 1: 4}
    message = '<section class="card message" data-kind="cap_reached"><h1>Done</h1></section>'
    done = read_page(httpx.Response(200, text=message))
    assert done.kind == "cap_reached" and done.text == "Done" and not done.options
