"""The study-type registry (app.studytypes.registry): one plug-in per ``StudyType``, each with
every part the shared code asks of it (the protocols of app.studytypes.base), its templates,
its downloads, and its own words for what it does not have."""

import inspect
from types import SimpleNamespace

import pytest

from app.models import StudyType
from app.studytypes import base
from app.studytypes.registry import STUDY_TYPES, study_type_of
from app.web.templating import templates

PARTS = {
    "hits": base.HitRules,
    "pages": base.Pages,
    "results": base.Results,
    "dashboard": base.Dashboard,
    "preview": base.Preview,
    "http_crowd": base.HttpCrowd,
}
CAPABILITIES = {
    "diagnostics": base.Diagnostics,
    "planner": base.Planner,
    "scores": base.Scores,
}
# The refusal a type says for each capability it lacks (its key in `refusals`).
REFUSED_AS = {"diagnostics": "diagnostics", "planner": "planner", "scores": "EB-M"}
# Words the shared code reads of a type's namespaces beside their protocols' functions.
WORDS = {
    "pages": ("PREVIEW_TITLE", "CROWD_DESCRIPTION", "CROWD_KEYWORDS"),
    "dashboard": ("ANSWERS_LABEL", "ITEMS_LABEL"),
    "downloads": ("DOWNLOADS", "CATALOGUE"),
}


def members(protocol: type) -> list[str]:
    """What a protocol asks for: its public functions and its declared attributes."""
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return sorted(names | set(getattr(protocol, "__annotations__", {})))


def unfit(protocol: type, namespace: object) -> list[str]:
    """The members of `protocol` that `namespace` lacks, or cannot be called as the protocol
    calls them (its positional parameters by position, its keyword-only ones by name)."""
    out = []
    for name in members(protocol):
        if not hasattr(namespace, name):
            out.append(f"{name}: missing")
            continue
        wanted = inspect.getattr_static(protocol, name, None)
        if not inspect.isfunction(wanted):
            continue
        params = list(inspect.signature(wanted).parameters.values())[1:]  # less `self`
        args = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        kwargs = {p.name: p.name for p in params if p.kind is p.KEYWORD_ONLY}
        try:
            inspect.signature(getattr(namespace, name)).bind(*args, **kwargs)
        except TypeError as exc:
            out.append(f"{name}: not callable as the protocol calls it ({exc})")
    return out


def test_every_study_type_has_one_plugin_under_its_own_name():
    assert set(STUDY_TYPES) == set(StudyType)
    for name, plugin in STUDY_TYPES.items():
        assert plugin.name is name
        assert study_type_of(SimpleNamespace(study_type=name)) is plugin
        assert plugin.folder.name == name.value  # its package: app/studytypes/<name>/
    assert len({p.label for p in STUDY_TYPES.values()}) == len(STUDY_TYPES)


@pytest.mark.parametrize("name", list(StudyType), ids=lambda t: t.value)
def test_a_plugin_provides_every_part_the_shared_code_asks_for(name):
    plugin = STUDY_TYPES[name]
    for part, protocol in PARTS.items():
        assert unfit(protocol, getattr(plugin, part)) == [], part
    for part, words in WORDS.items():
        namespace = getattr(plugin.parts, part)
        assert [w for w in words if not hasattr(namespace, w)] == [], part
    for capability, protocol in CAPABILITIES.items():
        given = getattr(plugin, capability)
        if given is not None:
            assert unfit(protocol, given) == [], capability


@pytest.mark.parametrize("name", list(StudyType), ids=lambda t: t.value)
def test_a_plugin_s_templates_are_found_and_parse(name):
    plugin = STUDY_TYPES[name]
    for template in base.TEMPLATES:
        assert templates.env.get_template(plugin.template(template)).filename.startswith(
            str(plugin.folder)
        )
    templates.env.get_template(plugin.preview.TEMPLATE)


@pytest.mark.parametrize("name", list(StudyType), ids=lambda t: t.value)
def test_a_plugin_s_downloads_are_each_one_way_and_all_listed(name):
    plugin = STUDY_TYPES[name]
    assert plugin.downloads
    for download, spec in plugin.downloads.items():
        assert (spec.chunks is None) != (spec.render is None), download
        assert spec.media_type, download
    assert set(plugin.downloads) <= set(plugin.catalogue)
    assert len(set(plugin.catalogue)) == len(plugin.catalogue)


@pytest.mark.parametrize("name", list(StudyType), ids=lambda t: t.value)
def test_a_plugin_says_in_its_own_words_what_it_does_not_have(name):
    plugin = STUDY_TYPES[name]
    study = SimpleNamespace(slug="s-1", study_type=name)
    for capability, key in REFUSED_AS.items():
        if getattr(plugin, capability) is None:
            assert key in plugin.refusals, capability
            said = plugin.refusal(study, key)
            assert said.startswith("s-1 is ") and plugin.noun in said
        else:  # no stale words for what it has
            assert key not in plugin.refusals, capability
    assert ("batch" in plugin.refusals) != (plugin.offline_batch is not None)
    assert plugin.refusal(study, "thing") == f"s-1 is {plugin.noun} study: it has no thing."
