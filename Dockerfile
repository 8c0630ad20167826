# benchmaker image: what every Snakemake job runs in on Kubernetes (profiles/nrp), what the controller
# Job runs in (deploy/nrp/controller-job.yaml), and usable with `--sdm apptainer` on SLURM.
#
# torch/CUDA build, chosen deliberately (docs/clusters.md, "The image"): torch and torchvision come
# from PyTorch's own wheel index for ONE CUDA version, given by TORCH_INDEX_URL, never from PyPI
# (PyPI's Linux torch 2.13 wheel is a CUDA 13 build, which needs an NVIDIA driver >= 580 on the node).
# The default, cu128 (CUDA 12.8, bundled in the wheels), runs on drivers >= 570 and, through CUDA's
# minor-version compatibility, on any 12.x driver >= 525, which covers NRP's GPU nodes (check a node
# with `nvidia-smi`: docs/clusters.md). Other builds:
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130   # drivers >= 580
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu     # CPU only (small image)
# A torch version the index does not have fails the build (no silent fallback to another build).
#
# Build and push: .gitlab-ci.yml (Kaniko, on NRP's GitLab) or by hand (docs/clusters.md):
#   docker build -t gitlab-registry.nrp-nautilus.io/<group>/<project>/benchmaker:$(git rev-parse --short HEAD) .
#
# SNAKEMAKE_VERSION must equal the controller's (`snakemake --version`): every job runs
# `python -m snakemake` from this image against the controller's workflow sources.
FROM python:3.11-slim-bookworm

ARG SNAKEMAKE_VERSION=9.27.1
ARG S3_PLUGIN_VERSION=0.3.6
ARG K8S_PLUGIN_VERSION=0.5.1
ARG TORCH_VERSION=2.13.0
ARG TORCHVISION_VERSION=0.28.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/cache/huggingface \
    NUMBA_CACHE_DIR=/cache/numba \
    MPLCONFIGDIR=/tmp/matplotlib

# git: Snakemake lists the workflow sources with `git ls-files` when it ships them to the pods
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates procps git \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/benchmaker

# torch first, from the chosen CUDA index only
RUN pip install --index-url "${TORCH_INDEX_URL}" \
        "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"

# dependencies (cached layer): only pyproject.toml is needed to resolve them; torch is already there
COPY pyproject.toml README.md ./
RUN mkdir -p src/benchmaker && touch src/benchmaker/__init__.py \
    && pip install "snakemake==${SNAKEMAKE_VERSION}" \
        "snakemake-storage-plugin-s3==${S3_PLUGIN_VERSION}" \
        "snakemake-executor-plugin-kubernetes==${K8S_PLUGIN_VERSION}" \
        ".[k8s]" \
    && pip uninstall -y benchmaker

# the library (jobs import the checkout's src/ from the shipped workflow sources first; this copy
# is the fallback and provides the `benchmaker` command) and the workflow itself, which the
# controller Job copies into its working folder
COPY src ./src
COPY Snakefile ./
COPY rules ./rules
COPY scripts ./scripts
COPY config ./config
COPY profiles ./profiles
COPY envs ./envs
RUN pip install --no-deps . \
    && python -c "from benchmaker import _tvshim; _tvshim.install(); import torch, open_clip, snakemake; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    && python -m benchmaker.evaluate.warm \
    && python -m benchmaker.plan.warm \
    && mkdir -p /cache/huggingface && chmod 1777 /cache /cache/huggingface && chmod -R a+rwX /cache/numba

# the kubernetes executor mounts an emptyDir at /workdir and runs the job there
WORKDIR /workdir
CMD ["python", "-m", "snakemake", "--version"]
