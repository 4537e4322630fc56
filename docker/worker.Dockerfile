# The precompute worker: PyTorch with CUDA, transformers, and the app's data layer.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HF_HOME=/hf-cache
WORKDIR /srv/ebc
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
# torch comes with the base image; the extra adds transformers and tokenizers.
RUN pip install ".[worker]"
CMD ["ebc", "worker"]
