# benchmaker job image: what every Snakemake job runs in on Kubernetes (profiles/nrp), and usable with
# `--sdm apptainer` on SLURM. CUDA-enabled torch (the PyPI Linux wheels bundle the CUDA runtime via the
# nvidia-* wheels; the node only needs an NVIDIA driver), open_clip, Snakemake with the S3 storage
# plugin, and the benchmaker library with its `benchmaker` command.
#
# Build and push to the NRP GitLab registry (docs/clusters.md):
#   docker build -t gitlab-registry.nrp-nautilus.io/ndp/sage/benchmaker:$(git rev-parse --short HEAD) .
#   docker login gitlab-registry.nrp-nautilus.io      # a GitLab deploy token with write_registry
#   docker push gitlab-registry.nrp-nautilus.io/ndp/sage/benchmaker:$(git rev-parse --short HEAD)
#   export BENCHMAKER_IMAGE=gitlab-registry.nrp-nautilus.io/ndp/sage/benchmaker:$(git rev-parse --short HEAD)
#
# SNAKEMAKE_VERSION must equal the controller's (`snakemake --version`): every job runs
# `python -m snakemake` from this image against the controller's workflow sources.
FROM python:3.11-slim-bookworm

ARG SNAKEMAKE_VERSION=9.27.1
ARG S3_PLUGIN_VERSION=0.3.6

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/cache/huggingface \
    MPLCONFIGDIR=/tmp/matplotlib

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/benchmaker

# dependencies first (cached layer): only pyproject.toml is needed to resolve them
COPY pyproject.toml README.md ./
RUN mkdir -p src/benchmaker && touch src/benchmaker/__init__.py \
    && pip install "snakemake==${SNAKEMAKE_VERSION}" \
        "snakemake-storage-plugin-s3==${S3_PLUGIN_VERSION}" \
        ".[k8s]" \
    && pip uninstall -y benchmaker

# the library itself (jobs import the checkout's src/ from the workflow sources first; this copy is
# the fallback and provides the `benchmaker` command)
COPY src ./src
RUN pip install --no-deps . \
    && python -c "from benchmaker import _tvshim; _tvshim.install(); import torch, open_clip, snakemake; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    && mkdir -p /cache/huggingface && chmod 1777 /cache /cache/huggingface

# the kubernetes executor mounts an emptyDir at /workdir and runs the job there
WORKDIR /workdir
CMD ["python", "-m", "snakemake", "--version"]
