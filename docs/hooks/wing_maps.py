"""The architecture page's map of the house, generated at build time from each package's `__init__.py`.

Every wing keeps its own map in its `__init__.py` docstring (a test requires one); this mkdocs hook puts those
maps, and the modules each folder really holds, in place of a marker on `docs/development/architecture.md`.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

PAGE = "development/architecture.md"
MARKER = "<!-- wing-maps -->"
LAYERS = ("bot", "core", "knowledge", "personas")


def wing_maps(root: Path) -> str:
    """One section per package, layer by layer: its map, then the modules it holds."""
    sections = []
    for layer in LAYERS:
        for init in sorted((root / layer).rglob("__init__.py")):
            folder = init.parent
            docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            modules = sorted(path.name for path in folder.glob("*.py") if path.name != "__init__.py")
            held = ", ".join(f"`{name}`" for name in modules) or "none"
            sections.append(
                f"### `{folder.relative_to(root).as_posix()}/`\n\n{_markdown(docstring)}\n\nIn the folder: {held}.\n"
            )
    return "\n".join(sections)


def on_page_markdown(markdown: str, *, page: Any, config: Any, **_: Any) -> str:
    """mkdocs hook: put the maps in place of the marker on the architecture page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} marker: the wing maps have nowhere to go")
    return markdown.replace(MARKER, wing_maps(Path(config.config_file_path).parent))


def _markdown(docstring: str) -> str:
    """A docstring as Markdown: a list needs a blank line before it."""
    lines: list[str] = []
    for line in docstring.splitlines():
        if line.startswith("- ") and lines and lines[-1] and not lines[-1].startswith(("- ", "  ")):
            lines.append("")
        lines.append(line)
    return "\n".join(lines)
