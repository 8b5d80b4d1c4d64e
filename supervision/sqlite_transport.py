"""The embedded broker's kombu transport (see supervision/broker.py); its own
module so that only processes that talk to the broker import SQLAlchemy."""

from kombu.transport.sqlalchemy import Transport


class SqliteTransport(Transport):
    """kombu's SQLAlchemy transport, polling every 0.2 s instead of every 1 s.

    A virtual transport sleeps the polling interval whenever it may not take a
    message, which with one message prefetched is after nearly every message:
    at 1 s the worker consumed about 2 tasks a second (bench/broker.py), barely
    more than beat's 1.5. (Not a transport option: kombu hands those to
    SQLAlchemy's create_engine, which refuses unknown ones.)"""

    polling_interval = 0.2
