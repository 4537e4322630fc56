"""Jinja2 templates (autoescaped: model and dataset text is untrusted)."""

from fastapi.templating import Jinja2Templates

from app import __version__
from app.config import PACKAGE

templates = Jinja2Templates(directory=str(PACKAGE / "templates"))
templates.env.globals["version"] = __version__
