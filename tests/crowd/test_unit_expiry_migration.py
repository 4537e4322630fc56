"""Revision 0008 on SQLite and PostgreSQL: the published units of existing MTurk postings
are given the time MTurk takes them down (the posting's lifetime from their publishing,
or from the posting's last finished reopen); other units never lapse."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.db import build_engine, make_sessionmaker, unit_of_work
from app.migrate import downgrade, upgrade
from app.models import CrowdCall, CrowdHit, CrowdPosting, Hit, utcnow
from tests.crowd.platforms.mturk.test_end_to_end import crowd_study


def test_revision_0008_gives_published_mturk_units_their_lapse_time(empty_db):
    engine = build_engine(empty_db.settings())
    t0 = utcnow().replace(microsecond=0) - timedelta(days=10)
    reopened = t0 + timedelta(days=6)
    try:
        with engine.begin() as conn:
            upgrade(conn)
        make_session = make_sessionmaker(engine)
        with unit_of_work(make_session) as session:
            study = crowd_study(session)
            hits = session.scalars(select(Hit.id).where(Hit.study_id == study.id)).all()
            postings = {}
            for provider, environment, days in (
                ("mturk", "sandbox", 2),
                ("mturk", "production", 0.5),
                ("local", "local", 7),
            ):
                posting = CrowdPosting(
                    study_id=study.id,
                    provider=provider,
                    environment=environment,
                    external_id=f"{provider}-{environment}",
                    settings={"lifetime_days": days},
                    status="published",
                )
                session.add(posting)
                session.flush()
                postings[environment] = posting.id
                for n, (hit_id, status) in enumerate(
                    zip(hits, ("published", "published", "expired", "pending"), strict=True)
                ):
                    session.add(
                        CrowdHit(
                            posting_id=posting.id,
                            hit_id=hit_id,
                            request_token=f"{environment}-{n}",
                            external_hit_id=f"{environment}-H{n}" if n < 3 else None,
                            max_assignments=1,
                            status=status,
                            published_at=t0 + timedelta(days=n) if n < 3 else None,
                        )
                    )
            for kind, status, when in (
                ("reopen", "ok", reopened),
                ("reopen", "failed", reopened + timedelta(days=1)),  # refused: nothing done
            ):
                session.add(
                    CrowdCall(
                        posting_id=postings["sandbox"],
                        kind=kind,
                        request_token=f"{kind}-{status}",
                        status=status,
                        finished_at=when,
                    )
                )
        with engine.begin() as conn:
            downgrade(conn, "0007")
            upgrade(conn)
        with unit_of_work(make_session) as session:
            got = {
                (environment, n): session.scalar(
                    select(CrowdHit.expires_at).where(
                        CrowdHit.posting_id == posting_id,
                        CrowdHit.request_token == f"{environment}-{n}",
                    )
                )
                for environment, posting_id in postings.items()
                for n in range(4)
            }
        day = timedelta(days=1)
        assert got == {
            # Reopened on day 6 for 2 days: both published units lapse on day 8.
            ("sandbox", 0): reopened + 2 * day,
            ("sandbox", 1): reopened + 2 * day,
            # Never reopened: half a day from each unit's publishing.
            ("production", 0): t0 + day / 2,
            ("production", 1): t0 + day + day / 2,
            **{(env, 2): None for env in postings},  # expired
            **{(env, 3): None for env in postings},  # never published
            ("local", 0): None,  # local units never lapse
            ("local", 1): None,
        }
    finally:
        engine.dispose()
