"""Simulate before you pay on a ratings study (app.studytypes.ratings.simulation and
.preview, `ebc simulate` on a ratings study): the figures against the raters' exact truth,
the replication against the ratings results, what the design needs, the costs against a
hand computation, the bounds and the bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from app.db import build_engine, make_sessionmaker
from app.results.exclusions import exclusion_mask
from app.results.stats.ratings import ratings_results
from app.simulate.costs import channel_costs
from app.simulate.design import Design
from app.simulate.preview import PAGE_LIMITS, DesignSize, Limits, PreviewError, max_replications
from app.studytypes.nextword.preview import PreviewOptions, simulate_before_paying
from app.studytypes.ratings.preview import (
    RatingsPreviewOptions,
    form_values,
    options_from_form,
    simulate_ratings_before_paying,
)
from app.studytypes.ratings.raters import RaterHeterogeneity
from app.studytypes.ratings.simulation import (
    RatingsWorkload,
    raters_for,
    ratings_needs,
    replicate_ratings,
    run_ratings_replication,
    simulate_study_ratings,
    summarise_ratings,
)
from app.studytypes.registry import study_type_of
from tests.cli.test_simulate import ebc
from tests.hits.factory import make_study
from tests.hits.ratings_factory import make_ratings_study
from tests.results.ratings_study import make_rated_study

WITH, WITHOUT = "with exclusions", "without exclusions"
STEPS = ("quality", "consistency")


def _design(lengths=(10, 20), pairs=250, **fields) -> Design:
    """The later paper's protocol: HITs of 5 data + 5 model pairs and an attention pair,
    5 ratings per pair, the cap of 200 HITs."""
    return Design.simple(
        lengths=lengths, items_per_cell=pairs, replicas=5, overlap_share=0, **fields
    )


def _within(p: float, nominal: float, reps: int) -> bool:
    """Within 3 Monte Carlo standard errors of the nominal share."""
    return abs(p - nominal) <= 3 * math.sqrt(nominal * (1 - nominal) / reps)


# ----------------------------------------------------------------- against the truth

R = 60


def test_the_figures_agree_with_the_raters_truth():
    """60 studies of 250 pairs per cell at two lengths: the quality means equal for both
    kinds (true gap 0: the rejection rate is the test's size), consistency 3.3 against
    2.9 (the power to find a gap of 0.4). Per length and step the mean gap and ratio
    lie within 3 Monte Carlo SEs of the exact truth, the headline interval covers the
    truth within Monte Carlo tolerance of 95%, the size is near 5% and the power high."""
    design = _design()
    raters = raters_for(design, quality=(3.2, 3.2), consistency=(3.3, 2.9))
    reps = replicate_ratings(design, raters, replications=R, seed=11, b=200)
    summary = summarise_ratings(design, raters, reps, level=0.95)
    assert summary.replications == R
    # An attentive rater errs on an attention pair 5% of the time: some are excluded.
    assert summary.mean_excluded > 0
    assert [(r.variant, r.length, r.step) for r in summary.rows] == [
        (v, ln, step) for v in (WITH, WITHOUT) for ln in (10, 20) for step in STEPS
    ]
    for row in summary.rows:
        assert row.replications == R
        truth = {"quality": (3.2, 3.2), "consistency": (3.3, 2.9)}[row.step]
        assert (row.true_data, row.true_model) == pytest.approx(truth, abs=1e-9)
        assert row.true_gap == pytest.approx(truth[0] - truth[1], abs=1e-9)
        assert row.true_ratio == pytest.approx(truth[0] / truth[1], abs=1e-9)
        assert abs(row.mean_gap - row.true_gap) <= 3 * row.sd_gap / math.sqrt(R)
        assert abs(row.mean_ratio - row.true_ratio) <= 3 * row.sd_ratio / math.sqrt(R)
        assert _within(row.gap_coverage, 0.95, R) and _within(row.ratio_coverage, 0.95, R)
        assert row.gap_coverage_mc == pytest.approx(
            math.sqrt(row.gap_coverage * (1 - row.gap_coverage) / R)
        )
        # The typical half-width is the interval's, and the spread of the estimates
        # matches it (half-width ~ t x SD of the estimate).
        assert 0.5 < row.half_width / (1.96 * row.sd_gap) < 1.6
        if row.step == "quality":
            assert row.test == "size" and _within(row.reject, 0.05, R)
        else:
            assert row.test == "power" and row.reject > 0.8
    # Replication 1 is one simulated study as it runs alone.
    first = run_ratings_replication(design, raters, seed=11, r=0, b=200)
    for row in summary.rows:
        got = first.rows[WITH][(row.length, row.step)]
        assert (row.first_gap, row.first_low, row.first_high) == (
            got.gap,
            got.gap_low,
            got.gap_high,
        )


def test_a_replication_is_the_ratings_results_on_the_same_ratings():
    """The replication's figures are `ratings_results`' (what the results page shows) on
    the simulated study's ratings after the study's exclusion rules: spammers fail the
    attention rule, fast ratings the minimum time."""
    design = _design(lengths=(10,), pairs=100)
    raters = raters_for(design, spammers=0.2)
    ratings = simulate_study_ratings(design, raters, np.random.default_rng([3, 0]), fast=0.1)
    keep, report = exclusion_mask(ratings, design.exclusions)
    assert report.excluded_by_rule["attention"] > 0 and report.excluded_by_rule["too_fast"] > 0
    one = run_ratings_replication(design, raters, seed=3, r=0, b=300, fast=0.1)
    assert one.excluded == int((~keep).sum()) and one.n_ratings == ratings.n
    for variant, mask in ((WITH, keep), (WITHOUT, np.ones(ratings.n, bool))):
        res = ratings_results(ratings.subset(mask), b=300, seed=3)
        for c in res.contrasts:
            got = one.rows[variant][(c.length, c.step)]
            assert (got.gap, got.gap_low, got.gap_high) == (c.gap, c.gap_low, c.gap_high)
            assert (got.ratio, got.ratio_low, got.ratio_high) == (
                c.ratio,
                c.ratio_low,
                c.ratio_high,
            )
            boot = next(s for s in res.secondary if (s.length, s.step) == (c.length, c.step))
            assert (got.boot_low, got.boot_high) == (boot.gap_low, boot.gap_high)


def test_fast_ratings_are_random_and_flagged_only_with_a_minimum_time():
    design = _design(lengths=(10,), pairs=100)
    raters = raters_for(design)
    rng = np.random.default_rng(5)
    fast = simulate_study_ratings(design, raters, rng, fast=0.25)
    assert 0.2 < fast.too_fast.mean() < 0.3
    untimed = dataclasses.replace(design, min_ms_per_item=0)
    assert not simulate_study_ratings(untimed, raters, rng, fast=0.25).too_fast.any()
    assert not simulate_study_ratings(design, raters, rng).too_fast.any()


def test_inattention_shrinks_the_gap_and_the_exclusions_restore_it():
    """A third of the raters rate at random: without exclusions their ratings pull the
    gap towards 0; the attention rule drops them and the gap is the truth's again."""
    design = _design(lengths=(10,), pairs=200)
    raters = raters_for(design, quality=(3.4, 2.8), spammers=0.33)
    reps = replicate_ratings(design, raters, replications=12, seed=2, b=200)
    s = summarise_ratings(design, raters, reps, level=0.95)
    assert s.mean_excluded > 0
    kept, everyone = s.row(WITH, 10, "quality"), s.row(WITHOUT, 10, "quality")
    assert everyone.mean_gap < kept.mean_gap - 0.1
    assert abs(kept.mean_gap - 0.6) <= 3 * kept.sd_gap / math.sqrt(12)


def test_what_the_design_needs_reaches_the_half_width_and_power_asked():
    """From 10 HITs, 50 pairs per cell: a third of the half-width takes far more than 9
    times the pairs (what a 1/sqrt(pairs) rule says), as the raters, who run out of HITs
    in a small design, grow more slowly than the pairs; a simulation at the size it gives
    has about the half-width asked, and at the size it gives for power 0.8 finds the true
    gap about 80% of the time."""
    small = _design(lengths=(10,), pairs=50)
    raters = raters_for(small)
    reps = replicate_ratings(small, raters, replications=20, seed=1, b=200)
    s = summarise_ratings(small, raters, reps, level=0.95)
    now = s.row(WITH, 10, "quality").half_width
    target = now / 3
    needs = {n.step: n for n in ratings_needs(small, raters, s, half_width=target)}
    quality = needs["quality"]
    assert (quality.pairs_now, quality.half_width_now, quality.step) == (50, now, "quality")
    assert quality.pairs_for_half_width % 5 == 0  # whole HITs of 5 data pairs
    assert quality.pairs_for_half_width > 1.5 * 9 * 50
    big = _design(lengths=(10,), pairs=quality.pairs_for_half_width)
    again = replicate_ratings(big, raters, replications=20, seed=7, b=200)
    got = summarise_ratings(big, raters, again, level=0.95).row(WITH, 10, "quality")
    assert got.half_width == pytest.approx(target, rel=0.15)
    strong = _design(lengths=(10,), pairs=quality.pairs_for_power)
    found = replicate_ratings(strong, raters, replications=40, seed=2, b=200)
    row = summarise_ratings(strong, raters, found, level=0.95).row(WITH, 10, "quality")
    assert _within(row.reject, 0.8, 40)
    # No true gap: no pairs for power.
    equal = raters_for(small, quality=(3.2, 3.2))
    flat = summarise_ratings(
        small, equal, replicate_ratings(small, equal, replications=3, seed=1, b=200), level=0.95
    )
    by_step = {n.step: n for n in ratings_needs(small, equal, flat, half_width=0.1)}
    assert by_step["quality"].pairs_for_power is None
    assert by_step["consistency"].pairs_for_power is not None


# ------------------------------------------------------------- a study in the database


def _study(session, slug="rs1", **fields):
    """A stored ratings study (pairs and HITs built); the simulation reads its design, so
    it is then made the paper's size: two lengths, 250 pairs per cell, 5 ratings a pair:
    50 HITs per length, 500 assignments of 11 pairs."""
    study = make_ratings_study(session, slug=slug, lengths=(10, 20), per_cell=10, replicas=5)
    study.items_per_cell = 250
    study.reward_cents = 60
    for name, value in fields.items():
        setattr(study, name, value)
    session.flush()
    return study


QUICK = {"replications": 3, "b": 200}


def test_the_preview_prices_ratings_assignments_and_runs_the_replications(session, settings):
    study = _study(session, channels={"mturk": {"enabled": True, "masters": True}})
    options = RatingsPreviewOptions(
        **QUICK, quality="3.5,3.1", consistency=(3.0, 2.5), crowd="noisy:0.1", seed=4
    )
    preview = simulate_ratings_before_paying(study, settings, options, price=channel_costs)
    assert preview.size.hits == 100 and preview.size.assignments == 500
    assert preview.size.judgments == 500 * 11  # ratings, attention pairs included
    assert preview.size.judgments_per_cell == {"data": 250 * 5, "model": 250 * 5}
    costs = {c.provider: c for c in preview.costs}
    # One assignment = one HIT of pairs at 60 cents; MTurk: 20% + 5% Masters = 15 cents.
    assert costs["mturk"].estimate.rewards_cents == 500 * 60
    assert costs["mturk"].estimate.fees_cents == 500 * 15
    assert costs["local"].estimate.total_cents == 500 * 60
    # Prolific at the default 42.8%: 30,000 x 0.428 = 12,840 cents.
    assert costs["prolific"].estimate.fees_cents == 12_840
    # The figures are the replication path's on the same seed, against the truth chosen.
    design = Design.from_study(study)
    raters = raters_for(design, quality=(3.5, 3.1), consistency=(3.0, 2.5), noisy=0.1)
    reps = replicate_ratings(design, raters, replications=3, seed=4, b=200)
    summary = summarise_ratings(design, raters, reps, level=0.95)
    untimed = {"seconds_per_replication": 0.0}
    assert dataclasses.replace(preview.summary, **untimed) == dataclasses.replace(
        summary, **untimed
    )
    assert preview.row(WITH, 20, "quality").true_gap == pytest.approx(0.4)
    assert preview.row(WITH, 10, "consistency").true_ratio == pytest.approx(1.2)
    assert preview.crowd == "attentive raters with noisy:0.1"
    assert {n.step for n in preview.needs} == set(STEPS)
    assert any(
        "true mean quality 3.5 after data prefixes and 3.1" in a for a in preview.assumptions
    )
    assert any("5 ratings per pair" in a for a in preview.assumptions)


def test_the_study_s_scale_bounds_the_true_means(session, settings):
    study = _study(session)
    study.ratings = {**(study.ratings or {}), "scale_max": 3, "step": 1.0}
    with pytest.raises(PreviewError) as caught:
        simulate_ratings_before_paying(
            study, settings, RatingsPreviewOptions(**QUICK), price=channel_costs
        )
    assert "strictly between 0 and 3" in caught.value.errors["quality"]
    done = simulate_ratings_before_paying(
        study,
        settings,
        RatingsPreviewOptions(**QUICK, quality=(2.0, 1.5), consistency=(2.2, 2.0)),
        price=channel_costs,
    )
    assert done.raters.scale_max == 3 and done.raters.step == 1.0
    assert done.row(WITH, 10, "quality").true_gap == pytest.approx(0.5)


def test_each_preview_takes_only_its_own_kind_of_study(session, settings):
    ratings = _study(session)
    nextword = make_study(session, slug="nw1", lengths=(10,), per_cell=10)
    with pytest.raises(PreviewError, match="is a ratings study"):
        simulate_before_paying(ratings, settings, PreviewOptions(**QUICK), price=channel_costs)
    with pytest.raises(PreviewError, match="not a ratings study"):
        simulate_ratings_before_paying(
            nextword, settings, RatingsPreviewOptions(**QUICK), price=channel_costs
        )
    # Each type's form, from its plug-in.
    assert study_type_of(ratings).preview.form_values({})["quality"] == "3.4,3.1"
    assert "quality" not in study_type_of(nextword).preview.form_values({})


def test_the_page_limits_bound_the_ratings_work(session, settings):
    study = _study(session)
    design = Design.from_study(study)
    size = DesignSize.of(design)
    work = RatingsWorkload.of(design, size.judgments, size.assignments, RaterHeterogeneity(), 2000)
    assert work.ratings == 5500 and work.cells == 8
    assert max_replications(work, PAGE_LIMITS) == 50 and max_replications(work, Limits()) is None
    with pytest.raises(PreviewError) as caught:
        simulate_ratings_before_paying(
            study,
            settings,
            RatingsPreviewOptions(replications=51),
            limits=PAGE_LIMITS,
            price=channel_costs,
        )
    assert "at most 50 replications here" in caught.value.errors["replications"]
    # A design whose one replication is too much for the page: refused before any work.
    study.items_per_cell = 2000
    study.prefix_lengths = list(range(5, 55, 5))
    study.per_annotator_cap = 1
    with pytest.raises(PreviewError, match="too much to simulate here") as caught:
        simulate_ratings_before_paying(
            study,
            settings,
            RatingsPreviewOptions(replications=1),
            limits=PAGE_LIMITS,
            price=channel_costs,
        )
    assert "220,000 ratings in 40 cells by about 20,000 raters" in caught.value.message
    # Past the time budget: the replications done, said so.
    study.items_per_cell, study.prefix_lengths, study.per_annotator_cap = 250, [10, 20], 200
    cut = dataclasses.replace(PAGE_LIMITS, seconds=0.0)
    done = simulate_ratings_before_paying(
        study, settings, RatingsPreviewOptions(replications=4), limits=cut, price=channel_costs
    )
    assert done.summary.replications == 1 and done.options.b == PAGE_LIMITS.b
    assert done.stopped.startswith("Stopped after 1 of the 4 replications asked")


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"quality": "3.4"}, "quality", "two numbers"),
        ({"quality": "3.4,3.1,3"}, "quality", "two numbers"),
        ({"quality": "high,low"}, "quality", "valid number"),
        ({"consistency": "nan,2"}, "consistency", "finite number"),
        ({"sd_rater": "-1"}, "sd_rater", "greater than or equal to 0"),
        ({"sd_noise": "0"}, "sd_noise", "greater than 0"),
        ({"half_width": "0"}, "half_width", "greater than 0"),
        ({"replications": "51"}, "replications", "at most 50 here"),
        ({"seed": "-1"}, "seed", "greater than or equal to 0"),
    ],
)
def test_bad_form_values_are_refused_per_field(values, field, message):
    with pytest.raises(PreviewError) as caught:
        options_from_form(values, PAGE_LIMITS)
    assert message in caught.value.errors[field]


@pytest.mark.parametrize(
    ("crowd", "message"),
    [
        ("oracle", "oracle do not apply to raters"),
        ("position:0.1", "position do not apply to raters"),
        ("lazy", "unknown crowd behaviour"),
        ("noisy:2", "must lie in [0, 1]"),
    ],
)
def test_crowd_layers_that_do_not_apply_to_raters_are_refused(session, settings, crowd, message):
    study = _study(session)
    with pytest.raises(PreviewError) as caught:
        simulate_ratings_before_paying(
            study,
            settings,
            RatingsPreviewOptions(**QUICK, crowd=crowd),
            limits=PAGE_LIMITS,
            price=channel_costs,
        )
    assert message in caught.value.errors["crowd"]


def test_the_form_shows_the_defaults_and_what_was_given():
    shown = form_values({"quality": "3.6,3.0", "crowd": "x" * 300})
    assert shown["quality"] == "3.6,3.0" and shown["consistency"] == "3.3,2.9"
    assert shown["crowd"] == "" and shown["replications"] == "20" and shown["sd_pair"] == "0.6"
    assert options_from_form({"quality": " 3.6 , 3.0 "}).quality == (3.6, 3.0)


# ------------------------------------------------------------------------------ the CLI


def test_ebc_simulate_on_a_rated_study(migrated_copy):
    """The study of tests/results/ratings_study.py, its ratings given through the ratings
    service; the simulation reads its design, made 100 pairs per cell (2 lengths x 20
    HITs x 3 ratings = 120 assignments at 50 cents)."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        made = make_rated_study(session)
        made.study.items_per_cell = 100
        made.study.reward_cents = 50
        make_study(session, slug="nw", lengths=(10,), per_cell=10)
    engine.dispose()
    args = ("simulate", "rated", "--replications", "4", "--b", "200", "--seed", "3")
    out = ebc(migrated_copy, *args, "--quality", "3.4,3.0", "--crowd", "spammers:0.2")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "SIMULATED raters (attentive raters with spammers:0.2), 4 replications" in text
    assert "2 lengths x 20 HITs of 5 data + 5 model pairs and 1 attention" in text
    assert "3 ratings per pair, 120 assignments, 1,320 ratings" in text
    assert "quality 3.4 (data) 3 (model), consistency 3.3 (data) 2.9 (model)" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("with exclusions")]
    assert [(r[2], r[3]) for r in rows] == [
        ("10", "quality"),
        ("10", "consistency"),
        ("20", "quality"),
        ("20", "consistency"),
    ]
    assert [float(r[4]) for r in rows] == [0.4, 0.4, 0.4, 0.4]  # the true gaps
    assert any(line.startswith("without exclusions") for line in text.splitlines())
    assert "what the design needs (100 pairs per cell now" in text
    assert "  quality: gap half-width" in text and "pairs per cell for 0.1" in text
    assert "local (local): 120 assignments, rewards $60.00 + fees $0.00 = $60.00" in text
    assert "mturk (sandbox), channel off: 120 assignments, rewards $60.00 + fees $12.00" in text
    again = ebc(migrated_copy, *args, "--quality", "3.4,3.0", "--crowd", "spammers:0.2").stdout
    assert again.splitlines()[:-1] == text.splitlines()[:-1]  # seeded (the timing aside)

    for bad, message in (
        (("--true-ebc", "1.1"), "rated is a ratings study: --true-ebc does not apply"),
        (("--quality", "3.4"), "--quality: Value error, two numbers"),
        (("--quality", "6,3"), "strictly between 0 and 5"),
        (("--crowd", "oracle"), "oracle do not apply to raters"),
    ):
        out = ebc(migrated_copy, "simulate", "rated", *bad)
        assert out.returncode == 1 and message in out.stderr, out.stderr
    out = ebc(migrated_copy, "simulate", "nw", "--quality", "3.4,3.0", "--sd-pair", "1")
    assert out.returncode == 1
    assert "nw is a next-word study: --quality, --sd-pair does not apply" in out.stderr
