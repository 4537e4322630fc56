# The web service: FastAPI + SQLAlchemy, no torch (the image stays small, starts fast).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /srv/ebc
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN pip install . && useradd --system --home /srv/ebc ebc
USER ebc
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz').status != 200)"
# `ebc serve` migrates the database first, then serves.
CMD ["ebc", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "4"]
