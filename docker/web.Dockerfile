# The web service: FastAPI + SQLAlchemy, no torch (the image stays small, starts fast).
# Built as a wheel and installed from it: templates, static files and migrations live inside
# the `app` package, so the image runs what `pip install` ships (as .ci/wheel-check checks).
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY --from=wheel /wheels /wheels
RUN pip install /wheels/ebc_judge-*.whl && rm -rf /wheels \
 && useradd --system --create-home --home-dir /srv/ebc ebc
WORKDIR /srv/ebc
USER ebc
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz').status != 200)"
# `ebc serve` migrates the database first, then serves.
CMD ["ebc", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "4"]
