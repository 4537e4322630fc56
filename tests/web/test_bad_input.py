"""Malformed input at the researcher's edges: every form, upload, path and query parameter
of the login, the dashboard and /api/v1 answers a clear 4xx and changes nothing.

Each case sends one bad value (a NUL byte, a control character, text longer than its
column, a number written as "²", past every column, infinite or not a number, a study
file nested too deeply) in an otherwise valid request of a logged-in administrator (the
login cases: of nobody). Every table is compared before and after.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.annotation.leases import next_assignment
from app.auth.service import create_api_token
from app.main import create_app
from app.models import Annotator, ApiToken, Base, HitPosition, Item, Study, User
from app.results.stats.power import MAX_JUDGMENTS_PER_CELL
from app.studytypes.nextword.annotation import submit
from tests.hits.factory import annotator, make_study
from tests.web.accounts import PASSWORD, csrf_of, login, password_hash

NUL = "ab\x00cd"
CONTROL = "ab\x1b[2Jcd"
LONG = "x" * 30_000  # longer than any column or setting
HUGE = "9" * 40  # past every integer column (and 2^63)
NUMBERS = ["²", HUGE, "inf", "nan", "1e309", NUL]
TEXTS = [NUL, CONTROL, LONG]
SLUG = "bad"

# A valid study form (the dashboard's "new study"); each case spoils one field.
STUDY_FORM = {
    "slug": "fresh",
    "title": "Fresh",
    "task": "lm",
    "model.name": "gpt2",
    "dataset.path": "data/wiki.test.tokens",
    "dataset.format": "text",
    "prefix_lengths": "10, 20",
    "kinds": ["data", "model"],
    "items_per_cell": "30",
    "hits.mix": "data=5, model=5",
}
STUDY_TEXT_FIELDS = [
    "slug",
    "title",
    "description",
    "task",
    "model.name",
    "model.revision",
    "model.tokenizer",
    "dataset.path",
    "dataset.format",
    "special_top1",
    "kinds_extra",
    "hits.mix",
]
STUDY_NUMBER_FIELDS = [
    "prefix_lengths",
    "items_per_cell",
    "top_k",
    "prompt_words",
    "seed",
    "decoding.temperature",
    "decoding.top_k",
    "decoding.top_p",
    "decoding.beam_width",
    "decoding.max_word_tokens",
    "hits.attention",
    "hits.replicas",
    "hits.overlap_share",
    "hits.overlap_replicas",
    "annotators.per_annotator_cap",
    "annotators.max_cell_share",
    "annotators.lease_minutes",
    "annotators.min_seconds_per_item",
    "exclusions.attention_min_accuracy",
    "payment.reward_cents",
    "payment.platform_fee",
]

STUDY_FILE = """
slug = "from-file"
title = "From a file"
prefix_lengths = [10]
items_per_cell = 20
[model]
name = "gpt2"
[dataset]
path = "data/wiki.test.tokens"
"""


def _file(**replace: str) -> str:
    text = STUDY_FILE
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


STUDY_FILES = {
    "nul-title": _file(**{'"From a file"': '"a\\u0000b"'}),
    "control-name": _file(**{'"gpt2"': '"gp\\u001bt2"'}),
    "long-title": _file(**{'"From a file"': f'"{"x" * 300}"'}),
    "long-path": _file(**{'"data/wiki.test.tokens"': f'"{"d/" * 600}"'}),
    "long-kind": _file(items_per_cell='kinds = ["data", "model", "data_corrupted@0.' + "1" * 80
                       + '"]\nitems_per_cell'),
    "huge-cap": _file(**{"[model]": "[annotators]\nper_annotator_cap = 1000000000000000000\n"
                         "[model]"}),
    "huge-reward": _file(**{"[model]": "[payment]\nreward_cents = 9223372036854775807\n[model]"}),
    "inf-temperature": _file(**{"[model]": "[decoding]\ntemperature = inf\n[model]"}),
    "nan-share": _file(**{"[model]": "[hits]\noverlap_share = nan\n[model]"}),
    "huge-min-seconds": _file(**{"[model]": "[annotators]\nmin_seconds_per_item = 1e300\n"
                                 "[model]"}),
    "deep-array": STUDY_FILE + "description = " + "[" * 5000 + "]" * 5000 + "\n",
    "deep-table": STUDY_FILE.replace("[model]", "x = " + "{a = " * 2000 + "1" + "}" * 2000
                                     + "\n[model]"),
    "deep-dotted": _file(**{"[model]": "x." + ".".join(["a"] * 50) + " = 1\n[model]"}),
    "nul-byte-raw": STUDY_FILE.replace("From a file", "From\x00a file"),
    "completion-code-nul": STUDY_FILE + '[channels.panel]\ncompletion_code = "a\\u0000"\n',
    "origins-long": STUDY_FILE + "[channels.mturk]\nsubmit_origins = [" + '"x",' * 100 + "]\n",
}  # fmt: skip


def _q(value: str) -> str:
    return quote(value, safe="")


def _cases() -> dict[str, list[tuple]]:
    """Per family: (name, method, url, form data, files, api). A url may name {annotator}
    and {token}; bad values in URLs are percent-encoded as a browser would send them."""
    out: dict[str, list[tuple]] = {}

    def case(family, name, method, url, data=None, files=None, api=False):
        out.setdefault(family, []).append((name, method, url, data, files, api))

    # The login, without a session of anyone's.
    for name, value in (("nul", NUL), ("control", CONTROL), ("long", LONG)):
        case("login", f"username-{name}", "POST", "/login",
             {"username": value, "password": "x" * 12})  # fmt: skip
        case("login", f"password-{name}", "POST", "/login", {"username": "ada", "password": value})
    # The study form, one field at a time; its dataset upload's file name.
    for field in STUDY_TEXT_FIELDS:
        for i, value in enumerate(TEXTS):
            case("study-form", f"{field}-{i}", "POST", "/dashboard/studies",
                 {**STUDY_FORM, field: value})  # fmt: skip
    for field in STUDY_NUMBER_FIELDS:
        for value in NUMBERS:
            case("study-form", f"{field}-{value[:4]!r}", "POST", "/dashboard/studies",
                 {**STUDY_FORM, field: value})  # fmt: skip
    for value in ("²", HUGE):
        case("study-form", f"mix-{value[:4]}", "POST", "/dashboard/studies",
             {**STUDY_FORM, "hits.mix": f"data={value}, model=5"})  # fmt: skip
    for value in (CONTROL, LONG):  # (httpx percent-encodes a NUL in a file name)
        case("study-form", f"upload-name-{value[:4]!r}", "POST", "/dashboard/studies",
             {**STUDY_FORM, "dataset.path": ""},
             {"dataset_file": (value, b"some words\n")})  # fmt: skip
    # A study file.
    for name, text in STUDY_FILES.items():
        case("study-file", name, "POST", "/dashboard/studies/upload", {},
             {"study_file": ("study.toml", text.encode())})  # fmt: skip
    case("study-file", "not-utf8", "POST", "/dashboard/studies/upload", {},
         {"study_file": ("study.toml", b"slug = \"\xff\xfe\"\n")})  # fmt: skip
    # Users and tokens.
    for i, value in enumerate(TEXTS):
        case("users", f"name-{i}", "POST", "/dashboard/users", {"username": value, "password": ""})
        case("users", f"token-name-{i}", "POST", "/dashboard/tokens", {"name": value})
    case(
        "users",
        "password-nul",
        "POST",
        "/dashboard/users",
        {"username": "eve", "password": NUL * 5},
    )
    case(
        "users", "password-long", "POST", "/dashboard/users", {"username": "eve", "password": LONG}
    )
    case("users", "admin-flag", "POST", "/dashboard/users", {"username": "eve", "is_admin": "²"})
    for value in ("²", HUGE, "-1", NUL):
        v = _q(value)
        case("users", f"id-password-{value[:3]}", "POST", f"/dashboard/users/{v}/password", {})
        case("users", f"id-active-{value[:3]}", "POST", f"/dashboard/users/{v}/active", {})
        case("users", f"token-id-{value[:3]}", "POST", f"/dashboard/tokens/{v}/revoke", {})
    # A study's annotators.
    base = f"/dashboard/studies/{SLUG}"
    for value in ("²", HUGE, "inf", NUL):
        case("annotators", f"invite-count-{value[:3]}", "POST", f"{base}/annotators/invite",
             {"count": value})  # fmt: skip
        case("annotators", f"cap-{value[:3]}", "POST", f"{base}/annotators/{{annotator}}/cap",
             {"cap": value})  # fmt: skip
        case("annotators", f"study-cap-{value[:3]}", "POST", f"{base}/cap", {"cap": value})
        for action in ("block", "unblock", "cap"):
            case("annotators", f"id-{action}-{value[:3]}", "POST",
                 f"{base}/annotators/{_q(value)}/{action}", {"cap": "3"})  # fmt: skip
    for i, value in enumerate(TEXTS):
        case("annotators", f"invite-label-{i}", "POST", f"{base}/annotators/invite",
             {"label": value})  # fmt: skip
        case("annotators", f"block-reason-{i}", "POST", f"{base}/annotators/{{annotator}}/block",
             {"reason": value})  # fmt: skip
    # Slugs in URLs, query parameters of pages.
    for i, value in enumerate((NUL, CONTROL, LONG)):
        v = _q(value)
        case("urls", f"page-slug-{i}", "GET", f"/dashboard/studies/{v}")
        case("urls", f"page-slug-results-{i}", "GET", f"/dashboard/studies/{v}/results")
        case("urls", f"page-slug-close-{i}", "POST", f"/dashboard/studies/{v}/close", {})
        case("urls", f"api-slug-{i}", "GET", f"/api/v1/studies/{v}", api=True)
        case("urls", f"api-slug-plan-{i}", "GET", f"/api/v1/studies/{v}/plan", api=True)
    for value in ("²", HUGE, NUL):
        case("urls", f"items-length-{value[:3]}", "GET", f"{base}/items?length={_q(value)}")
        case("urls", f"items-page-{value[:3]}", "GET", f"{base}/items?page={_q(value)}")
    case("urls", "items-kind-nul", "GET", f"{base}/items?kind={_q(NUL)}")
    case("urls", "items-kind-long", "GET", f"{base}/items?kind={LONG}")
    for param in ("b", "seed", "level", "target_ebc", "halfwidth", "power"):
        for value in ("²", HUGE, "inf", "nan", NUL):
            case("urls", f"results-{param}-{value[:3]}", "GET",
                 f"{base}/results?{param}={_q(value)}")  # fmt: skip
    # Simulate before you pay: every field of its form (a GET: it stores nothing).
    for param in ("target_ebc", "true_ebc", "cgd_data", "replications", "seed"):
        for value in ("²", HUGE, "inf", "nan", NUL, "-1", *(("0",) if param != "seed" else ())):
            case("urls", f"simulate-{param}-{value[:3]}", "GET",
                 f"{base}/simulate?{param}={_q(value)}")  # fmt: skip
    for i, value in enumerate((*TEXTS, "lazy")):
        case("urls", f"simulate-crowd-{i}", "GET", f"{base}/simulate?crowd={_q(value)}")
    # The API's query parameters: all of them on /results and /plan, one on the others.
    api = f"/api/v1/studies/{SLUG}"
    for path, params in (
        ("results", ("b", "seed", "level", "estimator", "unit", "ci", "exclusions")),
        ("plan", ("target_ebc", "halfwidth", "alpha", "power", "seed")),
        ("results.csv", ("b",)),
        ("results.tex", ("paper",)),
        ("plot.svg", ("level",)),
    ):
        for param in params:
            for value in ("²", HUGE, "inf", "nan", NUL):
                case("api", f"{path}-{param}-{value[:3]}", "GET",
                     f"{api}/{path}?{param}={_q(value)}", api=True)  # fmt: skip
    for fmt in ("xlsx", NUL, LONG):
        case("api", f"judgments-format-{fmt[:3]}", "GET", f"{api}/judgments.{_q(fmt)}", api=True)
    return out


CASES = _cases()


def _snapshot(session) -> dict[str, list]:
    session.expire_all()
    conn = session.connection()
    return {
        t.name: conn.execute(select(t).order_by(*t.primary_key.columns)).all()
        for t in Base.metadata.sorted_tables
    }


def _collecting_study(session):
    """HITs from build_hits, answered through the annotation service (seeded)."""
    study = make_study(session, slug=SLUG, lengths=(10,), per_cell=10, min_ms_per_item=0)
    rng = random.Random(3)
    people = [annotator(session, study, f"a{i}") for i in range(2)]
    for person in people:
        work = next_assignment(session, person).assignment
        orders = session.execute(
            select(HitPosition.position, HitPosition.choice_order).where(
                HitPosition.hit_id == work.hit_id
            )
        ).all()
        answers = {p: rng.randrange(len(order)) for p, order in orders}
        submit(session, person, work.public_id, answers, {p: 2000 for p in answers})
    return study, people[0]


@pytest.fixture
def researcher(migrated_db, connection, session, tmp_path):
    """An administrator's logged-in client with an API token, beside a study with answers.
    A server error comes back as a 500 response, so that every case is tried."""
    app = create_app(migrated_db.settings(data_dir=tmp_path), bind=connection)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield _logged_in(client, session)


def _logged_in(client, session):
    admin = User(username="ada", password_hash=password_hash(), is_admin=True)
    session.add(admin)
    session.flush()
    _, someone = _collecting_study(session)
    token = create_api_token(session, admin, "tests")
    session.commit()
    assert login(client).status_code == 303
    client.csrf = csrf_of(client.get("/dashboard").text)
    client.ids = {"annotator": someone.id, "token": token.token.id}
    client.bearer = {"Authorization": f"Bearer {token.secret}"}
    return client


@pytest.mark.parametrize("family", sorted(CASES))
def test_bad_input_is_refused_with_a_4xx_and_changes_nothing(researcher, session, family):
    """One test per family of cases (one login each); every case is checked and every
    failing one is listed."""
    failures = []
    for name, method, url, data, files, api in CASES[family]:
        url = url.format(**researcher.ids)
        before = _snapshot(session)
        headers = researcher.bearer if api else {}
        if url == "/login":
            researcher.cookies.clear()  # nobody's session
            data = {**data, "csrf_token": csrf_of(researcher.get("/login").text)}
        elif method == "POST":
            data = {**data, "csrf_token": researcher.csrf}
        if method == "GET":
            r = researcher.get(url, headers=headers, follow_redirects=False)
        else:
            r = researcher.post(
                url, data=data, files=files, headers=headers, follow_redirects=False
            )
        # 400/422: refused as malformed; 404: a malformed slug or id names nothing.
        if r.status_code not in (400, 404, 422):
            failures.append((name, r.status_code, r.text[:200]))
        elif api and not (r.json()["status"] == r.status_code and r.json()["detail"]):
            failures.append((name, "not the API's JSON error", r.text[:200]))
        elif not api and not r.headers["content-type"].startswith("text/html"):
            failures.append((name, "not a page", r.headers["content-type"]))
        elif _snapshot(session) != before:
            failures.append((name, r.status_code, "changed the database"))
    assert not failures, f"{len(failures)} of {len(CASES[family])}: {failures}"


def test_the_valid_requests_behind_the_cases_succeed(researcher, session):
    """The requests the cases spoil are accepted as they are: each refusal above is the
    bad value's doing, not a broken URL or form."""
    csrf = {"csrf_token": researcher.csrf}
    ids = researcher.ids
    r = researcher.get(f"/dashboard/studies/{SLUG}/simulate?replications=2&seed=1&crowd=sampler")
    assert r.status_code == 200, r.text[:500]
    r = researcher.post("/dashboard/studies", data={**STUDY_FORM, **csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text[:500]
    # A file name longer than a file system takes is shortened from the front.
    r = researcher.post(
        "/dashboard/studies",
        data={**STUDY_FORM, **csrf, "slug": "fresh2", "dataset.path": ""},
        files={"dataset_file": ("y" * 300 + ".txt", b"some words\n")},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text[:500]
    stored = session.scalar(select(Study.dataset_path).where(Study.slug == "fresh2"))
    assert Path(stored).name == "y" * 196 + ".txt"
    assert Path(stored).read_bytes() == b"some words\n"
    r = researcher.post(
        "/dashboard/studies/upload",
        data=csrf,
        files={"study_file": ("study.toml", STUDY_FILE.encode())},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text[:500]
    base = f"/dashboard/studies/{SLUG}"
    for url, data in (
        (f"{base}/annotators/{ids['annotator']}/cap", {"cap": "3"}),
        (f"{base}/cap", {"cap": "7"}),
        (f"{base}/annotators/{ids['annotator']}/block", {"reason": "slow"}),
        (f"{base}/annotators/invite", {"count": "2", "label": "lab"}),
        (f"/dashboard/tokens/{ids['token']}/revoke", {}),
    ):
        assert (
            researcher.post(url, data={**data, **csrf}, follow_redirects=False).status_code == 303
        )
    session.expire_all()
    assert session.get(Annotator, ids["annotator"]).hit_cap == 3
    assert session.get(ApiToken, ids["token"]).revoked_at is not None
    assert researcher.get(f"{base}/items?length=10&page=1&kind=data").status_code == 200
    r = researcher.get(f"{base}/results?b=200&target_ebc=1.05&power=0.9")
    assert r.status_code == 200
    r = researcher.post("/dashboard/users", data={"username": "eve", "password": "", **csrf})
    assert r.status_code == 200 and session.scalar(select(User).where(User.username == "eve"))
    r = researcher.post("/dashboard/tokens", data={"name": "ci", **csrf})
    assert r.status_code == 200


def test_a_bad_next_after_login_falls_back_to_the_dashboard(client, session):
    session.add(User(username="ada", password_hash=password_hash(), is_admin=True))
    session.commit()
    page = client.get("/login?next=/dashboard%00x")
    assert page.status_code == 200
    data = {"username": "ada", "password": PASSWORD, "csrf_token": csrf_of(page.text)}
    r = client.post("/login", data={**data, "next": "/dashboard\x00\r\nSet-Cookie: x=1"},
                    follow_redirects=False)  # fmt: skip
    assert r.status_code == 303 and r.headers["location"] == "/dashboard"


# --------------------------------------------------------------------------- the planner


def _bounded(rng: random.Random, low: float, high: float) -> float:
    """Inside (low, high), often very near an edge (where the 500s were)."""
    edge = rng.random()
    if edge < 0.2:
        return low + (high - low) * 10 ** rng.uniform(-12, -1)
    if edge < 0.4:
        return high - (high - low) * 10 ** rng.uniform(-12, -1)
    return rng.uniform(low, high)


def test_the_planner_answers_every_parameter_inside_its_bounds(researcher, session):
    """Seeded draws inside the documented bounds of /plan and of the dashboard's planner:
    a plan, or a 422 that says why (never a 500)."""
    rng = random.Random(11)
    seen = set()
    for i in range(40):
        # Half the draws near the usual values, so that plans come back too.
        usual = i % 4 < 2
        params = {
            "target_ebc": 1 + (_bounded(rng, 0, 0.2) if usual else _bounded(rng, 0, 2)),
            "power": _bounded(rng, 0.05, 1),
            "alpha": rng.uniform(1e-4, 0.2) if usual else 10 ** rng.uniform(-300, math.log10(0.5)),
        }
        if i % 2:
            params["halfwidth"] = rng.uniform(0.01, 1) if usual else 10 ** rng.uniform(-300, 0)
        r = researcher.get(f"/api/v1/studies/{SLUG}/plan", params=params, headers=researcher.bearer)
        assert r.status_code in (200, 422), (params, r.text[:300])
        if r.status_code == 422:
            body = r.json()
            assert body["detail"] and body["errors"][0]["type"] == "plan_infeasible", body
            assert body["errors"][0]["loc"][1] in params
        else:
            assert 0 < r.json()["judgments_per_cell"] <= MAX_JUDGMENTS_PER_CELL
        seen.add(r.status_code)
    assert seen == {200, 422}
    # This study's CGD(data) is measured (random answers: about 0.8): EB-C 2 would need a
    # CGD(model) above 1.
    r = researcher.get(f"/api/v1/studies/{SLUG}/plan?target_ebc=2", headers=researcher.bearer)
    assert r.status_code == 422 and "CGD is a share below 1" in r.json()["detail"]
    page = f"/dashboard/studies/{SLUG}/results?b=100"
    r = researcher.get(f"{page}&target_ebc=2")
    assert r.status_code == 422 and "CGD is a share below 1" in r.text
    assert researcher.get(f"{page}&halfwidth=1e-300").status_code == 422
    assert researcher.get(f"{page}&target_ebc=1.05&power=0.9").status_code == 200


def test_results_whose_cgd_makes_the_default_plan_impossible_still_answer(researcher, session):
    """CGD(data) above 1/1.02: the results come without the default plan, and say why."""
    study = make_study(session, slug="hard", lengths=(10,), per_cell=60, min_ms_per_item=0)
    rows = session.execute(
        select(Item.id, Item.kind, Item.is_attention).where(Item.study_id == study.id)
    ).all()
    # Every data judgment but one is "none"; model and attention items get the top-1.
    data = {item_id for item_id, kind, attention in rows if kind == "data" and not attention}
    top1_given = False
    for n in range(12):
        person = annotator(session, study, f"h{n}")
        work = next_assignment(session, person).assignment
        answers = {}
        for p, item_id, order in session.execute(
            select(HitPosition.position, HitPosition.item_id, HitPosition.choice_order).where(
                HitPosition.hit_id == work.hit_id
            )
        ):
            pick_top1 = item_id not in data or not top1_given
            top1_given |= item_id in data
            answers[p] = order.index(0) if pick_top1 else len(order) - 1  # else "none"
        submit(session, person, work.public_id, answers, {p: 2000 for p in answers})
    session.commit()
    r = researcher.get("/api/v1/studies/hard/results?b=100", headers=researcher.bearer)
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    data_cgd = next(q for q in body["results"]["cgd"] if q["kind"] == "data")["estimate"]
    assert 1 / 1.02 <= data_cgd < 1
    assert body["plan"] is None
    assert any(m.startswith("planner: ") and "below" in m for m in body["messages"])
