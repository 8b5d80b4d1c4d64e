"""Statements for the hot write and read paths, compiled once per model.

Why not the ORM here: a profile of appends under load (bench/profile.py
--gil) put about 40 % of the web process's CPU in building and compiling
querysets (filter, add_q, resolve_expression, as_sql) for a handful of
statements whose shape never changes. These helpers build that SQL once per
model and database vendor and reuse it, while still going through Django's
cursor (so transactions, savepoints, query capture in tests and the
connection's tuning all apply) and through each field's own conversion in both
directions (``get_db_prep_save`` going in, the field's and backend's
converters coming out), so values round-trip exactly as the ORM would give
them. Only plain column equality (and ``IS NULL`` in an UPDATE's WHERE) is
offered, and one conflict rule (``insert_unless``): anything richer belongs in
the ORM.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def _qn(name: str | None) -> str:
    assert name is not None  # every concrete column and table has one
    return connection.ops.quote_name(name)


@functools.cache
def _fields(model: type[models.Model], names: tuple[str, ...]) -> list[models.Field]:
    return [model._meta.get_field(name) for name in names]  # type: ignore[misc]


def _where(
    model: type[models.Model], names: tuple[str, ...], nulls: frozenset[str] = frozenset()
) -> str:
    """Column equality, or ``IS NULL`` for the ``nulls`` (a None in ``where``, as
    the ORM's ``filter(column=None)``): those take no parameter."""
    return " AND ".join(
        f"{_qn(f.column)} IS NULL" if name in nulls else f"{_qn(f.column)} = %s"
        for name, f in zip(names, _fields(model, names), strict=True)
    )


def _where_params(
    model: type[models.Model], where: dict[str, Any]
) -> tuple[frozenset[str], list[Any]]:
    """The ``IS NULL`` columns of ``where``, and the parameters of the others."""
    nulls = frozenset(name for name, value in where.items() if value is None)
    if not nulls:
        return nulls, _params(model, where)
    return nulls, _params(model, {k: v for k, v in where.items() if k not in nulls})


@functools.cache
def _select(
    model: type[models.Model],
    vendor: str,
    columns: tuple[str, ...],
    where: tuple[str, ...],
    for_update: bool,
) -> tuple[str, list[tuple[str, Any, list[Any]]]]:
    fields = _fields(model, columns)
    sql = "SELECT {} FROM {} WHERE {}".format(
        ", ".join(_qn(f.column) for f in fields), _qn(model._meta.db_table), _where(model, where)
    )
    if for_update and connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    # What the ORM's compiler would apply to each column on the way out (a
    # SQLite datetime string becomes a datetime, JSON text becomes Python, ...).
    converters = []
    for f in fields:
        col = f.get_col(model._meta.db_table)
        # Django 5.2 has Field.get_db_converters; django-stubs 5.2 leaves it out.
        convs = connection.ops.get_db_converters(col) + f.get_db_converters(connection)  # type: ignore[attr-defined]
        converters.append((f.attname, col, convs))
    return sql, converters


def _params(model: type[models.Model], values: dict[str, Any]) -> list[Any]:
    return [
        f.get_db_prep_save(values[name], connection)
        for name, f in zip(values, _fields(model, tuple(values)), strict=True)
    ]


def select_one(
    model: type[models.Model], columns: Sequence[str], *, for_update: bool = False, **where: Any
) -> dict[str, Any] | None:
    """One row's ``columns`` (by attribute name) where every ``where`` column
    equals its value, or None. ``for_update`` locks the row where the database
    can (SQLite's IMMEDIATE transaction already holds the whole file)."""
    sql, converters = _select(model, connection.vendor, tuple(columns), tuple(where), for_update)
    with connection.cursor() as cursor:
        cursor.execute(sql, _params(model, where))
        row = cursor.fetchone()
    if row is None:
        return None
    out = {}
    for value, (name, col, convs) in zip(row, converters, strict=True):
        for conv in convs:
            value = conv(value, col, connection)
        out[name] = value
    return out


def instance_by_pk(model: type[M], pk: Any, *, exclude: Sequence[str] = ()) -> M | None:
    """The model instance with this primary key (the ``exclude``d fields left
    deferred: reading one later costs a query, as with ``defer``), or None."""
    return instance_where(model, exclude=exclude, **{model._meta.pk.attname: pk})


def instance_where(model: type[M], *, exclude: Sequence[str] = (), **unique: Any) -> M | None:
    """The one model instance whose ``unique`` columns equal these values, or None."""
    names = tuple(f.attname for f in model._meta.concrete_fields if f.attname not in exclude)
    row = select_one(model, names, **unique)
    if row is None:
        return None
    return model.from_db(connection.alias, list(names), list(row.values()))


@functools.cache
def _update(
    model: type[models.Model],
    vendor: str,
    columns: tuple[str, ...],
    bump: str,
    where: tuple[str, ...],
    nulls: frozenset[str],
) -> str:
    sets = [f"{_qn(f.column)} = %s" for f in _fields(model, columns)]
    if bump:
        # Counted by the database, as F() + 1 would be: a parameter of
        # ``where[bump] + 1`` could pass 64 bits before the WHERE refused the row.
        column = _qn(model._meta.get_field(bump).column)  # type: ignore[union-attr]
        sets.append(f"{column} = {column} + 1")
    return "UPDATE {} SET {} WHERE {}".format(
        _qn(model._meta.db_table), ", ".join(sets), _where(model, where, nulls)
    )


def update_where(
    model: type[models.Model], values: dict[str, Any], *, bump: str = "", **where: Any
) -> int:
    """``UPDATE ... SET values WHERE where``; ``bump`` names an integer column
    the database adds one to (a version counter the ``where`` checks); a None in
    ``where`` is ``IS NULL``. Returns the number of rows changed."""
    nulls, where_params = _where_params(model, where)
    sql = _update(model, connection.vendor, tuple(values), bump, tuple(where), nulls)
    with connection.cursor() as cursor:
        cursor.execute(sql, _params(model, values) + where_params)
        return cursor.rowcount


@functools.cache
def _insert(
    model: type[models.Model],
    vendor: str,
    columns: tuple[str, ...],
    unless: tuple[str, ...] = (),
) -> tuple[str, bool]:
    """The INSERT, and whether it returns the primary key the database chose."""
    fields = _fields(model, columns)
    pk = model._meta.pk
    returns = pk is not None and pk.attname not in columns
    conflict = ""
    if unless:
        # Both SQLite (3.24+) and PostgreSQL spell it so; RETURNING then gives no row.
        conflict = " ON CONFLICT ({}) DO NOTHING".format(
            ", ".join(_qn(f.column) for f in _fields(model, unless))
        )
    return "INSERT INTO {} ({}) VALUES ({}){}{}".format(
        _qn(model._meta.db_table),
        ", ".join(_qn(f.column) for f in fields),
        ", ".join(["%s"] * len(fields)),
        conflict,
        f" RETURNING {_qn(pk.column)}" if returns else "",
    ), returns


def insert(model: type[models.Model], values: dict[str, Any]) -> Any:
    """Inserts one row; returns its new primary key when the database made it."""
    sql, returns = _insert(model, connection.vendor, tuple(values))
    with connection.cursor() as cursor:
        cursor.execute(sql, _params(model, values))
        return cursor.fetchone()[0] if returns else None


def insert_unless(model: type[models.Model], values: dict[str, Any], unique: Sequence[str]) -> Any:
    """Inserts one row unless a row with the same ``unique`` columns (a unique
    constraint's) is there: its new primary key, or None when nothing was
    inserted. No IntegrityError, so no savepoint is needed around it on PostgreSQL."""
    sql, returns = _insert(model, connection.vendor, tuple(values), tuple(unique))
    assert returns, "insert_unless tells what happened by the primary key it returns"
    with connection.cursor() as cursor:
        cursor.execute(sql, _params(model, values))
        row = cursor.fetchone()
        return None if row is None else row[0]


def insert_many(model: type[models.Model], rows: Sequence[dict[str, Any]]) -> None:
    """Inserts rows that all name the same columns, with one executemany (no
    primary keys come back). Call it inside a transaction: in autocommit each
    row would be a transaction of its own."""
    if not rows:
        return
    sql, returns = _insert(model, connection.vendor, tuple(rows[0]))
    if returns:
        sql = sql.rsplit(" RETURNING ", 1)[0]
    with connection.cursor() as cursor:
        cursor.executemany(sql, [_params(model, row) for row in rows])


def insert_instance(instance: models.Model) -> None:
    """Saves a new, unsaved instance with one INSERT (no signals: the hot path's
    models have no receivers), and gives it the primary key the database chose."""
    model = type(instance)
    pk = model._meta.pk
    values = {
        f.attname: f.pre_save(instance, add=True)
        for f in model._meta.concrete_fields
        if not (f is pk and getattr(instance, f.attname) is None)
    }
    new_pk = insert(model, values)
    if pk is not None and getattr(instance, pk.attname) is None:
        setattr(instance, pk.attname, new_pk)
    instance._state.adding = False
    instance._state.db = connection.alias
