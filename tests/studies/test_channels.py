"""The study file's crowd channels (opt-in, http(s) redirects only) and revision 0004's data
step: studies that already had panel or MTurk annotators keep those channels on."""

import pytest
from pydantic import ValidationError
from sqlalchemy import select, text

from app.db import build_engine
from app.migrate import downgrade, upgrade
from app.studies.schemas import ChannelSection, MTurkSection, ProlificSection


def test_channels_are_off_unless_enabled():
    channels = ChannelSection()
    assert not channels.prolific.enabled and not channels.mturk.enabled
    on = ChannelSection.model_validate({"prolific": {"enabled": True, "study_id": "a" * 24}})
    assert on.prolific.enabled and on.prolific.study_id == "a" * 24


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:x",
        "//evil.example/x",
        "https:/evil.example",
        "https://",
        "https://ex ample.com",
        "ftp://example.com/x",
    ],
)
def test_a_panel_redirect_must_be_http(url):
    with pytest.raises(ValidationError, match="http"):
        ProlificSection(redirect_url=url)


def test_http_redirects_and_ids_that_fit():
    ok = ProlificSection(redirect_url="https://app.prolific.com/submissions/complete?cc=C0DE")
    assert ok.redirect_url.startswith("https://")
    assert ProlificSection(redirect_url="http://localhost:8080/done").redirect_url
    for bad in ("x" * 65, "a b", "a\x00b", ""):
        with pytest.raises(ValidationError):
            ProlificSection(study_id=bad)
    with pytest.raises(ValidationError, match="entry key"):
        ProlificSection(participant_param="key")  # the entry key's own parameter
    with pytest.raises(ValidationError):
        ProlificSection(session_param="SESSION ID")
    with pytest.raises(ValidationError):
        MTurkSection(enabled=True, unknown=1)


def _insert(conn, channels: str, slug: str) -> int:
    conn.execute(
        text(
            "INSERT INTO studies (slug, title, description, task, status, model_name, "
            "dataset_path, dataset_format, prefix_lengths, kinds, items_per_cell, top_k, "
            "prompt_words, decoding, special_top1, seed, hit_layout, replicas, overlap_share, "
            "overlap_replicas, per_annotator_cap, lease_seconds, min_ms_per_item, exclusions, "
            "channels, reward_cents, platform_fee, created_at, updated_at) "
            "VALUES (:slug, 't', '', 'lm', "
            "'collecting', 'm', 'd', 'text', '[10]', '[\"data\", \"model\"]', 10, 5, 0, '{}', "
            '\'skip\', 0, \'{"mix": {"data": 5, "model": 5}, "attention": 1}\', 1, 0.0, 3, '
            "200, 1800, 1000, '{}', :channels, 0, 0.0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
        ),
        {"slug": slug, "channels": channels},
    )
    return conn.execute(text("SELECT id FROM studies WHERE slug = :s"), {"s": slug}).scalar_one()


def test_revision_0004_keeps_channels_in_use_on(empty_db):
    engine = build_engine(empty_db.settings())
    try:
        with engine.begin() as conn:
            upgrade(conn, "0003")
            crowd = _insert(
                conn,
                '{"panel": {"redirect_url": "javascript:alert(1)"}, "mturk": {"sandbox": true}}',
                "crowd",
            )
            local = _insert(conn, '{"panel": {"completion_code": "X"}}', "local")
            conn.execute(
                text(
                    'INSERT INTO hits (study_id, "index", length, replicas, is_overlap, '
                    "leased_count, submitted_count, created_at) VALUES (:s, 0, 10, 3, false, 0, 0, "
                    "CURRENT_TIMESTAMP)"
                ),
                {"s": crowd},
            )
            hit = conn.execute(text("SELECT id FROM hits")).scalar_one()
            for n, channel in enumerate(("panel", "mturk", "mturk", "local")):
                conn.execute(
                    text(
                        "INSERT INTO annotators (study_id, channel, external_id, invite_nonce, "
                        "blocked, exclude_past, created_at) VALUES (:s, :c, :e, :e, false, "
                        "false, CURRENT_TIMESTAMP)"
                    ),
                    {"s": crowd, "c": channel, "e": f"w{n}"},
                )
            rows = conn.execute(text("SELECT id, channel FROM annotators ORDER BY id")).all()
            reviews = {rows[1][0]: "approved", rows[2][0]: None, rows[3][0]: None}
            for annotator_id, review in reviews.items():
                conn.execute(
                    text(
                        "INSERT INTO assignments (public_id, hit_id, annotator_id, status, "
                        "leased_at, expires_at, late, review_status, bonus_cents) VALUES "
                        "(:p, :h, :a, 'submitted', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, false, "
                        ":r, 0)"
                    ),
                    {"p": f"pub{annotator_id}", "h": hit, "a": annotator_id, "r": review},
                )
            conn.execute(
                text(
                    'INSERT INTO items (study_id, length, kind, "index", is_attention, words, '
                    "choices, provenance, created_at) VALUES (:s, 10, 'data', 0, false, 'a b c', "
                    "'[]', '{}', CURRENT_TIMESTAMP)"
                ),
                {"s": crowd},
            )
            item = conn.execute(text("SELECT id FROM items")).scalar_one()
            for assignment_id in conn.execute(text("SELECT id FROM assignments")).scalars():
                conn.execute(
                    text(
                        "INSERT INTO judgments (assignment_id, position, item_id, option, d, "
                        "too_fast, late, created_at) VALUES (:a, 0, :i, 0, 0.0, false, false, "
                        "CURRENT_TIMESTAMP)"
                    ),
                    {"a": assignment_id, "i": item},
                )
        with engine.begin() as conn:
            upgrade(conn)
            studies = _channels(conn)
            # At the head, `panel` is Prolific's one name (revision 0009).
            assert studies["crowd"]["prolific"]["enabled"] and studies["crowd"]["mturk"]["enabled"]
            assert studies["crowd"]["prolific"]["redirect_url"] is None  # not http(s): dropped
            assert studies["crowd"]["mturk"]["sandbox"] is True
            assert not studies["local"]["prolific"]["enabled"]
            assert not studies["local"]["mturk"]["enabled"]
            assert studies["local"]["prolific"]["completion_code"] == "X"
            flags = dict(
                conn.execute(text("SELECT annotator_id, unverified FROM assignments")).all()
            )
            # Every assignment is still there (on SQLite a table copy of `annotators` used to
            # delete them all through ON DELETE CASCADE); MTurk work not approved through
            # the API counts once it is confirmed.
            assert {k: bool(v) for k, v in flags.items()} == {
                rows[1][0]: False,
                rows[2][0]: True,
                rows[3][0]: False,
            }
            assert local  # (a study without crowd annotators)
            # ... and so is every judgment (a table copy of `assignments`, which a SQL-expression
            # server default makes batch mode do on SQLite, deleted them all the same way).
            assert conn.execute(text("SELECT count(*) FROM judgments")).scalar_one() == 3
        with engine.begin() as conn:
            downgrade(conn, "0003")
            studies = _channels(conn)
            assert "enabled" not in studies["crowd"]["panel"]
            assert "enabled" not in studies["local"]["mturk"]
            assert conn.execute(text("SELECT count(*) FROM assignments")).scalar_one() == 3
            assert conn.execute(text("SELECT count(*) FROM judgments")).scalar_one() == 3
    finally:
        engine.dispose()


def _channels(conn) -> dict:
    import json

    rows = conn.execute(select(text("slug"), text("channels")).select_from(text("studies")))
    return {slug: json.loads(c) if isinstance(c, str) else c for slug, c in rows}
