"""CI: the HTML report of `snakemake --report` shows the verdicts (the reports as HTML
pages, category "1. Verdicts"), the workflow description and every figure."""

import re
import sys
import zipfile

path = sys.argv[1]
with zipfile.ZipFile(path) as archive:
    names = archive.namelist()
    main = archive.read(next(n for n in names if n.endswith("report/report.html"))).decode()
    pages = {n: archive.read(n).decode() for n in names if n.endswith(".html") and "/raw/" in n}
problems = []
if not any(n.endswith("/report.html") for n in pages):
    problems.append("the index report is not in the HTML report")
if not any("Verification report" in text for text in pages.values()):
    problems.append("no workload verification report in the HTML report")
# The pages show each verdict as a badge (trainbench.analysis.html.MARKS), not an emoji.
if not any(
    re.search(r'class="mark mark-(ok|failed|warning|unavailable)"', t) for t in pages.values()
):
    problems.append("no verdict badge in any report page")
if "1. Verdicts" not in main:
    problems.append("no category '1. Verdicts'")
if "numerical canary" not in main:
    problems.append("the workflow description is missing")
for figure in ("throughput", "speedup", "epoch_time", "loss", "per_label", "matmul", "memory"):
    if not any(n.endswith(f"/{figure}.png") for n in names):
        problems.append(f"figure {figure} missing")
for problem in problems:
    print(f"check_report: {problem}", file=sys.stderr)
print(f"check_report: {path}: {len(pages)} pages, {len(names)} files, {len(problems)} problems")
sys.exit(1 if problems else 0)
