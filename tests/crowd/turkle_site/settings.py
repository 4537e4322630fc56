"""Django settings of a minimal Turkle site: Turkle's own `turkle_site/settings.py` reduced
to what it needs on one machine. The database is the SQLite file `TURKLE_DB` (default
`turkle.sqlite3`); `TURKLE_DEBUG=1` serves the static files (runserver, tests only)."""

import os
import secrets

DEBUG = os.environ.get("TURKLE_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
X_FRAME_OPTIONS = "SAMEORIGIN"
TURKLE_SITE_NAME = "Turkle"
STATIC_URL = "/static/"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("TURKLE_DB", "turkle.sqlite3"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
USE_TZ = True
# Sessions and CSRF tokens only; set TURKLE_SECRET_KEY to keep logins over restarts.
SECRET_KEY = os.environ.get("TURKLE_SECRET_KEY") or secrets.token_urlsafe(50)
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.contrib.auth.context_processors.auth",
                "django.template.context_processors.debug",
                "django.template.context_processors.request",
                "django.template.context_processors.static",
                "django.contrib.messages.context_processors.messages",
                "turkle.utils.turkle_vars",
            ],
        },
    },
]
MIDDLEWARE = (
    "django.middleware.common.CommonMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
ROOT_URLCONF = "tests.crowd.turkle_site.urls"
INSTALLED_APPS = (
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "turkle",  # before the admin: Turkle's login templates win
    "django.contrib.admin",
    "rest_framework",
    "rest_framework.authtoken",
    "turkle.api",
    "guardian",
    "djaa_list_filter2",
)
AUTHENTICATION_BACKENDS = (
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
)
TURKLE_TEMPLATE_LIMIT = 256  # KB: a HIT of 11 texts is about 8
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "index"
LOGOUT_REDIRECT_URL = "index"
META_TAGS = []
TURKLE_EMAIL_ENABLED = False
TURKLE_AUTO_ACCEPT_DEFAULT = False  # a worker asks for the next Task (the test does)
