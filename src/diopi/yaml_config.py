"""Reading the YAML config files of diopi (device configs of the conformance suite, adaptor configs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_yaml_mapping(path: str | Path, *, what: str, sections: tuple[str, ...],
                      error: type[Exception]) -> dict[str, Any]:
    """The top-level mapping of the YAML file ``path`` (empty file: ``{}``), whose keys must be among
    ``sections``. Every problem raises ``error`` with a message naming the file (``what`` says what it is)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{name}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{name}: not valid YAML: {exc}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise error(f"{name}: expected a mapping with keys {', '.join(sections)}, got {type(doc).__name__}")
    for key in doc:
        if key not in sections:
            raise error(f"{name}: unknown key {key!r}: not a section of a {what} (sections: {', '.join(sections)})")
    return doc
