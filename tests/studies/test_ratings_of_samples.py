"""The ratings study made from a study's forced-prefix samples (`create_ratings_of_samples`)
against a real database: it is the source's owner's, one who asks without owning the source
gets no more of the copy than they have of the source, and it is pinned to the source's
dataset."""

from __future__ import annotations

from app.models import StudyMember
from app.studies.samples import create_ratings_of_samples
from app.studies.service import Access, share_study, study_access
from tests.hits.factory import make_study
from tests.web.accounts import make_user

SHA = "ab" * 32


def _source(session):
    bob, carol, dave, root = (
        make_user(session, name, is_admin=name == "root")
        for name in ("bob", "carol", "dave", "root")
    )
    study = make_study(session, slug="src", lengths=(3,), per_cell=4, build=False)
    study.samples = {"per_kind": 2}
    study.created_by_id = bob.id
    study.dataset_sha256 = SHA
    share_study(session, study, carol, "manage")
    share_study(session, study, dave, "view")
    session.flush()
    return study, bob, carol, dave, root


def _members(session, study) -> dict[int, str]:
    rows = session.query(StudyMember).filter(StudyMember.study_id == study.id)
    return {m.user_id: m.role for m in rows}


def test_a_manager_asking_gets_a_manager_of_the_owners_copy(session):
    study, bob, carol, dave, _ = _source(session)
    made = create_ratings_of_samples(session, study, "rated", carol, by=carol)
    assert made.created_by_id == bob.id and made.dataset_sha256 == SHA
    assert _members(session, made) == {carol.id: "manage"}
    assert study_access(session, made, carol) is Access.manage
    assert study_access(session, made, bob) is Access.share
    assert study_access(session, made, dave) is None


def test_the_owner_and_an_administrator_asking_add_no_member(session):
    study, bob, _, _, root = _source(session)
    mine = create_ratings_of_samples(session, study, "rated", bob, by=bob)
    admins = create_ratings_of_samples(session, study, "rated-2", root, by=root)
    for made in (mine, admins):
        assert made.created_by_id == bob.id and made.dataset_sha256 == SHA
        assert _members(session, made) == {}
