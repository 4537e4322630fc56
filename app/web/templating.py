"""Jinja2 templates (autoescaped: model and dataset text is untrusted).

The service's own templates are in ``app/templates``; each study type's are in its package's
``templates/<type>/`` folder, so named ``<type>/...`` (``nextword/results.html``, the
namespace Django's apps use). A template asks a
study's type with ``plugin(study)`` (its plug-in: ``plugin(study).template("_simulate.html")``),
never by comparing the type's name.
"""

from fastapi.templating import Jinja2Templates
from jinja2 import ChoiceLoader, FileSystemLoader

from app import __version__
from app.config import PACKAGE
from app.results.stats.figure import bound_text, missing
from app.studytypes.registry import STUDY_TYPES, study_type_of

templates = Jinja2Templates(directory=str(PACKAGE / "templates"))
templates.env.loader = ChoiceLoader(
    [
        FileSystemLoader(str(PACKAGE / "templates")),
        *(FileSystemLoader(str(plugin.folder / "templates")) for plugin in STUDY_TYPES.values()),
    ]
)
templates.env.globals["version"] = __version__
templates.env.globals["plugin"] = study_type_of
# The new-study form's choice of what people do: every registered type, by its label.
templates.env.globals["type_choices"] = [(name.value, p.label) for name, p in STUDY_TYPES.items()]
# A figure of the results that cannot be computed is NaN (±inf: an open interval end); pages
# show it as they show no value, by the results' one NaN rule.
templates.env.tests["none"] = missing
# An interval's end as the plots write it (∞, 5.4·10⁷).
templates.env.filters["bound"] = bound_text
