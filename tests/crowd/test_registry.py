"""The crowd platforms as plug-ins (issue 31): outside a platform's own package and the
registry nothing tests a platform's name; each platform has one name everywhere; and what a
platform declares (`Capabilities`) is what its provider does."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import SecretStr

from app.config import ROOT, Settings
from app.crowd.base import (
    CapQualifying,
    CrowdProvider,
    CrowdServiceError,
    PostingSpec,
    Reopening,
    Unsupported,
)
from app.crowd.common import provider_for, ref_column
from app.crowd.platforms.mturk.provider import MTurkProvider
from app.crowd.registry import (
    DEFAULT,
    PLATFORMS,
    by_channel,
    capability_table,
    platform,
    self_enrolling,
)
from app.models import Channel
from app.studies.schemas import ChannelSection

# A platform's names (and former names) as strings, and its channel as `Channel.<member>`.
NAMES = set(PLATFORMS) | {old for p in PLATFORMS.values() for old in p.former_names}
# `Channel.local` is the invite links' channel, which the annotation core has whatever the
# platforms (`Annotator.invited`, revoking and re-issuing links): only the channels of
# platforms reached by calls (`Capabilities.remote`) are a platform's.
CHANNEL_MEMBERS = {p.channel.name for p in PLATFORMS.values() if p.caps.remote} | {"panel"}
# Where a platform's name may stand: its own package (templates too) and the registry.
OWN = ("app/crowd/platforms/", "app/templates/crowd/platforms/", "app/crowd/registry.py")
# Strings equal to a name that are not a test of a platform, and why.
ALLOWED = {
    ("app/models/enums.py", "local"): "the stored channel vocabulary (test_one_name)",
    ("app/models/enums.py", "mturk"): "the stored channel vocabulary (test_one_name)",
    ("app/models/enums.py", "prolific"): "the stored channel vocabulary (test_one_name)",
    ("app/studies/schemas.py", "mturk"): "RESERVED_SLUGS: the /mturk route's word",
}
_JINJA = re.compile(r"\{[{%](.*?)[}%]\}", re.DOTALL)


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, nodes)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def python_name_checks(path: Path, rel: str) -> list[str]:
    """A platform's name as a string (compared, looked up, listed or passed), or a
    comparison with a platform's `Channel` member, in one module (docstrings aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and node.value in NAMES
            and id(node) not in docs
            and (rel, node.value) not in ALLOWED
        ):
            found.append(f"{rel}:{node.lineno}: {node.value!r}")
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if (
                    isinstance(side, ast.Attribute)
                    and isinstance(side.value, ast.Name)
                    and side.value.id == "Channel"
                    and side.attr in CHANNEL_MEMBERS
                ):
                    found.append(f"{rel}:{node.lineno}: compares Channel.{side.attr}")
    return found


def template_name_checks(path: Path, rel: str) -> list[str]:
    """A platform's name quoted or used as an attribute inside a template's expressions."""
    found = []
    text = path.read_text(encoding="utf-8")
    names = "|".join(sorted(NAMES))
    quoted = re.compile(rf"""(['"])({names})\1|\.({names})\b""")
    for block in _JINJA.finditer(text):
        for hit in quoted.finditer(block.group(1)):
            line = text.count("\n", 0, block.start()) + 1
            found.append(f"{rel}:{line}: {hit.group(0)}")
    return found


def name_checks(root: Path) -> list[str]:
    """Every test of a platform's name in `root`'s app/ outside the platforms' own places
    (and the migrations, which record the history of names)."""
    found = []
    for path in sorted((root / "app").rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(OWN) or "/migrations/" in rel:
            continue
        if path.suffix == ".py":
            found += python_name_checks(path, rel)
        elif path.suffix == ".html":
            found += template_name_checks(path, rel)
    return found


# -- no platform's name outside its own package -------------------------------------------


def test_nothing_outside_a_platform_s_package_tests_its_name():
    assert name_checks(ROOT) == []


def test_the_guard_finds_name_checks(tmp_path):
    """What the guard catches, in code as it was before issue 31."""
    (tmp_path / "app" / "crowd").mkdir(parents=True)
    (tmp_path / "app" / "templates").mkdir()
    (tmp_path / "app" / "crowd" / "sync.py").write_text(
        '"""Docstrings may say "mturk"."""\n'
        "def f(provider, study, annotator):\n"
        '    if provider.name == "prolific":\n'
        '        return (study.channels or {}).get("panel")\n'
        '    LABELS = {"mturk": "MTurk"}\n'
        "    return annotator.channel is not Channel.mturk\n"
    )
    (tmp_path / "app" / "templates" / "page.html").write_text(
        "<p>Prolific and mturk in prose are fine.</p>\n"
        '{% if target.provider == "local" %}x{% endif %}{{ crowd.panel }}\n'
    )
    found = name_checks(tmp_path)
    assert sorted(found) == [
        "app/crowd/sync.py:3: 'prolific'",
        "app/crowd/sync.py:4: 'panel'",
        "app/crowd/sync.py:5: 'mturk'",
        "app/crowd/sync.py:6: compares Channel.mturk",
        'app/templates/page.html:2: "local"',
        "app/templates/page.html:2: .panel",
    ]


def test_the_platforms_own_places_are_where_names_are():
    own = [p for p in (ROOT / "app" / "crowd" / "platforms").iterdir() if p.is_dir()]
    assert {p.name for p in own} - {"__pycache__"} == set(PLATFORMS)


# -- one name ----------------------------------------------------------------------------


def test_one_name():
    """A platform's name is its channel's, its study file section's (for those whose
    workers enrol themselves), `--provider`'s and `?provider=`'s; the stored channels are
    the platforms' and an imported batch's."""
    for name, made in PLATFORMS.items():
        assert made.name == name and made.channel.value == name
        assert by_channel(made.channel) is made
    assert {c.value for c in Channel} == set(PLATFORMS) | {Channel.batch.value}
    assert by_channel(Channel.batch) is None
    sections = set(ChannelSection.model_fields)
    assert sections == {c.value for c in self_enrolling()}
    assert DEFAULT in PLATFORMS


def test_a_former_name_in_a_study_file_is_read_as_the_platform_s():
    old = ChannelSection.model_validate({"panel": {"enabled": True, "completion_code": "C"}})
    assert old.prolific.enabled and old.prolific.completion_code == "C"
    with pytest.raises(ValueError, match="former name"):
        ChannelSection.model_validate({"panel": {}, "prolific": {}})


def test_an_unknown_platform_is_a_400_naming_those_there_are():
    with pytest.raises(CrowdServiceError, match="one of mturk, prolific, local") as refused:
        platform("paypal")
    assert refused.value.status_code == 400


# -- what a platform declares is what its provider does -----------------------------------


@pytest.fixture
def settings(monkeypatch, tmp_path) -> Settings:
    """Settings that reach no database and no AWS account of this machine."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    return Settings(_env_file=None, env="test", database_url=f"sqlite:///{tmp_path}/x.db")


def make_session():
    """The local provider's view of our store; these tests never read it."""
    raise AssertionError("no test here reads the store")


@pytest.fixture
def made(settings):
    """Each platform's provider in each of its environments (production allowed, a
    Prolific token set; no call is made)."""
    allowed = settings.model_copy(
        update={"mturk_production": True, "prolific_api_token": SecretStr("t" * 40)}
    )
    out = {}
    for name, each in PLATFORMS.items():
        for environment in each.caps.environments:
            out[name, environment] = provider_for(allowed, name, environment, sessions=make_session)
    yield out
    for provider in out.values():
        close = getattr(provider, "close", None)
        if close is not None:
            close()


def test_every_environment_a_platform_declares_makes_its_provider(made):
    for (name, environment), provider in made.items():
        assert isinstance(provider, CrowdProvider)
        assert (provider.name, provider.environment) == (name, environment)


def test_declared_capabilities_agree_with_the_providers(made, settings):
    for (name, _), provider in made.items():
        caps = PLATFORMS[name].caps
        assert caps.hides_at_cap == isinstance(provider, CapQualifying), name
        assert caps.reopens == isinstance(provider, Reopening), name
        per_submission = caps.review_unit == "submission"
        assert per_submission == (ref_column(name).key == "external_session_id"), name
        # (`units_lapse` is read by `common.lapse_time`; what MTurk does with the lifetime
        # is tests/crowd/test_reopen.py's.)
        assert caps.bundles == hasattr(provider, "hits_per_participant"), name
        if caps.bundles:
            bundled = provider_for(
                settings.model_copy(update={"prolific_api_token": SecretStr("t" * 40)}),
                name,
                hits_per_participant=3,
                sessions=make_session,
            )
            assert bundled.hits_per_participant == 3
        else:
            with pytest.raises(CrowdServiceError, match="bundles"):
                provider_for(settings, name, hits_per_participant=3, sessions=make_session)


def test_a_block_reaches_the_platform_only_where_it_is_declared(made):
    calls = []
    client = SimpleNamespace(create_worker_block=lambda **kw: calls.append(kw) or {})
    providers = {name: p for (name, _), p in made.items()}
    providers["mturk"] = MTurkProvider("sandbox", client=client)
    for name, provider in providers.items():
        remote = PLATFORMS[name].caps
        if remote.blocks_remotely:
            provider.block("W1", reason="bot")
            assert calls == [{"WorkerId": "W1", "Reason": "bot"}]
        elif remote.remote:
            with pytest.raises(Unsupported):
                provider.block("W1", reason="bot")
        else:
            provider.block("W1", reason="bot")  # bookkeeping: the ledger blocks here


def test_the_fee_rule_says_whether_the_unit_size_counts():
    spec = PostingSpec("s", "t", "d", 100, 1800, 86400, 0)
    for name, each in PLATFORMS.items():
        price = each.price(SimpleNamespace(prolific_fee_rate=0.428), spec)
        if each.caps.fee_per_unit_size:
            bigger = price(10, max_assignments=10).fees_cents
            assert bigger > price(10, max_assignments=1).fees_cents, name
        else:
            with pytest.raises(TypeError):
                price(10, max_assignments=10)
        assert (price(10).fees_cents == 0) == (not each.caps.remote), name


def test_the_capability_table_has_a_row_per_capability_and_a_column_per_platform():
    rows = dict(capability_table())
    assert rows["label"] == [p.label for p in PLATFORMS.values()]
    assert rows["review_unit"] == [p.caps.review_unit for p in PLATFORMS.values()]
    assert all(len(values) == len(PLATFORMS) for values in rows.values())


def test_each_platform_s_page_parts_exist():
    """The Annotators page includes the entry part of every self-enrolling platform."""
    templates = ROOT / "app" / "templates" / "crowd" / "platforms"
    for each in PLATFORMS.values():
        entry = templates / each.name / "_entry.html"
        assert entry.exists() == each.caps.self_enrolment, each.name
