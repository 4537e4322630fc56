# The precompute worker: PyTorch with CUDA, transformers, and the app's data layer.
# transformers 5 needs torch >= 2.6 (it disables itself under older ones, as 2.5.1 was).
# The official image of torch 2.9.0 built for CUDA 12.8 (current GPUs, Blackwell included);
# the host needs an NVIDIA driver for CUDA 12.8 (the 570 series or later).
FROM pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HF_HOME=/hf-cache
COPY --from=wheel /wheels /wheels
# torch comes with the base image (the worker extra's range accepts it, so pip keeps it);
# the extra adds transformers and tokenizers.
RUN pip install "$(ls /wheels/ebc_judge-*.whl)[worker]" && rm -rf /wheels
WORKDIR /srv/ebc
CMD ["ebc", "worker"]
