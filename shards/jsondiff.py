from __future__ import annotations

from typing import Any

import jsonpatch


def json_diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """RFC 6902 patch turning ``old`` into ``new``."""
    return jsonpatch.make_patch(old, new).patch
