"""Each protocol's part of ``refwire chaos``, one module per protocol: its frame
observer, the fields rules may name, its ``--check`` invariants and its
:class:`~refwire.chaos.adapter.Adapter` (``ADAPTER``), which the protocol's
descriptor names (:mod:`refwire.protocols`)."""
