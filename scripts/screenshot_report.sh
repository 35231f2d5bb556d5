#!/usr/bin/env bash
# Look at a run's report.html in a real browser: headless Chromium renders it to a PNG.
#
# Usage: scripts/screenshot_report.sh RUN_DIR [OUT.png] [FRAGMENT]
#   RUN_DIR   a finished pipeline run (report.html is written from its files first when it has none)
#   OUT.png   default RUN_DIR/report.png
#   FRAGMENT  how the page opens, e.g. "fold=plots,run&item=<id>" (sections folded, that row opened), "filter=wrong"
# Env: WINDOW_SIZE (default 1280,1600). Needs Debian's chromium (apt-get install chromium).
set -euo pipefail
run_dir=$(realpath "${1:?usage: scripts/screenshot_report.sh RUN_DIR [OUT.png] [FRAGMENT]}")
out=$(realpath -m "${2:-$run_dir/report.png}")
fragment=${3:-}
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
if [ ! -f "$run_dir/report.html" ]; then
  "$python" -m veracity.infer.report_html "$run_dir"
fi
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "no Chromium found: apt-get install chromium (Debian) or set PATH" >&2
  exit 2
fi
flags=(--headless --disable-gpu --hide-scrollbars --no-first-run --disable-extensions --disable-background-networking
       --window-size="${WINDOW_SIZE:-1280,1600}" --virtual-time-budget=3000)
if [ "$(id -u)" = 0 ]; then
  flags+=(--no-sandbox)  # Chromium refuses to run as root with its sandbox
fi
mkdir -p "$(dirname "$out")"
url="file://$run_dir/report.html${fragment:+#$fragment}"
"$browser" "${flags[@]}" --screenshot="$out" "$url" 2> >(grep -v -e dbus -e Fontconfig -e 'unexpected operator' >&2 || true)
echo "$out ($(du -k "$out" | cut -f1) KB)"
