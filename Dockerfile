# The StreamMAP image: what `streammap export k8s` runs by default (--image streammap:VERSION).
# Build it with `make image` (docker build -t streammap:VERSION .), then tag and push it to a registry
# the cluster's nodes pull from, and export with --image REGISTRY/streammap:VERSION.
#
# The CUDA 12 runtime and cupy-cuda12x run on every NVIDIA driver from 525 on; for a cluster whose
# drivers all support CUDA 13 (580 and newer), build with
#   make image CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04 GPU_EXTRA=gpu-cuda13
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

ARG GPU_EXTRA=gpu-cuda12
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/streammap \
    PATH=/opt/streammap/bin:$PATH

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/streammap

# The project and its `cluster` extra (Ray), with the CuPy this image's CUDA runs.
WORKDIR /src/streammap
COPY pyproject.toml README.md ./
COPY streammap ./streammap
COPY directives ./directives
COPY runtime ./runtime
COPY samples ./samples
RUN pip install --no-cache-dir ".[cluster,${GPU_EXTRA}]" \
 && streammap --version

WORKDIR /work
CMD ["streammap", "--help"]
