"""The API against its own OpenAPI document (schemathesis, property-based).

Every operation of /api/v1/openapi.json is called in-process (ASGI) with generated
parameters, valid and invalid, with an API token, on SQLite with a study of each type
built the way production builds it (HITs from build_hits, answers through the annotation
service). Each answer must be no server error and match the document: its status code,
content type, headers and body schema; invalid parameters are refused, and valid ones are
accepted unless the document itself says that they are refused: a results option that
the study's type refuses (`x-refused-by-study-types`, which must then be a 422 naming
it), or a plan no study can reach (`/plan`'s documented 422 `plan_infeasible`). So no
value is documented as taken and then refused. Examples per operation are bounded and
seeded, so the run stays under a minute and fails the same way twice.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import select

from app.annotation.leases import next_assignment
from app.auth.service import create_api_token
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import HitPosition, User
from app.studytypes.nextword.annotation import submit
from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
from app.web.api_results import REFUSED_BY
from tests.hits.factory import annotator, make_study
from tests.hits.ratings_factory import make_ratings_study

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
SLUG = "sch"
RATINGS_SLUG = "schr"  # a ratings study: the downloads a next-word study does not have
RATINGS_ONLY = (
    "/samples.{fmt}",
    "/results/ebm.{fmt}",
    "/results/ebm_gap.{fmt}",
    "/ratings.{fmt}",
    "/ratings_table.{fmt}",
)
TYPE_OF = {SLUG: "nextword", RATINGS_SLUG: "ratings"}
EXAMPLES = 30  # per operation: 14 operations in about 30 s on this machine


def _seed(session) -> str:
    """A collecting study with answers from three annotators, a ratings study with the
    ratings of two; returns an API token."""
    study = make_study(session, slug=SLUG, lengths=(10,), per_cell=15, min_ms_per_item=0)
    rng = random.Random(11)
    for i in range(3):
        person = annotator(session, study, f"a{i}")
        work = next_assignment(session, person).assignment
        orders = session.execute(
            select(HitPosition.position, HitPosition.choice_order).where(
                HitPosition.hit_id == work.hit_id
            )
        ).all()
        answers = {p: rng.randrange(len(order)) for p, order in orders}
        submit(session, person, work.public_id, answers, {p: 2500 for p in answers})
    rated = make_ratings_study(
        session, slug=RATINGS_SLUG, per_cell=5, replicas=2, min_seconds_per_item=0
    )
    for i in range(2):
        rater = annotator(session, rated, f"r{i}")
        work = next_assignment(session, rater).assignment
        for position in range(11):
            for step in (QUALITY, CONSISTENCY):
                rate(session, rater, RatingPost(work.public_id, position, step, "3.5", 2500))
    user = User(username="ada", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    return create_api_token(session, user, "schemathesis").secret


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    db = tmp_path_factory.mktemp("schemathesis") / "ebc.db"
    config = Settings(database_url=f"sqlite:///{db}", env="test")
    engine = build_engine(config)
    with engine.begin() as conn:
        upgrade(conn)
    with make_sessionmaker(engine)() as session, session.begin():
        secret = _seed(session)
    engine.dispose()
    app = create_app(config)
    with TestClient(app):  # runs the lifespan: the app's engine and sessions
        yield app, {"Authorization": f"Bearer {secret}"}


def _checks(case) -> list:
    """The checks for `case`. A query parameter the operation does not declare (e.g. one
    with an empty name, ``?=0``) is ignored by the API, as HTTP frameworks do, so a
    negative case that carries one is not held to "rejected" (schemathesis counts the
    extra parameter as the case's negation; see schemathesis PR 4762 for the same false
    positive between locations). Every other check still runs on it."""
    declared = {p.name for p in case.operation.query} if case.operation.query else set()
    if set(case.query or {}) - declared:
        return [c for c in CHECKS if c is not negative_data_rejection]
    return CHECKS


def _refused_for_type(case) -> set[str]:
    """The options of `case` that the document says its study's type refuses."""
    kind = TYPE_OF.get((case.path_parameters or {}).get("slug"))
    refused = set()
    for parameter in case.operation.query or []:
        if kind in parameter.definition.get(REFUSED_BY, ()) and parameter.name in (
            case.query or {}
        ):
            refused.add(parameter.name)
    return refused


def _documented_refusal(case, response) -> bool:
    """A refusal the document announces, as it announces it (else an AssertionError)."""
    refused = _refused_for_type(case)
    if refused:  # the type refuses these options: a 422 naming them (or its 404 first:
        # a route the type does not have at all)
        assert response.status_code in (404, 422), (case.query, response.text[:300])
        if response.status_code == 404:
            return True
        named = {e["loc"][1] for e in response.json()["errors"]}
        assert named <= refused | set(case.query), (named, refused)
        return True
    if response.status_code == 422 and case.operation.path.endswith("/plan"):
        return response.json()["errors"][0]["type"] == "plan_infeasible"
    return False


def test_the_api_matches_its_document(api):
    """Each operation runs as a Hypothesis test of its own (schemathesis's strategies; its
    pytest plug-in for fixtures does not support this pytest); every failing one is named."""
    app, auth = api
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14  # every route of /api/v1 and the probes
    failures = []
    answered: Counter[tuple[str, int]] = Counter()
    for operation in operations:
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
        if not (operation.query or operation.path_parameters):
            modes = [GenerationMode.POSITIVE]  # nothing to make invalid but the token

        @given(case=st.one_of(*(operation.as_strategy(generation_mode=m) for m in modes)))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case):
            if "slug" in (case.path_parameters or {}) and _coin(case):
                # The seeded studies: answers with data (now and then the other type's).
                ratings = case.operation.path.endswith(RATINGS_ONLY) != _coin(case, 0.15)
                case.path_parameters["slug"] = RATINGS_SLUG if ratings else SLUG
            response = case.call(headers=auth)
            checks = _checks(case)
            positive = case.meta is not None and case.meta.generation.mode.is_positive
            if positive and not _documented_refusal(case, response):
                checks = [*checks, positive_data_acceptance]
            case.validate_response(response, checks=checks)
            answered[case.operation.label, response.status_code // 100] += 1

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # the others still run
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
    # Every operation also answered with data (the seeded study), not only with errors.
    assert {label for label, kind in answered if kind == 2} == {op.label for op in operations}


def _coin(case, p: float = 0.7) -> bool:
    return random.Random(repr((p, sorted((case.query or {}).items())))).random() < p
