"""Per-study access: owners, members (view, manage), administrators; the API's listing;
and the CLI that shares studies and revokes invite links (the operator's tool, which acts
as an administrator)."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from app.annotation.identities import read_invite_token
from app.auth.service import create_api_token, create_user
from app.cli import cli
from app.db import build_engine, make_sessionmaker
from app.models import Annotator, AuditEvent, Study, StudyMember
from app.studies.service import (
    Access,
    StudyError,
    set_owner,
    share_study,
    study_access,
    unshare_study,
    visible_studies,
)
from tests.hits.factory import annotator, make_study

PASSWORD = "correct horse battery"


@pytest.fixture
def people(session):
    made = {
        name: create_user(session, name, PASSWORD, is_admin=name == "root")
        for name in ("owner", "carol", "dave", "root")
    }
    session.flush()
    return made


def _slugs(studies):
    return [s.slug for s in studies]


def test_owner_members_and_admins(session, people):
    owner, carol, dave, root = (people[n] for n in ("owner", "carol", "dave", "root"))
    mine = make_study(session, slug="mine", lengths=(10,), per_cell=5, build=False)
    mine.created_by_id = owner.id
    orphan = make_study(session, slug="orphan", lengths=(10,), per_cell=5, build=False)
    session.flush()
    assert study_access(session, mine, owner) is Access.share
    assert study_access(session, mine, carol) is None
    assert study_access(session, orphan, owner) is None  # no owner: administrators only
    assert study_access(session, orphan, root) is Access.share
    assert _slugs(visible_studies(session, carol)) == []
    assert sorted(_slugs(visible_studies(session, root))) == ["mine", "orphan"]

    share_study(session, mine, carol, "view")
    assert study_access(session, mine, carol) is Access.view
    assert _slugs(visible_studies(session, carol)) == ["mine"]
    share_study(session, mine, carol, "manage")  # a second share changes the role
    assert study_access(session, mine, carol) is Access.manage
    assert len(session.scalars(select(StudyMember)).all()) == 1
    with pytest.raises(StudyError, match="the role is one of view, manage"):
        share_study(session, mine, dave, "admin")
    with pytest.raises(StudyError, match="owns mine"):
        share_study(session, mine, owner, "view")
    with pytest.raises(StudyError, match="not a member"):
        unshare_study(session, mine, dave)
    unshare_study(session, mine, carol)
    assert study_access(session, mine, carol) is None

    share_study(session, orphan, dave, "view")
    set_owner(session, orphan, dave)  # the membership is folded into ownership
    assert study_access(session, orphan, dave) is Access.share
    assert session.scalars(select(StudyMember)).all() == []


def test_the_api_lists_and_opens_only_what_the_token_may_see(client, session, people):
    owner, carol, root = people["owner"], people["carol"], people["root"]
    for slug, by in (("mine", owner), ("theirs", root)):
        study = make_study(session, slug=slug, lengths=(10,), per_cell=5)
        study.created_by_id = by.id
    share_study(session, session.scalar(select(Study).where(Study.slug == "theirs")), carol, "view")
    tokens = {u.username: create_api_token(session, u, "t").secret for u in (owner, carol, root)}
    session.commit()

    def get(user, path):
        return client.get(path, headers={"Authorization": f"Bearer {tokens[user]}"})

    assert [s["slug"] for s in get("owner", "/api/v1/studies").json()] == ["mine"]
    assert [s["slug"] for s in get("carol", "/api/v1/studies").json()] == ["theirs"]
    assert sorted(s["slug"] for s in get("root", "/api/v1/studies").json()) == ["mine", "theirs"]
    assert get("owner", "/api/v1/studies/theirs").status_code == 404
    assert get("owner", "/api/v1/studies/theirs").json()["detail"] == "no study 'theirs'"
    assert get("carol", "/api/v1/studies/theirs/items.csv").status_code == 200
    assert get("carol", "/api/v1/studies/mine/judgments.csv").status_code == 404


# -- the CLI -----------------------------------------------------------------------------

STUDY_FILE = """
slug = "cli-study"
title = "CLI study"
prefix_lengths = [10]
items_per_cell = 5
[model]
name = "gpt2"
[dataset]
path = "wiki.txt"
"""


@pytest.fixture
def cli_db(migrated_copy, monkeypatch):
    """A committed database: the CLI owns its transactions."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        for name in ("bob", "carol"):
            create_user(s, name, PASSWORD)
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    yield make_sessionmaker(engine)
    engine.dispose()


def ebc(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.sqlite  # the CLI calls the services tested above on both backends
def test_cli_shares_and_unshares_studies(cli_db, tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY_FILE, encoding="utf-8")
    out = ebc("study", "create", "--config", str(path), "--owner", "bob")
    assert out.exit_code == 0 and "owned by bob" in out.output
    assert ebc("study", "list", "--user", "bob").output.split("\t")[-1].strip() == "share"
    assert ebc("study", "list", "--user", "carol").output == ""

    out = ebc("study", "share", "cli-study", "carol", "--role", "view")
    assert out.exit_code == 0, out.output
    assert ebc("study", "list", "--user", "carol").output.split("\t")[-1].strip() == "view"
    assert ebc("study", "members", "cli-study").output == "bob\towner\ncarol\tview\n"
    for args, message in (
        (("share", "cli-study", "carol", "--role", "owner"), "the role is one of view, manage"),
        (("share", "cli-study", "bob"), "bob owns cli-study"),
        (("share", "cli-study", "nobody"), "no user 'nobody'"),
        (("share", "nope", "carol"), "no study 'nope'"),
        (("unshare", "cli-study", "bob"), "bob is not a member"),
    ):
        out = ebc("study", *args)
        assert out.exit_code == 1 and message in out.output, (args, out.output)
    assert ebc("study", "unshare", "cli-study", "carol").exit_code == 0
    assert ebc("study", "list", "--user", "carol").output == ""
    assert ebc("study", "set-owner", "cli-study", "carol").exit_code == 0
    assert ebc("study", "members", "cli-study").output == "carol\towner\n"
    with cli_db() as s:
        actions = s.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions == ["study_created", "study_shared", "study_unshared", "study_owner_set"]


@pytest.mark.sqlite
def test_cli_revokes_and_reissues_invite_links(cli_db, settings):
    with cli_db() as s, s.begin():
        study = make_study(s, slug="links", lengths=(10,), per_cell=5)
        first = annotator(s, study, "ann")
        annotator(s, study, "twin")
        annotator(s, study, "twin")
        first_id, old_nonce = first.id, first.invite_nonce
    out = ebc("annotators", "revoke", "links", "ann")
    assert out.exit_code == 0 and "revoked the invite link of ann" in out.output
    with cli_db() as s:
        gone = s.get(Annotator, first_id)
        assert gone.invite_nonce is None and gone.revoked_at is not None
    out = ebc("annotators", "reissue", "links", str(first_id))
    assert out.exit_code == 0, out.output
    label, link = out.output.strip().split("\t")
    new_nonce = read_invite_token(settings.secret_key, link.rsplit("/a/", 1)[1]).nonce
    with cli_db() as s:
        again = s.get(Annotator, first_id)
        assert label == "ann" and again.invite_nonce == new_nonce != old_nonce
        assert again.revoked_at is None
    out = ebc("annotators", "revoke", "links", "twin")
    assert out.exit_code == 1 and "2 annotators are called 'twin'" in out.output
    out = ebc("annotators", "revoke", "links", "nobody")
    assert out.exit_code == 1 and "no annotator 'nobody'" in out.output
    # Not an id: other scripts' digits and numbers past the key's range are labels here.
    for ref in ("²", "9" * 30):
        out = ebc("annotators", "revoke", "links", ref)
        assert out.exit_code == 1 and f"no annotator {ref!r}" in out.output, out.output
