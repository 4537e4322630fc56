"""Whole simulated studies through the results functions: bias, exclusions, coverage."""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
import pytest

from app.models import Study
from app.results.queries import ATTENTION_KIND
from app.results.schemas import ResultQuery
from app.results.stats import PlanTarget
from app.simulate.crowd import Crowd, Heterogeneity, StandIn, expected_with_random_clicks
from app.simulate.design import Design, assign_slots
from app.studytypes.nextword.results import compute_results
from app.studytypes.nextword.simulation import estimate, simulate_judgments, simulate_study

pytestmark = pytest.mark.sqlite  # pure: one run is enough

WITH, WITHOUT = "with exclusions", "without exclusions"


def small(**fields) -> Design:
    base = {"items_per_cell": 400, "cap": 20, "overlap_share": 0.05}
    return Design.simple(lengths=(10, 20), **(base | fields))


def test_pd_equal_pm_is_centred_on_one():
    out = simulate_study(small(), Crowd.parse("sampler"), true_ebc=1.0, replications=60, b=199)
    for ln in (10, 20):
        row = out.row(WITH, ln)
        assert row.truth == pytest.approx(1.0)
        assert abs(row.mean_estimate - 1.0) < 3 * row.sd_estimate / math.sqrt(60)
        assert 0.3 < row.mean_se / row.sd_estimate < 3.0


def test_random_clickers_pull_ebc_towards_one():
    """With a share s of uniform clicks a cell's expected d is (1 - s) CGD + s 5/6, so the
    EB-C the crowd delivers is the ratio of those, not the truth."""
    share, truth, p_d = 0.4, 1.25, 0.6
    crowd = Crowd.parse(f"sampler,noisy:{share}")
    out = simulate_study(small(), crowd, true_ebc=truth, cgd_data=p_d, replications=60, b=199)
    expected = expected_with_random_clicks(p_d * truth, share) / expected_with_random_clicks(
        p_d, share
    )
    assert expected < truth - 0.1
    for ln in (10, 20):
        row = out.row(WITHOUT, ln)
        tol = 4 * row.sd_estimate / math.sqrt(60) + 0.005  # + the ratio estimator's bias
        assert row.mean_estimate == pytest.approx(expected, abs=tol)
        assert row.coverage < 0.5  # the interval is about the wrong number


def test_too_fast_clicks_are_excluded_and_the_truth_recovered():
    truth, p_d = 1.25, 0.6
    out = simulate_study(
        small(),
        Crowd.parse("sampler,fast:0.4"),
        true_ebc=truth,
        cgd_data=p_d,
        replications=40,
        b=199,
    )
    for ln in (10, 20):
        kept, raw = out.row(WITH, ln), out.row(WITHOUT, ln)
        assert abs(kept.mean_estimate - truth) < 4 * kept.sd_estimate / math.sqrt(40) + 0.01
        assert raw.mean_estimate < truth - 0.08
    assert out.mean_excluded > 0.35 * out.mean_judgments


def test_layout_cap_overlap_and_determinism():
    design = small(cap=7, overlap_share=0.1, overlap_replicas=3, replicas=1)
    stand_in = StandIn.calibrated([10, 20], 3, ebc=1.05)
    crowd = Crowd.parse("sampler")
    j = simulate_judgments(design, crowd, stand_in, np.random.default_rng(9))
    again = simulate_judgments(design, crowd, stand_in, np.random.default_rng(9))
    assert np.array_equal(j.choice, again.choice) and np.array_equal(j.annotator, again.annotator)
    pairs = np.unique(np.stack([j.annotator, j.hit]), axis=1)
    # Every judgment of an (annotator, HIT) pair is one assignment of 11 positions.
    assert pairs.shape[1] * 11 == len(j)
    per_annotator = np.bincount(pairs[0])
    assert per_annotator.max() <= 7
    per_hit = np.bincount(pairs[1])[1:]
    assert sorted(set(per_hit.tolist())) == [1, 3]
    assert np.sum(per_hit == 3) == 2 * round(0.1 * 80)
    assert np.sum(j.attention) == pairs.shape[1]  # one attention item per HIT
    a = simulate_study(design, crowd, true_ebc=1.05, replications=3, seed=4, b=199)
    b = simulate_study(design, crowd, true_ebc=1.05, replications=3, seed=4, b=199)
    c = simulate_study(design, crowd, true_ebc=1.05, replications=3, seed=5, b=199)
    assert a.rows == b.rows and a.rows != c.rows


def _one_queue(rng, design, hetero, hit_length, replicas):
    """The assignment as ``assign_slots``'s docstring states it, scanning one queue: each
    annotator takes, in queue order, every slot it may until it has what it wants."""
    rounds = [rng.permutation(np.flatnonzero(replicas > r)) for r in range(int(replicas.max()))]
    pending = deque(int(x) for x in np.concatenate(rounds))
    cap = design.cap
    if design.max_cell_share:
        cap = max(1, math.floor(design.max_cell_share * design.hits_per_length))
    annot, hits, g = [], [], 0
    while pending:
        want = min(
            design.cap, math.ceil(hetero.activity_min * (1.0 + rng.pareto(hetero.activity_tail)))
        )
        seen, per_length, passed = set(), {}, []
        while pending and len(seen) < want:
            x = pending.popleft()
            ln = int(hit_length[x])
            if x in seen or per_length.get(ln, 0) >= cap:
                passed.append(x)
                continue
            seen.add(x)
            per_length[ln] = per_length.get(ln, 0) + 1
            annot.append(g)
            hits.append(x)
        pending.extendleft(reversed(passed))
        g += 1
    return np.array(annot), np.array(hits)


def _layout(design, rng):
    n_per = design.hits_per_length
    hit_length = np.repeat(np.array(design.lengths), n_per)
    replicas = np.full(hit_length.size, design.replicas)
    for li in range(len(design.lengths)):
        chosen = rng.choice(n_per, size=round(design.overlap_share * n_per), replace=False)
        replicas[chosen + li * n_per] = max(design.overlap_replicas, design.replicas)
    return hit_length, replicas


def test_the_assignment_is_the_one_queue_s_order():
    """Per-length queues merged by a heap take exactly what one queue scanned in order
    would, draw for draw (so seeded results are unchanged), over random designs: several
    lengths, replicas and overlap, caps, cell shares, and busy or idle crowds."""
    rs = np.random.default_rng(123)
    for _ in range(150):
        lengths = sorted(rs.choice(np.arange(5, 60), int(rs.integers(1, 5)), replace=False))
        design = Design.simple(
            lengths=tuple(int(x) for x in lengths),
            items_per_cell=int(rs.integers(5, 1500)),
            cap=int(rs.integers(1, 30)),
            replicas=int(rs.integers(1, 4)),
            overlap_share=float(rs.random() * 0.5),
            overlap_replicas=int(rs.integers(1, 6)),
            max_cell_share=[None, 0.01, 0.1, 0.3][int(rs.integers(0, 4))],
        )
        hetero = Heterogeneity(
            activity_min=float(rs.choice([0.5, 2.0, 6.0])),
            activity_tail=float(rs.choice([0.8, 1.2, 3.0])),
        )
        hit_length, replicas = _layout(design, rs)
        seed = int(rs.integers(2**31))
        want = _one_queue(np.random.default_rng(seed), design, hetero, hit_length, replicas)
        got = assign_slots(np.random.default_rng(seed), design, hetero, hit_length, replicas)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_small_cell_share_keeps_the_assignment_linear():
    """One length, a 1:1 mix, 4,000 items per cell and a cell share of 0.0001: each
    annotator may take one HIT. A scan of the whole queue per annotator looked at ~10
    million slots for 4,400 assignments; the assignment looks at each slot taken once,
    and passes over at most replicas - 1 slots per HIT taken."""
    design = Design(
        lengths=(10,),
        kinds=["data", "model", ATTENTION_KIND],
        mix={0: 1, 1: 1},
        attention=0,
        items_per_cell=4000,
        max_cell_share=0.0001,
    )
    hit_length, replicas = _layout(design, np.random.default_rng(0))
    annot, hits, looked = assign_slots(
        np.random.default_rng(1), design, Heterogeneity(), hit_length, replicas
    )
    assert hits.size == replicas.sum() == 4_400 and annot.max() + 1 == 4_400
    assert looked == hits.size
    # Many lengths, a share of one HIT each, 3 replicas on a quarter of the HITs.
    wide = Design.simple(
        lengths=tuple(range(5, 45)), items_per_cell=1000, max_cell_share=0.005,
        overlap_share=0.25, overlap_replicas=3,
    )  # fmt: skip
    hit_length, replicas = _layout(wide, np.random.default_rng(0))
    annot, hits, looked = assign_slots(
        np.random.default_rng(2), wide, Heterogeneity(), hit_length, replicas
    )
    pairs = np.unique(np.stack([annot, hits]), axis=1)
    assert hits.size == replicas.sum() == pairs.shape[1]  # never one HIT twice
    assert looked <= hits.size * 3
    # The whole replication takes it as it comes.
    j = simulate_judgments(
        design, Crowd.parse("sampler"), StandIn.calibrated([10], 3, ebc=1.0),
        np.random.default_rng(0),
    )  # fmt: skip
    assert len(j) == 4_400 * 2 and j.annotator_ids.size == 4_400


def test_the_results_service_reads_the_simulated_columns():
    """compute_results takes a simulated study as it takes a real one, and its main EB-C is
    the simulator's."""
    design = small()
    study = Study(
        slug="sim",
        prefix_lengths=list(design.lengths),
        kinds=["data", "model"],
        items_per_cell=design.items_per_cell,
        top_k=5,
        hit_layout={"mix": {"data": 5, "model": 5}, "attention": 1},
        replicas=1,
        overlap_share=design.overlap_share,
        overlap_replicas=3,
        per_annotator_cap=design.cap,
        max_cell_share=None,
        min_ms_per_item=1000,
        exclusions={},
        reward_cents=0,
        platform_fee=0.0,
    )
    assert Design.from_study(study) == design
    j = simulate_judgments(
        design,
        Crowd.parse("sampler,fast:0.1"),
        StandIn.calibrated([10, 20], 3, ebc=1.1),
        np.random.default_rng(0),
    )
    res = compute_results(study, j, ResultQuery(b=200, seed=3))
    from app.results.exclusions import exclusion_mask

    keep, _ = exclusion_mask(j, study.exclusions)
    mine = estimate(j, keep, b=200, seed=3, level=0.95)
    for row in res.results.table:
        assert row.ebc.estimate == pytest.approx(mine.ebc(row.length).estimate, rel=1e-12)
        assert row.ebc.low == pytest.approx(mine.ebc(row.length).low, rel=1e-12)
    assert res.exclusions.excluded_by_rule["too_fast"] > 0


def test_coverage_of_the_default_interval_with_annotator_effects():
    """Over 600 small studies whose annotators differ in skill and in how they treat data
    and model prefixes, with heavy-tailed activity, the default 95% interval covers the
    population EB-C within Monte Carlo tolerance (docs/design.md: ~93-95% for annotator
    resampling)."""
    hetero = Heterogeneity(sd_annotator=0.6, sd_annotator_kind=0.5, sd_item=0.8, activity_tail=1.1)
    design = small(items_per_cell=1000, cap=25)
    crowd = Crowd.parse("sampler", hetero=hetero)
    r = 600
    started = time.perf_counter()
    out = simulate_study(
        design,
        crowd,
        true_ebc=1.05,
        replications=r,
        b=499,
        seed=11,
        target=PlanTarget(target_ebc=1.05),
    )
    assert time.perf_counter() - started < 60
    tol = 3 * math.sqrt(0.95 * 0.05 / r)
    for ln in (10, 20):
        row = out.row(WITH, ln)
        assert abs(row.coverage - 0.95) <= tol, (ln, row)
    assert out.mean_effective >= 30  # the design keeps enough clusters for the claim


def test_the_coverage_check_can_fail_item_resampling_under_covers():
    """The same studies with item-level resampling (ignoring the annotator x kind effect)
    fall well short of 95% (docs/design.md: ~75-80%), so the coverage check above has teeth."""
    from app.results.stats import estimate_ebc

    hetero = Heterogeneity(sd_annotator=0.6, sd_annotator_kind=0.5, sd_item=0.8)
    design = small(items_per_cell=1000, cap=25)
    crowd = Crowd.parse("sampler", hetero=hetero)
    s = StandIn.calibrated([10, 20], 3, ebc=1.05, hetero=hetero)
    covered = []
    for r in range(150):
        j = simulate_judgments(design, crowd, s, np.random.default_rng([11, r]))
        res = estimate_ebc(
            j.d, j.length, j.kind, j.annotator, j.hit, j.item,
            unit="item", ci="percentile", b=299, seed=r, attention=j.attention,
        )  # fmt: skip
        q = res.ebc(10)
        covered.append(q.low <= 1.05 <= q.high)
    assert np.mean(covered) < 0.95 - 3 * math.sqrt(0.95 * 0.05 / 150)
