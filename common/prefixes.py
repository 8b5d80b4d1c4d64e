"""Case-sensitive id-prefix matching on every backend: the one rule behind key
scopes, list filters, watch and approval lists.

Django's ``__startswith`` is SQL ``LIKE``, which SQLite compares without regard
to ASCII case: a key scoped to ``team-a:`` would see ``TEAM-A:secret``. On SQLite
we use ``GLOB`` instead (case-sensitive, and it can still use the primary-key
index); PostgreSQL's ``LIKE`` is already case-sensitive.
"""

from __future__ import annotations

from django.db import connection, models
from django.db.models import CharField, Lookup

# GLOB's wildcards; each is made literal by putting it in a one-character class.
_GLOB_SPECIAL = {"*": "[*]", "?": "[?]", "[": "[[]"}


def glob_escape(text: str) -> str:
    return "".join(_GLOB_SPECIAL.get(ch, ch) for ch in text)


@CharField.register_lookup
class Glob(Lookup):
    """``field__glob="pattern"``: SQLite's case-sensitive GLOB."""

    lookup_name = "glob"

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} GLOB {rhs}", [*lhs_params, *rhs_params]


def prefix_matches(text: str, prefix: str) -> bool:
    """The rule in Python, for ids already in hand."""
    return text.startswith(prefix)


def prefix_q(field: str, prefix: str) -> models.Q:
    """A filter for ``field`` starting with ``prefix``, case-sensitively."""
    if connection.vendor == "sqlite":
        return models.Q(**{f"{field}__glob": glob_escape(prefix) + "*"})
    return models.Q(**{f"{field}__startswith": prefix})


def scopes_q(field: str, prefixes: list[str]) -> models.Q:
    """Any of ``prefixes`` (a key's scopes); no prefixes means everything."""
    scope = models.Q()
    for prefix in prefixes:
        scope |= prefix_q(field, prefix)
    return scope


def within_prefixes(text: str, prefixes: list[str]) -> bool:
    """A key's scope check for one id: no prefixes means everything."""
    return not prefixes or any(prefix_matches(text, p) for p in prefixes)


def scope_within(inner: list[str], outer: list[str]) -> bool:
    """Whether every id a key scoped to ``inner`` may touch, one scoped to ``outer``
    may touch too: each inner prefix starts with an outer one. No prefixes means
    everything, which only an unscoped ``outer`` covers."""
    if not outer:
        return True
    if not inner:
        return False
    return all(within_prefixes(prefix, outer) for prefix in inner)
