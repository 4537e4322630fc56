"""/api/v1 studies and results: auth, response schemas, downloads."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from pydantic import TypeAdapter

from app.auth.service import create_api_token, revoke_api_token
from app.models import User
from app.results.schemas import (
    ManifestOut,
    ResultQuery,
    ResultsOut,
    StudyDetailOut,
    StudySummaryOut,
)
from app.results.service import study_results
from app.results.stats import PlanTarget, StudyPlan
from tests.factories import HandMade, StudyFactory, make_handmade

B = "b=200"


@pytest.fixture
def handmade(session) -> HandMade:
    made = make_handmade(session)
    session.commit()
    return made


@pytest.fixture
def token(session):
    # Direct insert: the API checks tokens, not passwords (argon2 would cost ~0.5 s a test).
    user = User(username="ada", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    new = create_api_token(session, user, "tests")
    session.commit()
    return new


@pytest.fixture
def auth(token):
    return {"Authorization": f"Bearer {token.secret}"}


ROUTES = [
    "/api/v1/studies",
    "/api/v1/studies/hand",
    f"/api/v1/studies/hand/results?{B}",
    f"/api/v1/studies/hand/results.csv?{B}",
    f"/api/v1/studies/hand/results.tex?{B}",
    f"/api/v1/studies/hand/plot.svg?{B}",
    "/api/v1/studies/hand/judgments.csv",
    "/api/v1/studies/hand/items.jsonl",
    "/api/v1/studies/hand/manifest.json",
    "/api/v1/studies/hand/plan",
]


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_needs_a_valid_token(client, session, handmade, token, path):
    r = client.get(path)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["status"] == 401 and "token" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "Bearer"
    assert client.get(path, headers={"Authorization": "Bearer ebc_nope"}).status_code == 401


def test_a_revoked_token_is_refused(client, session, handmade, token, auth):
    assert client.get("/api/v1/studies", headers=auth).status_code == 200
    revoke_api_token(session, token.token)
    session.commit()
    r = client.get("/api/v1/studies", headers=auth)
    assert r.status_code == 401 and r.json()["status"] == 401


def test_studies_list_and_detail(client, handmade, auth):
    r = client.get("/api/v1/studies", headers=auth)
    assert r.status_code == 200
    listed = [StudySummaryOut.model_validate(s) for s in r.json()]
    assert [s.slug for s in listed] == ["hand"]
    r = client.get("/api/v1/studies/hand", headers=auth)
    detail = StudyDetailOut.model_validate(r.json())
    assert detail.counts.judgments == 25 and detail.counts.hits == 2
    assert detail.config["exclusions"]["attention_min_accuracy"] == 0.5
    r = client.get("/api/v1/studies/nope", headers=auth)
    assert r.status_code == 404 and r.json() == {"detail": "no study 'nope'", "status": 404}


def test_results_json(client, handmade, auth):
    r = client.get(
        f"/api/v1/studies/hand/results?{B}&estimator=plurality&exclusions=off", headers=auth
    )
    assert r.status_code == 200
    res = ResultsOut.model_validate(r.json())
    assert res.options.estimator == "plurality" and res.options.b == 200
    row = res.results.table[0]
    assert row.ebc.estimate == pytest.approx((2 / 4) / (1.5 / 4))
    assert res.other.exclusions_applied and not res.results.exclusions_applied
    assert "NaN" not in r.text


@pytest.mark.parametrize(
    "query", ["estimator=mean", "unit=worker", "b=5", "ci=abc", "exclusions=maybe", "seed=-1"]
)
def test_bad_options_are_json_422(client, handmade, auth, query):
    r = client.get(f"/api/v1/studies/hand/results?{query}", headers=auth)
    assert r.status_code == 422
    assert r.json()["detail"] == "invalid request" and r.json()["errors"]


def test_results_csv(client, handmade, auth):
    r = client.get(f"/api/v1/studies/hand/results.csv?{B}", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    ebc = {row["exclusions"]: row for row in rows if row["name"] == "ebc"}
    assert float(ebc["on"]["estimate"]) == pytest.approx(5 / 3)
    assert float(ebc["off"]["estimate"]) == pytest.approx(1.2)
    assert ebc["on"]["p_value"] and "paper_mean" in ebc["on"]
    assert any(row["paper_mean"] for row in rows)  # NaN parts (tiny sets) are empty cells
    assert {row["kind"] for row in rows if row["name"] == "cgd"} == {"data", "model"}


def _balanced(tex: str) -> bool:
    depth = 0
    for m in re.finditer(r"(?<!\\)[{}]", tex):
        depth += 1 if m.group() == "{" else -1
        if depth < 0:
            return False
    return depth == 0


@pytest.mark.parametrize("paper", ["false", "true"])
def test_latex_table_is_structurally_valid(client, handmade, auth, paper):
    r = client.get(f"/api/v1/studies/hand/results.tex?{B}&paper={paper}", headers=auth)
    assert r.status_code == 200
    tex = r.text
    assert _balanced(tex)
    assert tex.count("\\begin{") == tex.count("\\end{") == 2
    spec = re.search(r"\\begin\{tabular\}\{([lcr]+)\}", tex).group(1)
    body = tex.split("\\midrule")[1].split("\\bottomrule")[0]
    rows = [line for line in tex.split("\n") if line.endswith("\\\\")]
    assert len(rows) == 2  # header + one length
    for line in rows:
        assert line.count("&") == len(spec) - 1
    assert "LM, gpt2 & 10 & $0.400" in body or "LM, gpt2 & 10 &" in body
    assert all(line.count("$") % 2 == 0 for line in rows)


def test_latex_escapes_special_characters():
    from app.results.exports import tex_escape

    assert tex_escape("a_b & 50% #1 {x}") == r"a\_b \& 50\% \#1 \{x\}"


def test_plot_svg_and_png(client, handmade, auth):
    r = client.get(f"/api/v1/studies/hand/plot.svg?{B}", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    assert r.text.lstrip().startswith("<?xml") and "<svg" in r.text
    r = client.get(f"/api/v1/studies/hand/plot.png?{B}", headers=auth)
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert client.get("/api/v1/studies/hand/plot.gif", headers=auth).status_code == 422


def test_judgments_csv_and_jsonl_round_trip(client, session, handmade, auth):
    r = client.get("/api/v1/studies/hand/judgments.csv", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    r = client.get("/api/v1/studies/hand/judgments.jsonl", headers=auth)
    assert r.headers["content-type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in r.text.splitlines()]
    assert len(rows) == len(records) == 25
    for row, rec in zip(rows, records, strict=True):
        assert int(row["judgment_id"]) == rec["judgment_id"]
        assert json.loads(row["displayed_ranks"]) == rec["displayed_ranks"]
        assert float(row["d"]) == rec["d"]
        assert (row["chosen_rank"] or None) == (
            None if rec["chosen_rank"] is None else str(rec["chosen_rank"])
        )
        assert row["too_fast"] == ("true" if rec["too_fast"] else "false")
    # B's second answer: "none" at screen slot k.
    b = [rec for rec in records if rec["annotator_label"] == "B"]
    assert b[1]["is_none"] and b[1]["option"] == 5 and b[1]["chosen_word"] is None
    # A re-analysis recomputes d from what was displayed and chosen.
    for rec in records:
        if rec["chosen_rank"] is not None:
            shown = rec["displayed_words"][rec["option"]]
            assert shown == rec["chosen_word"]
            assert rec["d"] == float(rec["chosen_word"] != rec["top1_word"])
    a = next(rec for rec in records if rec["annotator_label"] == "A")
    assert a["channel"] == "local" and a["worker_id"] and a["assignment"]
    assert a["leased_at"] and a["submitted_at"] and a["study"] == "hand"


def test_items_csv_and_jsonl(client, handmade, auth):
    rows = list(
        csv.DictReader(io.StringIO(client.get("/api/v1/studies/hand/items.csv", headers=auth).text))
    )
    text = client.get("/api/v1/studies/hand/items.jsonl", headers=auth).text
    records = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == len(records) == 10
    d2 = records[1]
    assert d2["true_next_word"] == "w1" and d2["true_rank"] == 1
    assert d2["choices"][0] == d2["top1_word"] == "w0"
    assert d2["displayed_ranks"] == [1, 2, 3, 4, 0, "none"]
    assert rows[1]["provenance"] and json.loads(rows[1]["choices"]) == d2["choices"]


def test_manifest(client, handmade, auth):
    r = client.get("/api/v1/studies/hand/manifest.json", headers=auth)
    m = ManifestOut.model_validate(r.json())
    assert m.model == {"name": "gpt2", "revision": "abc123"}
    assert m.tokenizer == "gpt2" and m.dataset["path"] == "data/wiki.test.tokens"
    assert m.seeds["study"] == 11 and m.config["slug"] == "hand"
    assert m.counts.judgments == 25 and "data" in m.item_provenance


def test_plan(client, handmade, auth):
    r = client.get("/api/v1/studies/hand/plan?target_ebc=1.05", headers=auth)
    plan = TypeAdapter(StudyPlan).validate_python(r.json())
    assert plan.target_ebc == 1.05 and plan.cgd_data_measured
    r = client.get("/api/v1/studies/hand/plan?halfwidth=0.01&target_ebc=", headers=auth)
    assert r.status_code in (200, 422)
    assert client.get("/api/v1/studies/hand/plan?target_ebc=0.5", headers=auth).status_code == 422


def expected_fees(reward: int, assignments: int) -> dict[str, int]:
    """Each channel's fees by its published rule, worked out here: MTurk 20% of the reward
    per assignment (under 10 assignments a HIT), at least a cent; Prolific 42.8% of all
    rewards (the default EBC_PROLIFIC_FEE_RATE), half up to the cent; invite links none."""
    return {
        "mturk": max(1, (reward * 20 + 50) // 100) * assignments,
        "prolific": math.floor(reward * assignments * 0.428 + 0.5),
        "local": 0,
    }


def test_plan_is_priced_on_each_channel_by_its_own_fee_rule(client, handmade, auth, session):
    handmade.study.reward_cents = 37  # 20% is 7.4 cents: MTurk's rounding shows
    session.commit()
    r = client.get("/api/v1/studies/hand/plan?target_ebc=1.05", headers=auth)
    assert r.status_code == 200, r.text
    plan = r.json()
    costs = {c["channel"]: c for c in plan["channel_costs"]}
    assert set(costs) == {"mturk", "prolific", "local"}
    assert plan["assignments"] > 0
    fees = expected_fees(37, plan["assignments"])
    for name, c in costs.items():
        assert c["assignments"] == plan["assignments"]
        assert c["rewards_cents"] == 37 * plan["assignments"]
        assert c["fees_cents"] == fees[name], name
        assert c["total_cents"] == c["rewards_cents"] + c["fees_cents"]
        assert c["fee_rule"] and c["problem"] is None
    assert costs["prolific"]["fees_cents"] > costs["mturk"]["fees_cents"] > 0
    assert "none" in costs["local"]["fee_rule"]
    # The figure with the study's declared fee (none here) stays, beside the channels'.
    declared = 0.37 * plan["assignments"] * (1 + handmade.study.platform_fee)
    assert plan["cost"] == pytest.approx(declared, rel=1e-6)


def test_a_plan_without_a_reward_says_why_the_paid_channels_are_unpriced(client, handmade, auth):
    plan = client.get("/api/v1/studies/hand/plan", headers=auth).json()
    costs = {c["channel"]: c for c in plan["channel_costs"]}
    assert costs["mturk"]["total_cents"] is None and "reward" in costs["mturk"]["problem"]
    assert costs["prolific"]["total_cents"] is None
    assert costs["local"]["total_cents"] == 0 and costs["local"]["fees_cents"] == 0


def _one_annotator(session):
    """One annotator: a CGD's jackknife interval and the test of EB-C = 1 are undefined."""
    f = StudyFactory(session, "solo")
    items = [f.item("data") for _ in range(2)] + [f.item("model") for _ in range(2)]
    f.answer(f.annotator("only"), f.hit(items), [0, 1, None, 0])
    session.commit()
    return f.study


def test_a_nan_figure_is_null_in_the_json_and_empty_in_the_csv(client, session, auth):
    study = _one_annotator(session)
    cgd = study_results(session, study, ResultQuery(b=200)).results.cgd[0]
    assert math.isnan(cgd.se) and math.isnan(cgd.p_value)  # NaN while computed with
    r = client.get(f"/api/v1/studies/solo/results?{B}", headers=auth)
    assert r.status_code == 200 and "NaN" not in r.text and "Infinity" not in r.text
    body = r.json()["results"]
    first = body["cgd"][0]
    assert first["estimate"] == 0.5 and first["se"] is None and first["p_value"] is None
    assert body["table"][0]["ebc"]["high"] is None
    assert body["tests"][0]["p_value"] is None
    # The same figures in the document's own model: null reads back as NaN.
    again = ResultsOut.model_validate(r.json())
    assert math.isnan(again.results.cgd[0].se) and again.results.cgd[0].estimate == 0.5
    rows = list(csv.DictReader(io.StringIO(client.get(
        f"/api/v1/studies/solo/results.csv?{B}", headers=auth).text)))  # fmt: skip
    data = next(row for row in rows if row["name"] == "cgd" and row["kind"] == "data")
    assert data["estimate"] == "0.5" and data["se"] == "" and data["p_value"] == ""


def test_plan_defaults_are_the_planners(client, handmade, auth):
    plan = client.get("/api/v1/studies/hand/plan", headers=auth).json()
    default = PlanTarget()
    assert (plan["target_ebc"], plan["halfwidth"]) == (default.target_ebc, default.halfwidth)
    assert (plan["power_target"], plan["alpha"]) == (default.power, default.alpha)
    doc = client.get("/api/v1/openapi.json").json()
    params = doc["paths"]["/api/v1/studies/{slug}/plan"]["get"]["parameters"]
    defaults = {p["name"]: p["schema"].get("default") for p in params}
    assert defaults["target_ebc"] == default.target_ebc and defaults["power"] == default.power
    assert defaults["alpha"] == default.alpha and defaults["halfwidth"] is None


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_openapi_documents_figures_as_numbers_or_null(client):
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    nullable = {"anyOf": [{"type": "number"}, {"type": "null"}]}
    for name, field in (
        ("Quantity", "se"),
        ("ClusterTest", "p_value"),
        ("PaperFigure", "mean"),
        ("StudyPlan", "power_now"),
        ("ResultSet", "design_effect"),
        ("AnnotatorQualityOut", "attention_accuracy"),
    ):
        prop = schemas[name]["properties"][field]
        assert {k: prop[k] for k in ("anyOf",)} == nullable, (name, field)
    assert schemas["PaperFigure"]["properties"]["parts"]["items"] == nullable
    priced = schemas["PricedPlan"]["properties"]
    assert priced["channel_costs"]["items"]["$ref"].endswith("ChannelCostOut")
    assert {"channel", "total_cents", "fees_cents", "fee_rule"} <= set(
        schemas["ChannelCostOut"]["properties"]
    )
    assert schemas["Quantity"]["properties"]["n_judgments"]["type"] == "integer"


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_openapi_documents_every_route_with_its_schema(client):
    doc = client.get("/api/v1/openapi.json").json()
    paths = doc["paths"]
    for path, schema in (
        ("/api/v1/studies/{slug}/results", "ResultsOut"),
        ("/api/v1/studies/{slug}", "StudyDetailOut"),
        ("/api/v1/studies/{slug}/manifest.json", "ManifestOut"),
        ("/api/v1/studies/{slug}/plan", "PricedPlan"),
    ):
        ok = paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok["$ref"].endswith(schema)
        assert "401" in paths[path]["get"]["responses"]
        assert "404" in paths[path]["get"]["responses"]
    for path in (
        "/api/v1/studies/{slug}/judgments.{fmt}",
        "/api/v1/studies/{slug}/items.{fmt}",
        "/api/v1/studies/{slug}/results.csv",
        "/api/v1/studies/{slug}/results.tex",
        "/api/v1/studies/{slug}/plot.{fmt}",
    ):
        assert "200" in paths[path]["get"]["responses"], path
    assert doc["components"]["securitySchemes"]
