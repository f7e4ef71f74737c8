"""The stateful models of the five dialects' client/server machine pairs, one
module each (``lumberjack``, ``pravega``, ``pravega_draft``, ``seastar_rpc``,
``tank``), all on :class:`~support.stateful.wire.MachinePair`.  Each exports its
model as ``PAIR`` and the hypothesis ``SETTINGS`` it runs under;
``tests/test_stateful.py`` runs them."""
