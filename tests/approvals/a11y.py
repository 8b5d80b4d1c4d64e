"""axe-core, vendored under static/vendor (no CDN), run inside the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE_VERSION = "4.14.1"
AXE = (
    Path(__file__).resolve().parents[2]
    / "static"
    / "vendor"
    / f"axe-core-{AXE_VERSION}"
    / "axe.min.js"
)
BLOCKING = ("critical", "serious")


def axe_violations(page: Any, impacts: tuple[str, ...] = BLOCKING) -> list[dict[str, Any]]:
    """The page's axe violations of these impacts, each with the nodes it names."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # From the server's own static files: the pages' CSP allows only
        # same-origin scripts (no inline, no CDN).
        page.add_script_tag(url=f"/static/vendor/axe-core-{AXE_VERSION}/axe.min.js")
    results = page.evaluate(
        """async () => {
          const r = await axe.run(document, { resultTypes: ["violations"] });
          return r.violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " :: " + n.failureSummary),
          }));
        }"""
    )
    return [v for v in results if v["impact"] in impacts]


def report(violations: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{v['impact']} {v['id']}: {v['help']}\n  " + "\n  ".join(v["nodes"]) for v in violations
    )
