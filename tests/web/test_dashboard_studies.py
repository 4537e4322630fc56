"""Creating studies from the form and from a study file; the study page and its actions."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.models import AuditEvent, Item, PrecomputeJob, Study, StudyStatus
from app.precompute.service import claim_shard, fail_shard
from tests.hits.factory import make_study
from tests.web.accounts import write_dataset

VALID = {
    "slug": "wiki",
    "title": "GPT-2 on wiki-103",
    "task": "lm",
    "model.name": "gpt2",
    "dataset.path": "data/wiki.test.tokens",
    "dataset.format": "text",
    "prefix_lengths": "10, 20",
    "kinds": ["data", "model"],
    "items_per_cell": "30",
    "top_k": "5",
    "seed": "3",
    "hits.mix": "data=5, model=5",
    "hits.attention": "1",
    "annotators.per_annotator_cap": "50",
    "exclusions.blocked": "on",
    "exclusions.too_fast": "on",
}

# (field, bad value, part of the message shown next to that field)
INVALID = [
    ("slug", "Not a slug!", "lowercase letters"),
    ("slug", "new", "'new' is reserved"),  # GET /dashboard/studies/new is the form
    ("slug", "api", "'api' is reserved"),
    ("title", "", "required"),
    ("model.name", "", "required"),
    ("dataset.path", "", "required"),
    ("prefix_lengths", "10, ten", "valid integer"),
    ("prefix_lengths", "10, 10", "distinct"),
    ("prefix_lengths", "", "required"),
    ("kinds", ["data"], "needs both 'data' and 'model'"),
    ("items_per_cell", "0", "greater than or equal to 1"),
    ("top_k", "1", "greater than or equal to 2"),
    ("decoding.temperature", "0", "greater than 0"),
    ("decoding.top_p", "1.5", "less than or equal to 1"),
    ("hits.mix", "data=5, model", "kind=count"),
    ("hits.mix", "data=5, model=5, random=1", "kinds the study does not make"),
    ("hits.replicas", "0", "greater than or equal to 1"),
    ("hits.overlap_share", "2", "less than or equal to 1"),
    ("annotators.per_annotator_cap", "0", "greater than or equal to 1"),
    ("annotators.lease_minutes", "-1", "greater than 0"),
    ("payment.reward_cents", "-5", "greater than or equal to 0"),
    ("prompt_words", "x", "valid integer"),
]


def _post(client, data, files=None):
    return client.post(
        "/dashboard/studies",
        data={"csrf_token": client.csrf, **data},
        files=files or {"dataset_file": ("", b"")},
        follow_redirects=False,
    )


def _count(session, model) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(model))


def test_the_form_shows_each_invalid_fields_message_and_creates_nothing(logged_in, session):
    for name, value, message in INVALID:
        r = _post(logged_in, {**VALID, name: value})
        assert r.status_code == 400, name
        assert r.template.name == "study_new.html"
        errors = r.context["errors"]
        assert message in errors.get(name, ""), (name, errors)
        # The message sits next to its field, the value is kept for correction.
        assert f'id="e-{name}"' in r.text, name
    assert _count(session, Study) == 0
    assert _count(session, AuditEvent) == 1  # the login only


def test_the_form_creates_a_study_with_an_uploaded_dataset(logged_in, session, settings):
    content = b"the quick brown fox jumps over the lazy dog\n" * 3
    r = _post(
        logged_in,
        {**VALID, "dataset.path": "", "kinds_extra": "data_corrupted@0.3"},
        files={"dataset_file": ("../../evil/wiki.txt", content)},
    )
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/studies/wiki"
    study = session.scalar(select(Study).where(Study.slug == "wiki"))
    assert study.prefix_lengths == [10, 20] and study.per_annotator_cap == 50
    assert study.kinds == ["data", "model", "data_corrupted@0.3"]
    path = Path(study.dataset_path)
    assert path.name == "wiki.txt" and path.parent == (settings.data_dir / "uploads/wiki").resolve()
    assert path.read_bytes() == content
    assert study.dataset_sha256 == hashlib.sha256(content).hexdigest()
    page = logged_in.get(r.headers["location"])
    assert "Study wiki created" in page.text and "study_created" in page.text
    # The same slug again: refused on the slug field, nothing more created.
    again = _post(logged_in, VALID)
    assert again.status_code == 400 and "already exists" in again.context["errors"]["slug"]
    assert _count(session, Study) == 1


STUDY_FILE = b"""
slug = "from-file"
title = "From a file"
prefix_lengths = [10]
items_per_cell = 20
[model]
name = "gpt2"
[dataset]
path = "data/wiki.test.tokens"
"""


def test_a_study_file_creates_a_study_or_says_why_not(logged_in, session):
    def upload(body):
        return logged_in.post(
            "/dashboard/studies/upload",
            data={"csrf_token": logged_in.csrf},
            files={"study_file": ("study.toml", body)},
            follow_redirects=False,
        )

    bad = upload(STUDY_FILE.replace(b"items_per_cell = 20", b"items_per_cell = 0"))
    assert bad.status_code == 400 and "items_per_cell" in bad.context["errors"]["study_file"]
    assert upload(b"slug = [").status_code == 400
    assert _count(session, Study) == 0
    ok = upload(STUDY_FILE)
    assert ok.status_code == 303 and ok.headers["location"] == "/dashboard/studies/from-file"


def test_a_reserved_slug_is_refused_but_a_stored_one_still_loads(logged_in, session):
    r = logged_in.post(
        "/dashboard/studies/upload",
        data={"csrf_token": logged_in.csrf},
        files={"study_file": ("s.toml", STUDY_FILE.replace(b'"from-file"', b'"upload"'))},
    )
    assert r.status_code == 400 and "'upload' is reserved" in r.context["errors"]["study_file"]
    assert _count(session, Study) == 0
    # A study that took a word before it was reserved keeps working.
    make_study(session, slug="legacy", lengths=(10,), per_cell=5).slug = "dashboard"
    session.commit()
    page = logged_in.get("/dashboard/studies/dashboard")
    assert page.status_code == 200 and page.context["config"]["slug"] == "dashboard"


def test_study_page_actions_and_audit_log(logged_in, session, tmp_path):
    # Planning checks the dataset, so this study's must exist.
    r = _post(logged_in, {**VALID, "dataset.path": str(write_dataset(tmp_path / "wiki.txt"))})
    assert r.status_code == 303
    page = logged_in.get("/dashboard/studies/wiki")
    assert page.template.name == "study.html" and 'id="plan-precompute"' in page.text
    assert '/static/dashboard.js" defer' in page.text
    r = logged_in.post("/dashboard/studies/wiki/precompute", data={"csrf_token": logged_in.csrf})
    assert r.status_code == 200 and "Precompute job" in r.text
    study = session.scalar(select(Study).where(Study.slug == "wiki"))
    session.refresh(study)
    assert study.status is StudyStatus.precomputing
    job = session.scalar(select(PrecomputeJob).where(PrecomputeJob.study_id == study.id))
    # A worker's failed shard shows up, with its error, in the live JSON.
    shard = claim_shard(session, "w1", lease_seconds=60, study_id=study.id)
    fail_shard(session, shard.id, "w1", "Traceback: <boom> & bust")
    session.commit()
    live = logged_in.get("/dashboard/studies/wiki/progress.json")
    body = live.json()
    assert body["status"] == "precomputing" and body["live"] is True
    assert f"Job {job.id}" in body["html"] and "&lt;boom&gt; &amp; bust" in body["html"]
    assert "Cancel precompute" in body["html"]
    r = logged_in.post(
        "/dashboard/studies/wiki/precompute/cancel", data={"csrf_token": logged_in.csrf}
    )
    assert "cancelled" in r.text
    r = logged_in.post("/dashboard/studies/wiki/close", data={"csrf_token": logged_in.csrf})
    assert "The study is closed" in r.text and 'id="reopen-study"' in r.text
    r = logged_in.post("/dashboard/studies/wiki/reopen", data={"csrf_token": logged_in.csrf})
    assert "open again (draft)" in r.text
    actions = [row[2] for row in _audit(r.text)]
    assert actions == [
        "study_reopened",
        "study_closed",
        "precompute_cancelled",
        "precompute_planned",
        "study_created",
    ]


def _audit(html: str) -> list[list[str]]:
    import re

    table = html.split('id="audit"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", table, re.S)
    return [re.split(r"</td>\s*<td[^>]*>", row) for row in rows]


def test_collection_progress_build_hits_and_item_browser(logged_in, session):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10, build=False)
    study.status = StudyStatus.ready
    session.add(
        Item(
            study_id=study.id,
            length=10,
            kind="data",
            index=99,
            words="<script>alert(1)</script> " * 10,
            true_next_word="<i>true</i>",
            choices=[{"word": "<b>top</b>", "prob": 0.61}]
            + [{"word": f"w{i}", "prob": 0.01} for i in range(4)],
            provenance={},
        )
    )
    session.commit()
    r = logged_in.post("/dashboard/studies/s1/hits", data={"csrf_token": logged_in.csrf})
    assert r.status_code == 200 and "2 HITs built" in r.text
    session.refresh(study)
    assert study.status is StudyStatus.collecting
    cells = {(c.length, c.kind): c for c in r.context["collection"]}
    assert cells[(10, "data")].target == 10 and cells[(10, "data")].judgments == 0
    assert r.context["hits"].hits == 2 and len(r.context["hit_rows"]) == 2
    items = logged_in.get("/dashboard/studies/s1/items?kind=data&attention=no")
    assert items.context["total"] == 11
    assert "<script>alert(1)</script>" not in items.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in items.text
    assert "&lt;b&gt;top&lt;/b&gt;" in items.text and "0.6100" in items.text
    assert "&lt;i&gt;true&lt;/i&gt;" in items.text and "(top-1)" in items.text
    assert "Annotators see:" in items.text  # placed items show their screen order


@pytest.mark.parametrize("status", ["draft", "closed"])
def test_build_hits_is_refused_before_items_are_ready(logged_in, session, status):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=5, build=False)
    study.status = StudyStatus(status)
    session.commit()
    r = logged_in.post("/dashboard/studies/s1/hits", data={"csrf_token": logged_in.csrf})
    assert "HITs are built once its items are ready" in r.text
