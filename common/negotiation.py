"""Content negotiation that never refuses a request for its ``?format=``.

DRF reads ``?format=`` to pick a renderer and raises Http404, from inside the
view's setup and before any renderer is chosen, when no renderer has that
format: every API endpoint answered a fuzzer's ``?format=garbage`` with a 500.
The API speaks JSON only, so an unknown format is ignored instead; a known one
(``/api/schema?format=json``) still picks its renderer."""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer


class LenientContentNegotiation(DefaultContentNegotiation):
    def filter_renderers(
        self, renderers: Iterable[BaseRenderer], format: str
    ) -> list[BaseRenderer]:
        every = list(renderers)
        matching = [renderer for renderer in every if renderer.format == format]
        return matching or every
