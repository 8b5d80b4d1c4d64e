"""The API's JSON renderer: orjson, with the same bytes DRF's renderer gives.

DRF's renderer runs the standard library's encoder, several times slower than
orjson on the values agents send. Output stays DRF's: compact, UTF-8 (not
ASCII-escaped), U+2028/U+2029 escaped, and types orjson does not know (dates,
decimals, lazy strings) go through DRF's own encoder. What orjson cannot
encode at all (integers past 64 bits) falls back to DRF's renderer whole.
One spelling differs: a negative exponent has no leading zero (``1.5e-7``
where Python writes ``1.5e-07``), the same number to every JSON parser."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

_encoder = JSONEncoder()
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


class FastJSONRenderer(JSONRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        if self.get_indent(accepted_media_type or "", dict(renderer_context or {})):
            return super().render(data, accepted_media_type, renderer_context)
        try:
            out = orjson.dumps(data, default=_encoder.default, option=_OPTIONS)
        except (TypeError, orjson.JSONEncodeError):
            return super().render(data, accepted_media_type, renderer_context)
        # JavaScript string literals may not hold these two; DRF escapes them too.
        if b"\xe2\x80\xa8" in out or b"\xe2\x80\xa9" in out:
            out = out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return out
