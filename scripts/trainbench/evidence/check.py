"""Is the evidence under docs/measured/ still what this code would measure? The README
carries the answer between two markers, and a test keeps it true
(``python scripts/evidence.py check --readme README.md``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainbench.evidence import EVIDENCE_FILE, evidence_folders, stale_files

BEGIN = "<!-- evidence-check: written by `python scripts/evidence.py check --update-readme README.md` -->"
END = "<!-- /evidence-check -->"
SHOWN = 12  # changed definitions named per folder; the rest counted


def staleness_lines(root: Path) -> list[str]:
    """Markdown lines: per evidence folder, its commit and the measurement code changed
    since it was made (or that none has)."""
    folders = evidence_folders(root)
    if not folders:
        return ["No evidence folder under docs/measured/."]
    lines = []
    for folder in folders:
        meta = json.loads((folder / EVIDENCE_FILE).read_text())
        stale = stale_files(folder, root)
        where = f"`{folder.relative_to(root)}` (commit `{str(meta['commit'])[:10]}`)"
        if stale:
            shown = ", ".join(f"`{f}`" for f in stale[:SHOWN])
            more = f" and {len(stale) - SHOWN} more" if len(stale) > SHOWN else ""
            lines.append(f"- {where}: **measurement code changed since**: {shown}{more}")
        else:
            lines.append(f"- {where}: measurement code unchanged since")
    return lines


def readme_block(root: Path) -> str:
    return "\n".join([BEGIN, *staleness_lines(root), END])


def _current_block(text: str) -> str | None:
    if BEGIN not in text or END not in text:
        return None
    start = text.index(BEGIN)
    return text[start : text.index(END, start) + len(END)]


def check_readme(root: Path, readme: Path) -> int:
    """0 when ``readme``'s evidence block says exactly what :func:`staleness_lines` says."""
    block = _current_block(readme.read_text())
    wanted = readme_block(root)
    if block == wanted:
        return 0
    print(
        f"{readme}: its evidence block does not list the measurement code changed since the "
        "evidence was made. Fix: measure again (make gpu-evidence), or run `python "
        "scripts/evidence.py check --update-readme README.md` and say in the README what changed.",
        file=sys.stderr,
    )
    return 1


def update_readme(root: Path, readme: Path) -> None:
    text = readme.read_text()
    block = _current_block(text)
    if block is None:
        raise SystemExit(f"{readme} has no evidence block ({BEGIN} ... {END})")
    readme.write_text(text.replace(block, readme_block(root)))
