"""Render `dvc plots show` (or `dvc plots diff`) as HTML, open it in headless Chromium, take a
screenshot and fail unless every plot on the page rendered.

    python scripts/plots_page.py                        # dvc plots show, every plot
    python scripts/plots_page.py --diff HEAD~1          # dvc plots diff HEAD~1 (workspace)
    python scripts/plots_page.py plots/abacus/eval      # only these targets

DVC's page loads Vega from a CDN; this page inlines the same Vega, Vega-Lite and Vega-Embed
versions, installed once with npm into .cache/plots-page, so that it renders offline and from
file://. In the browser every vegaEmbed call is watched: a plot counts as rendered when its
promise resolved and its SVG holds at least one data mark; an image when it loaded with a
width. The verdict is written into the page, read back with --dump-dom, and printed; the exit
status is 1 when any plot failed. Needs `chromium` (Debian's package) and `npm` on PATH.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the versions dvc-render's own page loads (dvc_render/vega.py)
VEGA = {"vega": "5.20.2", "vega-lite": "5.2.0", "vega-embed": "6.18.2"}
BUNDLES = ["vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js",
           "vega-embed/build/vega-embed.min.js"]

WATCH = """
<script>
const embedOriginal = vegaEmbed;
const embeds = [];
window.vegaEmbed = (el, spec, opts) => {
  const done = embedOriginal(el, spec, {renderer: "svg", actions: false, ...(opts || {})}).then(
    () => ({id: el, ok: document.querySelectorAll(el + " g.role-mark > *").length > 0}),
    (err) => ({id: el, ok: false, error: String(err)}));
  embeds.push(done);
  return done;
};
window.addEventListener("load", () => Promise.all(embeds).then((vega) => {
  const images = [...document.images].map((img) => (
    {id: img.getAttribute("src"), ok: img.complete && img.naturalWidth > 0}));
  const report = document.createElement("pre");
  report.id = "plots-report";
  report.textContent = JSON.stringify({vega, images});
  document.body.appendChild(report);
}));
</script>
"""


def bundles(cache: Path) -> str:
    """The three libraries as inline <script> elements, installed with npm on first use."""
    modules = cache / "node_modules"
    if not all((modules / b).is_file() for b in BUNDLES):
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "package.json").write_text('{"name": "plots-page", "private": true}\n')
        # vega-embed 6.18 declares peer ranges that npm's resolver rejects for these pins
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--legacy-peer-deps",
                        *(f"{k}@{v}" for k, v in VEGA.items())], cwd=cache, check=True)
    return "\n".join(f"<script>{(modules / b).read_text()}</script>" for b in BUNDLES)


def page_template(scripts: str) -> str:
    return ("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>DVC plots</title>\n"
            f"{scripts}\n{WATCH}\n<style>body {{ font-family: sans-serif; }}</style>\n</head>\n"
            "<body>\n{plot_divs}\n</body>\n</html>\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="plot files or folders (default: every plot)")
    ap.add_argument("--diff", nargs="+", metavar="REV", help="dvc plots diff these revisions")
    ap.add_argument("--out", default="dvc_plots_page", help="folder for the page and screenshot")
    ap.add_argument("--size", default="1400,2400", help="browser window, WIDTH,HEIGHT")
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "plots-page"))
    args = ap.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("error: chromium not found on PATH (Debian: apt-get install chromium)",
              file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    template = out / "template.html"
    template.write_text(page_template(bundles(Path(args.cache))))
    cmd = ["dvc", "plots", *(["diff", *args.diff] if args.diff else ["show"]), *args.targets,
           "--html-template", str(template), "-o", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    index = out / "index.html"
    chrome = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--virtual-time-budget=60000", f"--window-size={args.size}"]
    dom = subprocess.run([*chrome, "--dump-dom", index.as_uri()], check=True,
                         capture_output=True, text=True).stdout
    subprocess.run([*chrome, f"--screenshot={out / 'page.png'}", index.as_uri()], check=True,
                   capture_output=True)
    found = re.search(r'<pre id="plots-report">(.*?)</pre>', dom, re.S)
    if found is None:
        print(f"error: {index}: the page never finished rendering", file=sys.stderr)
        return 1
    report = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    failed = [r for kind in ("vega", "images") for r in report[kind] if not r["ok"]]
    print(f"{len(report['vega'])} vega plots, {len(report['images'])} images rendered "
          f"into {index}; screenshot {out / 'page.png'}")
    for r in failed:
        print(f"not rendered: {r['id']} {r.get('error', '')}".rstrip(), file=sys.stderr)
    return 1 if failed or not (report["vega"] or report["images"]) else 0


if __name__ == "__main__":
    sys.exit(main())
