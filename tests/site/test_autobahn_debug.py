"""The autobahn patch (zerolock_site/autobahn_debug.py) still reaches the code it
was written for: if autobahn stops calling the module's ``pformat`` per socket,
this fails and the patch should go."""

from __future__ import annotations

import inspect

from autobahn.websocket import protocol

import zerolock_site.asgi  # noqa: F401  (installs the patch)


def test_autobahn_formats_its_per_socket_debug_lines_with_the_replaced_name():
    made = inspect.getsource(protocol.WebSocketProtocol._connectionMade)
    assert "pformat(configAttrLog)" in made
    assert protocol.pformat is repr
