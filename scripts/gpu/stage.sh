#!/usr/bin/env bash
# Stage everything the lent H200 needs for scripts/gpu/run.sh, on a fresh checkout (ignored by git):
#   .gpu/d1 .. .gpu/d5  the vLLM 0.22.0 wheel in five 50-MiB parts q0..q4 (the tracked tree is ~5 MB and one
#                       call carries 64 MiB, so ../shared/gpu/stage-vllm's 60-MiB parts no longer fit)
#   .gpu/c5             vLLM's imports and install-on-gpu (joins q0..q4, checks the sha256, installs)
#   .whl                the studio's runtime wheels missing from the GPU image (Python 3.12, manylinux)
# Then, on the device tool, back to back: five calls with carry [".gpu/dK"] and command
# `mkdir -p /root/vl && cp .gpu/dK/q* /root/vl/` (K = 1..5), then `bash scripts/gpu/run.sh STEP...` with
# carry [".gpu/c5", ".whl"].
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p .git/info
bash ../shared/gpu/stage-vllm
whl=$(sed -n 's|^cat .* > /root/vl/\(vllm-[^ ]*\.whl\)$|\1|p' .gpu/c5/install-on-gpu)
sum=$(sed -n 's|^echo "\([0-9a-f]*\)  .*|\1|p' .gpu/c5/install-on-gpu)
cat .gpu/c1/part0 .gpu/c2/part1 .gpu/c3/part2 .gpu/c4/part3 .gpu/c5/part4 > .gpu/"$whl"
rm -rf .gpu/c1 .gpu/c2 .gpu/c3 .gpu/c4 .gpu/c5/part4 .gpu/d{1,2,3,4,5}
(cd .gpu && split -b 52428800 -d -a 1 "$whl" q)
[ ! -e .gpu/q5 ] || { echo "the wheel needs more than five 50-MiB parts" >&2; exit 1; }
for i in 0 1 2 3 4; do mkdir -p .gpu/d$((i + 1)) && mv .gpu/q$i .gpu/d$((i + 1))/; done
rm .gpu/"$whl"
cat > .gpu/c5/install-on-gpu <<INNER
#!/usr/bin/env bash
# Runs on the GPU machine: joins the five parts carried earlier, installs vLLM and its imports.
set -euo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd)
cat /root/vl/q0 /root/vl/q1 /root/vl/q2 /root/vl/q3 /root/vl/q4 > /root/vl/$whl
echo "$sum  /root/vl/$whl" | sha256sum -c --quiet || { echo "vLLM wheel incomplete: were the five part calls made on this same warm machine?"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /root/vl/$whl "\$here"/*.whl
INNER
chmod +x .gpu/c5/install-on-gpu
rm -rf .whl && mkdir .whl
grep -qx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl \
  soundfile==0.14.0 soxr==1.1.0 librosa==0.11.0 wetext==0.1.8 kaldifst contractions textsearch anyascii \
  pyahocorasick platformdirs==4.14.8 noisereduce==3.0.3 webrtcvad-wheels==2.0.14.post1 pyloudnorm==0.2.0 \
  audioread pooch decorator cffi pycparser
du -sh .gpu/* .whl
