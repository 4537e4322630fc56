"""Benchmark: results of a paper-scale study from PostgreSQL, against scipy.stats.bootstrap.

A study of 3 prefix lengths; per length 15,000 assignments of 10 judgments (5 data +
5 model items per HIT; 250 overlap HITs per length done by 3 annotators, the others by
one), 450,000 judgments in all, by ~300 annotators of heavy-tailed (log-normal) activity
under the 200-HIT cap. Judgments follow a logistic model with an annotator intercept and
an annotator x kind slope (true CGD(data) ~ 0.73, EB-C ~ 1.02).

Steps (each timed; the machine's load average is printed beside them):

1. load the data into a temporary database with COPY (setup, not part of the target),
   then ``ANALYZE``: a deployment has these statistics too, since autovacuum analyzes a
   table once a tenth of it has changed (the planner then hashes HITs and assignments
   and scans judgments once);
2. ``load_judgments``, cold (the items query included, as on the first request after a
   start) and warm (item columns reused, as on a request after new judgments): each row
   packed server-side into one fixed-width bytea, all rows in one aggregate, read with
   ``numpy.frombuffer``;
3. ``compute_results`` with B = 10,000, the default unit (auto: this study is nested, so
   annotator; its overlap HITs are 5% of the assignments): every cell, interval and test,
   with and without exclusions (two wild cluster bootstraps with their inverted
   intervals, two permutation tests of 10,000, paper figures, agreement with its
   bootstrap, quality, sanity, planner);
4. ``study_results`` end to end (2 + 3), cold and warm: the 2-second target;
5. one length's EB-C interval by our annotator bootstrap and by
   ``scipy.stats.bootstrap`` (paired, vectorised, over the same per-annotator sums and
   counts, all annotators), percentile and BCa: times and intervals side by side;
6. the within-HIT permutation test with 10,000 permutations alone.

Run: ``python benchmarks/results.py`` (needs PostgreSQL at
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``, or ``--url``). The temporary
database is dropped at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from scipy import stats
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.migrate import upgrade
from app.results.schemas import ResultQuery
from app.results.stats import estimate_ebc, permutation_test
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study
from app.studytypes.nextword.queries import clear_item_cache, load_judgments
from app.studytypes.nextword.results import compute_results, study_results

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
K = 5


def simulate(
    rng: np.random.Generator,
    lengths=(10, 20, 30),
    assignments=15_000,
    overlap=250,
    annotators=300,
    cap=200,
):
    """Columns of HITs, items, assignments and judgments (ids from 1)."""
    per_len_hits = assignments - 2 * overlap  # overlap HITs take 3 assignments each
    n_hits = per_len_hits * len(lengths)
    hit_length = np.repeat(np.array(lengths), per_len_hits)
    hit_reps = np.ones(n_hits, np.int64)
    for li in range(len(lengths)):
        hit_reps[li * per_len_hits : li * per_len_hits + overlap] = 3
    n_asg = int(hit_reps.sum())

    # Heavy-tailed activity under the cap: log-normal weights, water-filled to the cap.
    w = rng.lognormal(0.0, 1.5, annotators)
    count = np.zeros(annotators, np.int64)
    left = n_asg
    free = np.ones(annotators, bool)
    while left > 0:
        share = np.where(free, w, 0) / w[free].sum()
        add = np.minimum(np.floor(share * left).astype(np.int64), cap - count)
        if add.sum() == 0:
            add[np.flatnonzero(free)[:left]] = 1
        count += add
        left -= int(add.sum())
        free = count < cap
    slots = rng.permutation(np.repeat(np.arange(annotators), count))
    asg_hit = np.repeat(np.arange(n_hits), hit_reps)
    # Three different annotators on each overlap HIT: swap duplicates away.
    starts = np.flatnonzero(hit_reps == 3)
    first = np.searchsorted(asg_hit, starts)
    for s in first:
        while len(set(slots[s : s + 3])) < 3:
            j = rng.integers(0, n_asg)
            if asg_hit[j] not in set(asg_hit[s : s + 3]) and slots[j] not in slots[s : s + 3]:
                dup = s + 2 if slots[s + 2] in slots[s : s + 2] else s + 1
                slots[dup], slots[j] = slots[j], slots[dup]

    # Judgments: 10 per assignment (positions 0-4 data, 5-9 model, shuffled per HIT).
    pos = np.tile(np.arange(10), n_asg)
    asg = np.repeat(np.arange(n_asg), 10)
    hit = asg_hit[asg]
    kind_of_pos = rng.permuted(np.tile(np.r_[np.zeros(5), np.ones(5)], (n_hits, 1)), axis=1)
    kind = kind_of_pos[hit, pos].astype(np.int64)
    item = hit * 10 + pos  # item ids 0..: one per (HIT, position)
    ann = slots[asg]
    u = rng.normal(0, 0.35, annotators)  # annotator intercept
    v = rng.normal(0, 0.15, annotators)  # annotator x kind slope
    base = np.log(0.73 / 0.27)
    shift = np.log(0.7446 / 0.2554) - base  # CGD(model) = 1.02 x 0.73
    p = 1 / (1 + np.exp(-(base + u[ann] + kind * (shift + v[ann]))))
    d = (rng.random(asg.size) < p).astype(np.int64)
    other = rng.choice(np.array([1, 2, 3, 4, -1]), size=asg.size, p=[0.35, 0.25, 0.15, 0.1, 0.15])
    rank = np.where(d == 0, 0, other)
    option = np.where(rank < 0, K, (rank - pos) % K)
    client_ms = rng.lognormal(np.log(4000), 0.6, asg.size).astype(np.int64)
    too_fast = client_ms < 1000
    return {
        "hit_length": hit_length,
        "hit_reps": hit_reps,
        "kind_of_pos": kind_of_pos,
        "asg_hit": asg_hit,
        "slots": slots,
        "annotators": annotators,
        "j_asg": asg,
        "j_pos": pos,
        "j_item": item,
        "j_rank": rank,
        "j_option": option,
        "j_d": d,
        "j_ms": client_ms,
        "j_fast": too_fast,
    }


def _copy(cur, table: str, cols: str, lines) -> None:
    with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
        buf = io.StringIO()
        for n, line in enumerate(lines, 1):
            buf.write(line)
            if n % 50_000 == 0:
                copy.write(buf.getvalue())
                buf = io.StringIO()
        copy.write(buf.getvalue())


# The tables `load` fills, in order; their ids are given (COPY), their sequences set after.
LOADED = ("annotators", "hits", "items", "hit_positions", "assignments", "judgments")


def load(engine, sim, study_id: int, offset: int = 0) -> None:
    """COPY the simulated study into the database, every id shifted by `offset` (so a second
    study can join a first); then each table's id sequence continues after its largest id,
    so rows inserted later (a test's) do not collide, and ``ANALYZE``."""
    o = offset
    now = datetime.now(UTC).isoformat()
    words = [f"w{r}" for r in range(K)]
    probs = [0.3, 0.2, 0.15, 0.1, 0.05]
    choices = json.dumps([{"word": w, "prob": pr} for w, pr in zip(words, probs, strict=True)])
    kinds = ("data", "model")
    n_hits = sim["hit_length"].size
    with engine.raw_connection() as raw:
        cur = raw.cursor()
        _copy(
            cur,
            "annotators",
            "id, study_id, channel, external_id, label, blocked, exclude_past, created_at",
            (
                f"{o + a + 1}\t{study_id}\tmturk\tW{a:04d}\tworker {a}\t{'t' if a < 2 else 'f'}\t"
                f"{'t' if a < 2 else 'f'}\t{now}\n"
                for a in range(sim["annotators"])
            ),
        )
        _copy(
            cur,
            "hits",
            "id, study_id, index, length, replicas, is_overlap, created_at",
            (
                f"{o + h + 1}\t{study_id}\t{h}\t{sim['hit_length'][h]}\t{sim['hit_reps'][h]}\t"
                f"{'t' if sim['hit_reps'][h] > 1 else 'f'}\t{now}\n"
                for h in range(n_hits)
            ),
        )
        true_word = np.random.default_rng(1).choice(
            ["w0", "w1", "w2", "elsewhere"], size=n_hits * 10, p=[0.3, 0.2, 0.1, 0.4]
        )
        _copy(
            cur,
            "items",
            "id, study_id, length, kind, index, is_attention, words, "
            "true_next_word, choices, provenance, created_at",
            (
                f"{o + i + 1}\t{study_id}\t{sim['hit_length'][i // 10]}\t"
                f"{kinds[int(sim['kind_of_pos'][i // 10, i % 10])]}\t{i}\tf\tsome prefix words\t"
                f"{true_word[i] if sim['kind_of_pos'][i // 10, i % 10] == 0 else chr(92) + 'N'}\t"
                f"{choices}\t{{}}\t{now}\n"
                for i in range(n_hits * 10)
            ),
        )
        _copy(
            cur,
            "hit_positions",
            "id, hit_id, position, item_id, choice_order",
            (
                f"{o + i + 1}\t{o + i // 10 + 1}\t{i % 10}\t{o + i + 1}\t"
                f"{json.dumps([(s + i % 10) % K for s in range(K)])}\n"
                for i in range(n_hits * 10)
            ),
        )
        n_asg = sim["asg_hit"].size
        _copy(
            cur,
            "assignments",
            "id, public_id, hit_id, annotator_id, status, leased_at, "
            "expires_at, submitted_at, late, bonus_cents",
            (
                f"{o + a + 1}\tasg{o + a}\t{o + sim['asg_hit'][a] + 1}\t{o + sim['slots'][a] + 1}\t"
                f"submitted\t"
                f"{now}\t{now}\t{now}\tf\t0\n"
                for a in range(n_asg)
            ),
        )
        cols = [
            sim[k].tolist()
            for k in ("j_asg", "j_pos", "j_item", "j_rank", "j_option", "j_d", "j_ms", "j_fast")
        ]
        _copy(
            cur,
            "judgments",
            "id, assignment_id, position, item_id, option, chosen_rank, "
            "chosen_word, d, client_ms, too_fast, late, created_at",
            (
                f"{o + n + 1}\t{o + a + 1}\t{p}\t{o + it + 1}\t{opt}\t"
                f"{chr(92) + 'N' if r < 0 else r}\t"
                f"{chr(92) + 'N' if r < 0 else 'w' + str(r)}\t{d}\t{ms}\t{'t' if fast else 'f'}\t"
                f"f\t{now}\n"
                for n, (a, p, it, r, opt, d, ms, fast) in enumerate(zip(*cols, strict=True))
            ),
        )
        for table in LOADED:
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
        raw.commit()
        cur.execute("ANALYZE")
        raw.commit()


@dataclass(frozen=True)
class Timing:
    """Best wall time of the runs, and this process's CPU time in that run (on a shared
    machine wall time includes waiting for a core; database time is in wall time only)."""

    wall: float
    cpu: float


def timed(fn, *args, repeat: int = 1, **kwargs):
    best, out = Timing(float("inf"), 0.0), None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        res = fn(*args, **kwargs)
        wall = time.perf_counter() - t
        if wall < best.wall:
            best, out = Timing(wall, time.process_time() - c), res
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=ADMIN_URL, help="PostgreSQL server (admin database)")
    ap.add_argument("--b", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N for the timed steps")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    name = f"ebc_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(args.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(args.url).set(database=name).render_as_string(hide_password=False)
    engine = build_engine(Settings(database_url=url, env="test"))
    try:
        with engine.begin() as conn:
            upgrade(conn)
        with make_sessionmaker(engine)() as session, session.begin():
            study = create_study(
                session,
                StudyConfig(
                    slug="bench",
                    title="benchmark",
                    model=ModelSection(name="gpt2"),
                    dataset=DatasetSection(path="wiki.test.tokens"),
                    prefix_lengths=[10, 20, 30],
                    items_per_cell=72_500,
                ),
            )
            study_id = study.id
        rng = np.random.default_rng(args.seed)
        t_setup, sim = timed(simulate, rng)
        t_copy, _ = timed(load, engine, sim, study_id)
        t_setup, t_copy = t_setup.wall, t_copy.wall
        n_j = sim["j_d"].size
        print(
            f"{n_j:,} judgments, {sim['asg_hit'].size:,} assignments, "
            f"{sim['hit_length'].size:,} HITs, {sim['annotators']} annotators "
            f"(busiest {np.bincount(sim['slots']).max()} HITs, median "
            f"{int(np.median(np.bincount(sim['slots'])))}); simulated in {t_setup:.1f} s, "
            f"COPY in {t_copy:.1f} s"
        )

        query = ResultQuery(b=args.b, seed=args.seed)  # unit auto: nested here, annotator
        rows: list[tuple[str, Timing, Timing | None, str]] = []
        with make_sessionmaker(engine)() as session:
            from app.models import Study

            study = session.get(Study, study_id)
            load_judgments(session, study)  # warm the connection

            def cold(fn, *a):
                clear_item_cache()  # items query included, as on a first request
                return fn(*a)

            t_cold, _ = timed(cold, load_judgments, session, study, repeat=args.repeat)
            t_load, j = timed(load_judgments, session, study, repeat=args.repeat)
            t_comp, res = timed(compute_results, study, j, query, repeat=args.repeat)
            t_full_cold, _ = timed(cold, study_results, session, study, query, repeat=args.repeat)
            t_full, res = timed(study_results, session, study, query, repeat=args.repeat)
            rows += [
                ("load_judgments, cold (judgments + items queries)", t_cold, None, ""),
                ("load_judgments, warm (item columns reused)", t_load, None, ""),
                ("compute_results: every figure, with and without exclusions", t_comp, None, ""),
                ("study_results = load + compute, cold", t_full_cold, None, "target < 2 s"),
                ("study_results = load + compute, warm", t_full, None, "target < 2 s"),
            ]

            # One length's EB-C interval: ours vs scipy on the same per-annotator sums.
            keep = ~j.attention
            t_ours, ours = timed(
                estimate_ebc,
                j.d,
                j.length,
                j.kind,
                j.annotator,
                j.hit,
                j.item,
                b=args.b,
                seed=args.seed,
                keep=keep,
                repeat=args.repeat,
            )
            length = 20
            ids, a = np.unique(j.annotator[keep], return_inverse=True)
            g = ids.size
            sel = j.length[keep] == length
            kd, dd = j.kind[keep], j.d[keep]

            def sums(kind_code: int) -> tuple[np.ndarray, np.ndarray]:
                m = sel & (kd == kind_code)
                return (
                    np.bincount(a[m], weights=dd[m], minlength=g),
                    np.bincount(a[m], minlength=g).astype(float),
                )

            sd, nd = sums(0)
            sm, nm = sums(1)

            def ratio(sd, nd, sm, nm, axis=-1):
                return (sm.sum(axis) / nm.sum(axis)) / (sd.sum(axis) / nd.sum(axis))

            out = {}
            for method in ("percentile", "BCa"):
                t_sp, sp = timed(
                    stats.bootstrap,
                    (sd, nd, sm, nm),
                    ratio,
                    paired=True,
                    vectorized=True,
                    n_resamples=args.b,
                    method=method,
                    rng=np.random.default_rng(args.seed),
                    repeat=args.repeat,
                )
                ci = "percentile" if method == "percentile" else "bca"
                t_us, us = timed(
                    estimate_ebc,
                    j.d,
                    j.length,
                    j.kind,
                    j.annotator,
                    j.hit,
                    j.item,
                    b=args.b,
                    seed=args.seed,
                    keep=keep,
                    ci=ci,
                    repeat=args.repeat,
                )
                q = us.ebc(length)
                out[method] = (q, sp)
                rows.append(
                    (
                        f"EB-C(l={length}) interval, {method}: all 3 lengths + trend (ours) "
                        "vs one length (scipy)",
                        t_us,
                        t_sp,
                        f"ours [{q.low:.4f}, {q.high:.4f}] se {q.se:.4f}; scipy "
                        f"[{sp.confidence_interval.low:.4f}, "
                        f"{sp.confidence_interval.high:.4f}] se {sp.standard_error:.4f}",
                    )
                )
            sub = j.take(keep)
            t_perm, perm = timed(
                permutation_test,
                sub.d,
                sub.length,
                sub.kind,
                sub.hit,
                sub.item,
                b=args.b,
                seed=args.seed,
                repeat=args.repeat,
            )
            rows.append(
                (
                    f"permutation test, {args.b:,} permutations, 3 lengths + pooled",
                    t_perm,
                    None,
                    f"p(l=20) = {perm[1].p_value:.4f}",
                )
            )
            q = ours.ebc(20)
            rows.append(
                (
                    "EB-C intervals + tests of EB-C = 1, wild (the default): all 3 lengths, "
                    "pooled + trend",
                    t_ours,
                    None,
                    f"[{q.low:.4f}, {q.high:.4f}] se {q.se:.4f} p {q.p_value:.4f}; "
                    f"G_eff {q.n_effective:.1f}",
                )
            )
            del t_ours, ours

        rs = res.results
        print(
            f"\nB = {args.b:,}, unit = auto ({rs.design}: {rs.unit}), best of {args.repeat}; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n"
        )
        print(
            "| step | ours: wall s (CPU s) | scipy.stats.bootstrap: wall s (CPU s) "
            "| scipy / ours (wall) | note |"
        )
        print("| --- | ---: | ---: | ---: | --- |")
        for step, t_us, t_sp, note in rows:
            sp = f"{t_sp.wall:.3f} ({t_sp.cpu:.3f})" if t_sp is not None else ""
            ratio_txt = f"{t_sp.wall / t_us.wall:.2f}" if t_sp is not None else ""
            print(f"| {step} | {t_us.wall:.3f} ({t_us.cpu:.3f}) | {sp} | {ratio_txt} | {note} |")
        print("\nresults (with exclusions):")
        for row in rs.table:
            e = row.ebc
            print(
                f"  l={row.length}: CGD(D) {row.cgd_data.estimate:.4f}  "
                f"CGD(M) {row.cgd_model.estimate:.4f}  EB-C {e.estimate:.4f} "
                f"[{e.low:.4f}, {e.high:.4f}]  n_ann {e.n_annotators}  "
                f"G_eff {e.n_effective:.1f}  deff {e.design_effect:.2f}  p {row.test.p_value:.4f} "
                f"(permutation, secondary: {row.permutation.p_value:.4f})"
            )
        print(f"  computed in {res.seconds:.3f} s (as reported by the service)")
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
