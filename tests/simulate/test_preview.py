"""Simulate before you pay (app.simulate.preview) on studies stored in the database: the
channels' costs against a hand computation, the figures against summarise on the same
seed, and the page's limits and form."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from app.results.stats import PlanTarget
from app.simulate.costs import channel_costs
from app.simulate.crowd import Crowd
from app.simulate.design import Design
from app.simulate.preview import PAGE_LIMITS, DesignSize, Limits, PreviewError, max_replications
from app.simulate.workload import Workload, expected_annotators
from app.studytypes.nextword.preview import (
    PreviewOptions,
    form_values,
    options_from_form,
    simulate_before_paying,
)
from app.studytypes.nextword.simulation import (
    run_replication,
    simulate_judgments,
    simulate_study,
    stand_in_for,
)
from tests.hits.factory import make_study

WITH, WITHOUT = "with exclusions", "without exclusions"
QUICK = {"replications": 2, "b": 199}


def _study(session, slug="p1", **fields):
    """Two lengths, 600 items per cell: 120 HITs of 5 data + 5 model + 1 attention per
    length; 10% of them (12 per length) done by 3 annotators."""
    study = make_study(session, slug=slug, lengths=(10, 20), per_cell=10, overlap_share=0.1)
    study.items_per_cell = 600
    study.per_annotator_cap = 20
    for name, value in fields.items():
        setattr(study, name, value)
    session.flush()
    return study


def _costs(preview):
    return {c.provider: c for c in preview.costs}


def test_each_channel_prices_the_design_by_its_own_rules(session, settings):
    """37 cents per assignment (so that rounding shows); the design needs 2 lengths x
    (108 HITs x 1 + 12 HITs x 3) = 288 assignments."""
    study = _study(session, reward_cents=37)
    preview = simulate_before_paying(study, settings, PreviewOptions(**QUICK), price=channel_costs)
    assert preview.size.assignments == 288 and preview.size.hits == 240
    assert preview.size.judgments == 288 * 11
    assert preview.size.judgments_per_cell == {"data": 144 * 5, "model": 144 * 5}
    cost = _costs(preview)
    rewards = 288 * 37  # 10,656 cents
    # MTurk, fewer than 10 assignments per HIT: 20% of 37 = 7.4 -> 7 cents each.
    mturk = cost["mturk"]
    assert (mturk.environment, mturk.enabled) == ("sandbox", False)
    assert mturk.estimate.rewards_cents == rewards and mturk.estimate.fees_cents == 288 * 7
    assert mturk.estimate.total_cents == 12_672
    assert any("sandbox: no money moves" in n for n in mturk.notes)
    # Prolific at the default rate 42.8%: 10,656 x 0.428 = 4,560.77 -> 4,561 cents.
    assert cost["prolific"].estimate.fees_cents == 4_561
    assert cost["prolific"].estimate.total_cents == 15_217
    # Local invite links: no platform fee.
    assert cost["local"].estimate.fees_cents == 0 and cost["local"].estimate.total_cents == rewards
    assert cost["local"].enabled

    # A verified academic workspace's rate: 10,656 x 0.333 = 3,548.45 -> 3,548 cents.
    academic = settings.model_copy(update={"prolific_fee_rate": 0.333})
    again = simulate_before_paying(
        study, academic, PreviewOptions(**QUICK, providers=("prolific",)), price=channel_costs
    )
    assert [c.provider for c in again.costs] == ["prolific"]
    assert again.costs[0].estimate.fees_cents == 3_548


def test_mturk_tiers_masters_and_production_follow_the_study(session, settings):
    """4 replicas, and 12 on the overlap HITs: the 108 x 2 HITs of 4 assignments pay 20%,
    the 12 x 2 of 12 assignments 40% (MTurk's tier at 10 or more); Masters adds 5% to
    both. 37 cents: 25% -> 9.25 -> 9 cents, 45% -> 16.65 -> 17 cents."""
    study = _study(
        session,
        reward_cents=37,
        replicas=4,
        overlap_replicas=12,
        channels={"mturk": {"enabled": True, "sandbox": False, "masters": True}},
    )
    preview = simulate_before_paying(study, settings, PreviewOptions(**QUICK), price=channel_costs)
    assert preview.size.groups == ((4, 216), (12, 24))
    mturk = _costs(preview)["mturk"]
    assert (mturk.environment, mturk.enabled) == ("production", True)
    assert mturk.assignments == 216 * 4 + 24 * 12 == 1_152
    assert mturk.estimate.rewards_cents == 1_152 * 37
    assert mturk.estimate.fees_cents == 864 * 9 + 288 * 17
    assert "10 or more assignments per HIT: MTurk's fee is 40%, not 20%" in mturk.notes
    assert "Masters workers: MTurk adds 5%" in mturk.notes
    assert not any("sandbox" in n for n in mturk.notes)
    # Without Masters: 20% -> 7 cents, 40% -> 14.8 -> 15 cents.
    study.channels = {"mturk": {"enabled": True, "sandbox": False}}
    plain = _costs(
        simulate_before_paying(study, settings, PreviewOptions(**QUICK), price=channel_costs)
    )["mturk"]
    assert plain.estimate.fees_cents == 864 * 7 + 288 * 15


def test_no_reward_no_platform_price(session, settings):
    study = _study(session, reward_cents=0)
    cost = _costs(
        simulate_before_paying(study, settings, PreviewOptions(**QUICK), price=channel_costs)
    )
    for name in ("mturk", "prolific"):
        assert cost[name].estimate is None and "no reward set" in cost[name].problem
    assert cost["local"].estimate.total_cents == 0


def test_the_figures_are_summarise_s_on_the_same_seed(session, settings):
    study = _study(session, reward_cents=50)
    options = PreviewOptions(
        crowd="sampler,noisy:0.1", target_ebc=1.05, replications=6, seed=4, b=199
    )
    preview = simulate_before_paying(study, settings, options, price=channel_costs)
    design = Design.from_study(study)
    crowd = Crowd.parse("sampler,noisy:0.1")
    target = PlanTarget(target_ebc=1.05)
    summary = simulate_study(design, crowd, replications=6, seed=4, b=199, target=target)
    untimed = {"seconds_per_replication": 0.0}
    assert dataclasses.replace(preview.summary, **untimed) == dataclasses.replace(
        summary, **untimed
    )
    assert preview.rejection == "power" and preview.crowd == "sampler,noisy:0.1"
    first = run_replication(
        design, crowd, stand_in_for(design, crowd, target=target), seed=4, r=0, b=199
    )
    for s in summary.rows:
        row = preview.row(s.variant, s.length)
        assert row.truth == pytest.approx(1.05)
        assert (row.coverage, row.coverage_mc) == (s.coverage, s.coverage_mc)
        assert (row.rejection, row.rejection_mc) == (s.reject, s.reject_mc)
        assert (row.mean_estimate, row.replications) == (s.mean_estimate, 6)
        est, se, low, high, _p = first.rows[s.variant][s.length]
        assert (row.estimate, row.se, row.low, row.high) == (est, se, low, high)
        assert row.low <= row.estimate <= row.high and row.se > 0
        assert 0 <= row.coverage <= 1 and 0 <= row.rejection <= 1
    assert preview.pooled_rejection == summary.pooled_reject
    assert {r.variant for r in preview.rows} == {WITH, WITHOUT}
    # The truth set apart from the target: 1 is the size, anything else just a share.
    null = simulate_before_paying(
        study, settings, options.model_copy(update={"true_ebc": 1.0}), price=channel_costs
    )
    assert null.rejection == "size" and null.row(WITH, 10).truth == pytest.approx(1.0)
    other = simulate_before_paying(
        study, settings, options.model_copy(update={"true_ebc": 1.1}), price=channel_costs
    )
    assert other.rejection == "rejects EB-C = 1"
    assert any("EB-C 1.1 at every length;" in a for a in other.assumptions)


def _workload(study, b=PAGE_LIMITS.b, crowd="sampler") -> Workload:
    design = Design.from_study(study)
    size = DesignSize.of(design)
    return Workload.of(design, size.judgments, size.assignments, Crowd.parse(crowd).hetero, b)


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


def test_the_page_limits_the_work(session, settings):
    study = _study(session)
    work = _workload(study)
    assert work.judgments == 3168 and work.cells == 4 and work.ratios == 3
    assert max_replications(work, PAGE_LIMITS) == 50  # a small design: R is the bound
    assert max_replications(work, Limits()) is None
    with pytest.raises(PreviewError) as caught:
        simulate_before_paying(
            study,
            settings,
            PreviewOptions(replications=51),
            limits=PAGE_LIMITS,
            price=channel_costs,
        )
    assert "at most 50 replications here" in caught.value.errors["replications"]
    # A bigger design: its estimated work bounds R.
    study.items_per_cell = 30_000
    big = _workload(study)
    most = max_replications(big, PAGE_LIMITS)
    assert most == int(PAGE_LIMITS.max_work // big.ns) and 1 <= most < 50
    with pytest.raises(PreviewError) as caught:
        simulate_before_paying(
            study,
            settings,
            PreviewOptions(replications=most + 1),
            limits=PAGE_LIMITS,
            price=channel_costs,
        )
    assert f"at most {most} replications" in caught.value.message
    assert "ebc simulate" in caught.value.message and "judgments in 4 cells" in caught.value.message
    study.items_per_cell = 3_000_000  # not even one replication fits
    with pytest.raises(PreviewError, match="too much to simulate here"):
        simulate_before_paying(
            study, settings, PreviewOptions(replications=1), limits=PAGE_LIMITS, price=channel_costs
        )
    # The page's B is its own, whatever the options say.
    study.items_per_cell = 60
    done = simulate_before_paying(
        study, settings, PreviewOptions(replications=1), limits=PAGE_LIMITS, price=channel_costs
    )
    assert done.options.b == PAGE_LIMITS.b and any("B = 2,000" in a for a in done.assumptions)
    assert done.stopped is None and done.summary.replications == 1


def test_many_cells_are_work_however_few_the_judgments(session, settings):
    """100 lengths x 8 kinds, 2 items per cell and a cap of 1: 1,800 judgments, which
    R x judgments <= 1.5 million let through at R = 50, but each of the 200 annotators
    is a cluster in 701 bootstrapped ratios (~14 s a replication): refused."""
    study = _study(session, per_annotator_cap=1, items_per_cell=2, kinds=LM_KINDS)
    study.prefix_lengths = list(range(5, 105))
    study.hit_layout = {"mix": dict.fromkeys(LM_KINDS, 1), "attention": 1}
    work = _workload(study)
    assert (work.judgments, work.cells, work.ratios) == (1_800, 800, 701)
    assert work.annotators == 200  # a cap of 1: one annotator per assignment
    assert 50 * work.judgments <= 1_500_000  # the old bound let it through
    assert max_replications(work, PAGE_LIMITS) == 0
    with pytest.raises(PreviewError) as caught:
        simulate_before_paying(
            study, settings, PreviewOptions(replications=1), limits=PAGE_LIMITS, price=channel_costs
        )
    message = caught.value.errors["replications"]
    assert "1,800 judgments in 800 cells by about 200 annotators" in message
    assert "too much to simulate here" in message and "ebc simulate STUDY" in message
    # The same design with 3 lengths and 2 kinds is cheap enough for the page's R.
    study.prefix_lengths = [5, 6, 7]
    study.hit_layout = {"mix": {"data": 1, "model": 1}, "attention": 1}
    assert max_replications(_workload(study), PAGE_LIMITS) == 50


@pytest.mark.parametrize(("cap", "share"), [(1, None), (20, None), (200, None), (200, 0.01)])
def test_the_expected_annotators_are_the_simulated_ones(session, cap, share):
    """expected_annotators against the annotators the simulation makes, over 20 studies
    (the mean take ignores the queue's end: a few percent)."""
    study = _study(session, per_annotator_cap=cap, max_cell_share=share, items_per_cell=3000)
    work = _workload(study)
    design = Design.from_study(study)
    crowd = Crowd.parse("sampler")
    stand_in = stand_in_for(design, crowd, true_ebc=1.0)
    made = [
        simulate_judgments(design, crowd, stand_in, np.random.default_rng([3, r])).annotator_ids
        for r in range(20)
    ]
    mean = float(np.mean([ids.size for ids in made]))
    assert work.annotators == pytest.approx(mean, rel=0.1)
    assignments = DesignSize.of(design).assignments
    assert work.annotators == expected_annotators(design, assignments, crowd.hetero)
    if cap == 1:  # one HIT each: as many annotators as assignments, exactly
        assert work.annotators == assignments == mean


def test_past_the_time_budget_the_replications_done_are_reported(session, settings):
    """With no time left after the first replication the answer is that one, said so, and
    the same as a run of R = 1 (replications are seeded one by one)."""
    study = _study(session)
    options = PreviewOptions(replications=4, seed=3, b=199)
    cut = simulate_before_paying(
        study, settings, options, limits=Limits(seconds=0.0), price=channel_costs
    )
    assert cut.summary.replications == 1 and cut.options.replications == 4
    assert "Stopped after 1 of the 4 replications asked" in cut.stopped
    assert "ebc simulate STUDY --replications 4" in cut.stopped
    one = simulate_before_paying(
        study, settings, options.model_copy(update={"replications": 1}), price=channel_costs
    )
    assert cut.rows == one.rows and one.stopped is None
    whole = simulate_before_paying(
        study, settings, options, limits=Limits(seconds=600.0), price=channel_costs
    )
    assert whole.summary.replications == 4 and whole.stopped is None


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"replications": "0"}, "replications", "greater than or equal to 1"),
        ({"replications": "51"}, "replications", "at most 50 here"),
        ({"replications": "9" * 40}, "replications", "at most 50 here"),
        ({"replications": "9" * 5000}, "replications", "at most 50 here"),
        ({"replications": "²"}, "replications", "valid integer"),
        ({"replications": "2.5"}, "replications", "valid integer"),
        ({"target_ebc": "0"}, "target_ebc", "greater than 0"),
        ({"target_ebc": "-1.2"}, "target_ebc", "greater than 0"),
        ({"target_ebc": "abc"}, "target_ebc", "valid number"),
        ({"target_ebc": "inf"}, "target_ebc", "finite number"),
        ({"true_ebc": "nan"}, "true_ebc", "finite number"),
        ({"cgd_data": "1.5"}, "cgd_data", "less than 1"),
        ({"seed": "-3"}, "seed", "greater than or equal to 0"),
        ({"crowd": "a\x00b"}, "crowd", "control characters"),
        ({"crowd": "x" * 201}, "crowd", "at most 200"),
    ],
)
def test_the_form_refuses_bad_values_by_field(values, field, message):
    with pytest.raises(PreviewError) as caught:
        options_from_form({"replications": "5", **values})
    assert list(caught.value.errors) == [field]
    assert message in caught.value.errors[field]
    shown = form_values(values)
    assert "\x00" not in "".join(shown.values()) and len(shown["crowd"]) <= 200


def test_the_form_reads_good_values_and_defaults(session, settings):
    options = options_from_form({"target_ebc": " 1.05 ", "true_ebc": "", "replications": "7"})
    assert (options.target_ebc, options.true_ebc, options.replications) == (1.05, None, 7)
    assert form_values({})["replications"] == "20" and form_values({})["true_ebc"] == ""


def test_what_cannot_be_simulated_is_said(session, settings):
    study = _study(session)
    with pytest.raises(PreviewError) as caught:
        simulate_before_paying(study, settings, PreviewOptions(crowd="lazy"), price=channel_costs)
    assert "unknown crowd behaviour 'lazy'" in caught.value.errors["crowd"]
    with pytest.raises(PreviewError) as caught:  # CGD(model) = 0.73 x 1.5 > 1
        simulate_before_paying(
            study, settings, PreviewOptions(true_ebc=1.5, replications=1), price=channel_costs
        )
    assert "a CGD is a share" in caught.value.errors["true_ebc"]
    with pytest.raises(PreviewError) as caught:
        simulate_before_paying(
            study, settings, PreviewOptions(target_ebc=2.0, replications=1), price=channel_costs
        )
    assert "a CGD is a share" in caught.value.errors["target_ebc"]
    study.hit_layout = {"mix": {"data": 10}, "attention": 1}
    with pytest.raises(PreviewError) as caught:
        simulate_before_paying(study, settings, PreviewOptions(replications=1), price=channel_costs)
    assert "needs data and model items" in caught.value.errors["form"]
