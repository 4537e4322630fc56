"""Jinja2 templates (autoescaped: model and dataset text is untrusted)."""

from fastapi.templating import Jinja2Templates

from app import __version__
from app.config import PACKAGE
from app.results.stats.figure import missing

templates = Jinja2Templates(directory=str(PACKAGE / "templates"))
templates.env.globals["version"] = __version__
# A figure of the results that cannot be computed is NaN (±inf: an open interval end); pages
# show it as they show no value, by the results' one NaN rule.
templates.env.tests["none"] = missing
