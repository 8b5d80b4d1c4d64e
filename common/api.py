"""The base of every API view: DRF's APIView without its per-request setup work.

DRF builds new authenticator, permission, parser and renderer objects and a new
content negotiator for every request, and parses the Accept header through its
general media-type matcher even when a client accepts anything. Ours are
stateless, so each view class builds them once. A request that accepts anything
(no Accept header, or ``*/*``, which is what agents' HTTP clients send) gets the
first renderer at once, as DRF's negotiation would pick it; anything else goes
through DRF's negotiation as before."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.views import APIView

ANYTHING = ("", "*/*")


class ApiView(APIView):
    def _built_once(self, name: str, classes: Any) -> list[Any]:
        cls = type(self)
        cache = cls.__dict__.get("_policies")
        if cache is None:
            cache = {}
            cls._policies = cache  # type: ignore[attr-defined]  # this class's own
        built = cache.get(name)
        if built is None:
            built = cache[name] = [policy() for policy in classes]
        return built

    def get_authenticators(self) -> list[Any]:
        return self._built_once("authenticators", self.authentication_classes)

    def get_permissions(self) -> list[Any]:
        return self._built_once("permissions", self.permission_classes)

    def get_parsers(self) -> list[Any]:
        return self._built_once("parsers", self.parser_classes)

    def get_renderers(self) -> list[Any]:
        return self._built_once("renderers", self.renderer_classes)

    def get_content_negotiator(self) -> Any:
        return self._built_once("negotiator", [self.content_negotiation_class])[0]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        accept = request.META.get("HTTP_ACCEPT", "").strip()
        if accept in ANYTHING and not self.format_kwarg and "format" not in request.GET:
            renderer = self.get_renderers()[0]
            return renderer, renderer.media_type
        return super().perform_content_negotiation(request, force)
