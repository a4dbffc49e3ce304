#!/usr/bin/env bash
# Makes gpu-kit/ inside the checkout (git-ignored), which tests/gpu/run.sh builds with on a GPU
# machine that has no package registry: the workplace's kit (build.sh and its Debian packages)
# plus the packages nimble needs that the kit lacks, downloaded here from Debian's registry.
#
#   bash tests/gpu/make_kit.sh [KIT_DIR]      (default ../shared/gpu, else /work/shared/gpu)
#
# Then carry gpu-kit with the checkout (the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=${1:-}
for candidate in "$KIT" ../shared/gpu /work/shared/gpu; do
  [ -n "$candidate" ] && [ -f "$candidate/build.sh" ] && { KIT=$candidate; break; }
done
[ -f "$KIT/build.sh" ] || { echo "make_kit.sh: no kit with a build.sh found (give its folder)" >&2; exit 1; }
rm -rf gpu-kit
cp -r "$KIT" gpu-kit
chmod -R u+w gpu-kit  # the workplace's copy is read-only
# Header-only packages that CMakeLists.txt requires and the kit has no .deb for.
EXTRA=(nlohmann-json3-dev)
for package in "${EXTRA[@]}"; do
  ls gpu-kit/debs/"${package}"_*.deb >/dev/null 2>&1 && continue
  (cd gpu-kit/debs && apt-get download -qq "$package")
done
echo "gpu-kit: $(ls gpu-kit/debs | tr '\n' ' ')"
